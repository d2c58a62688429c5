"""dvc.yaml as DVC reads it: each method's stages depend on the shared modules it imports, and every out is
``persist`` (a refused params.yaml never costs outputs: tests/integration/test_dvc.py runs that end to end)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from models.registry import METHODS
from tasks.dvc_pipeline import render_dvc_yaml, shared_modules
from tests.conftest import ROOT

TINY_LM = "models/common/tiny_lm.py"


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """The committed dvc.yaml resolved by DVC itself (in a scratch repo: the real one may be busy)."""
    from dvc.repo import Repo

    where = tmp_path_factory.mktemp("dvc")
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=where, check=True)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / name, where / name)
    repo = Repo(str(where))
    try:
        return {s.name: s for s in repo.index.stages}
    finally:
        repo.close()


def _covers(dep: str, path: str) -> bool:
    return path == dep or path.startswith(dep.rstrip("/") + "/")


@pytest.mark.sync
def test_committed_dvc_yaml_is_the_generated_one():
    assert (ROOT / "dvc.yaml").read_text() == render_dvc_yaml(), "run `paperline params --write`"


def test_each_method_depends_on_exactly_the_shared_code_it_imports(stages):
    assert set(stages) == {f"{step}@{slug}" for step in ("prepare", "train", "evaluate") for slug in METHODS}
    for name, stage in stages.items():
        slug = name.split("@")[1]
        deps = {d.def_path for d in stage.deps}
        code = {d for d in deps if d.startswith(("models/", "tasks/")) and not _covers(f"models/{slug}", d)}
        assert "models/common" not in deps, name  # the whole folder would rerun all 19 on any edit
        assert code == {"models/base.py", "tasks/steps.py", *shared_modules(slug)}, name


def test_only_the_tiny_lm_method_depends_on_it(stages):
    users = {slug for slug in METHODS if TINY_LM in shared_modules(slug)}
    assert users == {"self_ref"}  # the one method whose code imports it today
    for name, stage in stages.items():
        covered = any(_covers(d.def_path, TINY_LM) for d in stage.deps)
        assert covered == (name.split("@")[1] in users), name


def test_every_out_is_persistent(stages):
    for name, stage in stages.items():
        assert stage.outs and all(out.persist for out in stage.outs), name


def test_the_import_walk_is_transitive_and_reads_lazy_and_relative_imports(tmp_path):
    files = {
        "models/__init__.py": "",
        "models/base.py": "from models.common import used\n",
        "models/common/__init__.py": "",
        "models/common/used.py": "from .helper import x  # relative\n",
        "models/common/helper.py": "import numpy\nx = 1\n",
        "models/common/lazy.py": "from models.common import deep\n",
        "models/common/deep.py": "",
        "models/common/unused.py": "",
        "models/other/__init__.py": "",
        "models/toy/__init__.py": "from . import pipeline\n",
        "models/toy/pipeline.py": "def f():\n    import models.common.lazy  # only when called\n",
        "tasks/steps.py": "from models.base import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert shared_modules("toy", tmp_path) == [
        "models/__init__.py",
        "models/common/__init__.py",
        "models/common/deep.py",
        "models/common/helper.py",
        "models/common/lazy.py",
        "models/common/used.py",
    ]


@pytest.mark.parametrize("slug", ["sleeping_rl", "win_rate"])
def test_the_walk_finds_every_shared_module_python_loads(slug):
    """What importing every module of the method (and the steps) really loads is within its deps."""
    code = (
        "import importlib, pathlib, sys\n"
        f"for p in sorted(pathlib.Path('models/{slug}').rglob('*.py')):\n"
        "    importlib.import_module('.'.join(p.with_suffix('').parts).removesuffix('.__init__'))\n"
        "import tasks.steps\n"
        "print('\\n'.join(m.__file__ for n, m in sys.modules.items()"
        " if n.split('.')[0] == 'models' and getattr(m, '__file__', None)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded = {Path(f).resolve().relative_to(ROOT).as_posix() for f in out.split()}
    loaded = {p for p in loaded if not p.startswith(f"models/{slug}/")}
    assert loaded <= {"models/base.py", "tasks/steps.py", *shared_modules(slug)}, loaded


def test_prepare_depends_on_the_raw_files_a_method_names(stages, tmp_path):
    from tasks.dvc_pipeline import raw_inputs

    for slug in METHODS:
        deps = {d.def_path for d in stages[f"prepare@{slug}"].deps}
        assert set(raw_inputs(slug)) <= deps, slug
        assert not any(d.def_path.startswith("data/raw/") for d in stages[f"train@{slug}"].deps), slug
    # A name, or a folder prefix, written anywhere in the method's code counts; other strings do not.
    for path in ("models/base.py", "tasks/steps.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "models" / "fake").mkdir()
    (tmp_path / "models" / "fake" / "data.py").write_text('A = "fsdd/recordings.tar"\nB = "graphs/"\nC = "other/"\n')
    found = raw_inputs("fake", tmp_path)
    assert "data/raw/fsdd/recordings.tar" in found and "data/raw/graphs/cora.npz" in found
    assert all(p.startswith(("data/raw/fsdd/", "data/raw/graphs/")) for p in found)
