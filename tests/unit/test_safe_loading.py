"""No unpickling of arbitrary objects: every ``torch.load`` in the project passes ``weights_only=True``;
no ``pickle``/``joblib``/``dill`` loads, no ``allow_pickle=True``, no third-party reader that unpickles user
files (torch_geometric's Planetoid reader); the one ``pickle.Unpickler`` (``models/common/safe_pickle.py``, for
MNIST's and Planetoid's pickles) is an allow-list subclass overriding ``find_class``; checkpoints resume under
``weights_only=True``."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

SOURCES = sorted(p for folder in ("models", "tasks", "flows") for p in (ROOT / folder).rglob("*.py"))
# Calls that unpickle whatever the bytes say (dotted names after resolving `import x as y` / `from x import y`).
UNSAFE_CALLS = {
    f"{module}.{name}"
    for module in ("pickle", "_pickle", "cloudpickle", "dill")
    for name in ("load", "loads", "Unpickler")
} | {"joblib.load", "pandas.read_pickle", "shelve.open"}
# Third-party readers that call pickle.load on the files they are given.
UNPICKLING_MODULES = ("torch_geometric.io.planetoid", "torch_geometric.datasets")


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted origin for every import in the module (at any depth)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _keyword(node: ast.Call, name: str):
    for kw in node.keywords:
        if kw.arg == name:
            return kw.value.value if isinstance(kw.value, ast.Constant) else "<expr>"
    return None


def audit(source: str, where: str) -> list[str]:
    """Every unsafe deserialisation in one module's source, as 'where:line: what'."""
    tree = ast.parse(source, where)
    aliases = _aliases(tree)
    problems = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            modules += [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if any(m == u or m.startswith(u + ".") for m in modules for u in UNPICKLING_MODULES):
                problems.append(f"{line}: imports {', '.join(modules)}, whose readers pickle.load user files")
        elif isinstance(node, ast.ClassDef):
            bases = {_dotted(b, aliases) for b in node.bases}
            overrides = any(isinstance(f, ast.FunctionDef) and f.name == "find_class" for f in node.body)
            if bases & {"pickle.Unpickler", "_pickle.Unpickler"} and not overrides:
                problems.append(f"{line}: {node.name} subclasses pickle.Unpickler without an allow-list find_class")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func, aliases)
            attr = node.func.attr if isinstance(node.func, ast.Attribute) else name
            if name in UNSAFE_CALLS:
                problems.append(f"{line}: {name} unpickles arbitrary objects")
            if name == "torch.load" and _keyword(node, "weights_only") is not True:
                problems.append(f"{line}: torch.load without weights_only=True")
            if attr and attr.endswith("load") and _keyword(node, "allow_pickle") not in (None, False):
                problems.append(f"{line}: allow_pickle={_keyword(node, 'allow_pickle')}")
            if attr == "fit" and _keyword(node, "ckpt_path") is not None and _keyword(node, "weights_only") is None:
                problems.append(f"{line}: Trainer.fit(ckpt_path=...) without weights_only")
    return problems


def test_sources_were_found():
    assert len(SOURCES) > 50


def test_one_unpickler_in_the_project():
    """Every pickle format goes through ``safe_pickle.load``: a second Unpickler subclass would be a second
    allow-list to audit."""
    subclasses = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        aliases = _aliases(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                if {_dotted(b, aliases) for b in node.bases} & {"pickle.Unpickler", "_pickle.Unpickler"}:
                    subclasses.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert subclasses == ["models/common/safe_pickle.py:_AllowListUnpickler"]


def test_safe_pickle_builds_arrays_and_refuses_anything_else():
    import io
    import os
    import pickle

    import numpy as np

    from models.common import safe_pickle

    class Refused(Exception):
        pass

    def refuse(module, name):
        return Refused(f"{module}.{name}")

    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.int64(7)]
    for protocol in (0, 2, 4):  # the protocols of the official (Python 2 era) files and a later one
        loaded = safe_pickle.load(io.BytesIO(pickle.dumps(arrays, protocol)), safe_pickle.numpy_array_globals(), refuse)
        assert np.array_equal(loaded[0], arrays[0]) and loaded[1] == 7
    with pytest.raises(Refused, match=r"(posix|os)\.system"):
        safe_pickle.load(io.BytesIO(pickle.dumps(os.system)), safe_pickle.numpy_array_globals(), refuse)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unsafe_deserialisation(path):
    problems = audit(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "code, problem",
    [
        ("import pickle\npickle.load(f)", "pickle.load unpickles"),
        ("import pickle as pk\npk.loads(b)", "pickle.loads unpickles"),
        ("from pickle import load\nload(f)", "pickle.load unpickles"),
        ("import pickle\npickle.Unpickler(f).load()", "pickle.Unpickler unpickles"),
        ("import pickle\nclass U(pickle.Unpickler):\n    pass", "without an allow-list find_class"),
        ("import torch\ntorch.load(p)", "torch.load without weights_only=True"),
        ("from torch import load\nload(p, weights_only=False)", "torch.load without weights_only=True"),
        ("import numpy as np\nnp.load(p, allow_pickle=True)", "allow_pickle=True"),
        ("import pandas as pd\npd.read_pickle(p)", "pandas.read_pickle unpickles"),
        ("import joblib\njoblib.load(p)", "joblib.load unpickles"),
        # What hpde_gnn's Planetoid loader did: torch_geometric's read_file pickle.loads the ind.* files.
        ("from torch_geometric.io.planetoid import read_file", "whose readers pickle.load user files"),
        ("from torch_geometric.datasets import Planetoid", "whose readers pickle.load user files"),
    ],
)
def test_the_audit_catches(code, problem):
    found = audit(code, "snippet.py")
    assert len(found) == 1 and problem in found[0], found


def test_the_audit_admits_the_safe_forms():
    code = (
        "import pickle\nimport numpy as np\nimport torch\n"
        "class Restricted(pickle.Unpickler):\n    def find_class(self, module, name):\n        raise KeyError\n"
        "Restricted(f).load()\ntorch.load(p, weights_only=True)\nnp.load(p)\nnp.load(p, allow_pickle=False)\n"
        "pickle.dumps(obj)\n"
    )
    assert audit(code, "snippet.py") == []


def test_an_object_in_a_checkpoint_is_refused_not_unpickled(tmp_path, capfd):
    """A checkpoint that holds an arbitrary object is not loaded: the fit starts afresh."""
    import torch

    from models.common.runtime import checkpointing
    from tests.unit.test_lightning_resume import Crash, _train

    with checkpointing(tmp_path), pytest.raises(SystemExit):
        _train(6, callbacks=[Crash(epoch=3)])
    ckpt = tmp_path / "001-method" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True)  # what we write loads safely
    state["smuggled"] = Path("/etc/passwd")  # any non-allow-listed class
    torch.save(state, ckpt)
    full, full_records = _train(6)
    capfd.readouterr()
    with checkpointing(tmp_path):
        restarted, records = _train(6)
    out = capfd.readouterr().out
    assert "weights_only=True refuses" in out and "from scratch" in out and "set aside" in out
    assert len(records) == len(full_records) == 6
    assert [r["train/loss"] for r in records] == pytest.approx([r["train/loss"] for r in full_records], rel=1e-5)


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_an_unreadable_checkpoint_is_set_aside_and_the_fit_restarts(tmp_path, capfd, damage):
    from models.common.runtime import checkpointing
    from tests.unit.test_lightning_resume import Crash, _train

    with checkpointing(tmp_path), pytest.raises(SystemExit):
        _train(6, callbacks=[Crash(epoch=3)])
    ckpt = tmp_path / "001-method" / "last.ckpt"
    data = ckpt.read_bytes()
    ckpt.write_bytes(b"" if damage == "empty" else data[: len(data) // 2])  # a crash mid-write, a full disk
    _, full_records = _train(6)
    capfd.readouterr()
    with checkpointing(tmp_path):
        _, records = _train(6)
    out = capfd.readouterr().out
    assert "is unreadable" in out and "set aside" in out and "from scratch" in out
    assert [p.name.split("-")[0] for p in ckpt.parent.glob("last.ckpt.unreadable-*")] == ["last.ckpt.unreadable"]
    assert [r["train/loss"] for r in records] == pytest.approx([r["train/loss"] for r in full_records], rel=1e-5)


@pytest.mark.parametrize("content", ["plain dict", "other weights", "a tensor"])
def test_a_loadable_but_wrong_checkpoint_is_set_aside_and_the_fit_restarts(tmp_path, capfd, content):
    """A file that loads with weights_only=True but is not this fit's Lightning checkpoint (it once failed
    every later run with KeyError: 'pytorch-lightning_version') is treated like an unreadable one."""
    import torch

    from models.common.runtime import checkpointing
    from tests.unit.test_lightning_resume import Crash, _train

    with checkpointing(tmp_path), pytest.raises(SystemExit):
        _train(6, callbacks=[Crash(epoch=3)])
    ckpt = tmp_path / "001-method" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True)
    if content == "plain dict":
        wrong = {"epoch": 1}
    elif content == "other weights":
        wrong = {**state, "state_dict": {"net.weight": torch.zeros(3, 3)}}
    else:
        wrong = torch.zeros(2)
    torch.save(wrong, ckpt)
    _, full_records = _train(6)
    capfd.readouterr()
    for _ in range(2):  # and the next run is not blocked either
        with checkpointing(tmp_path):
            _, records = _train(6)
        assert [r["train/loss"] for r in records] == pytest.approx([r["train/loss"] for r in full_records], rel=1e-5)
    out = capfd.readouterr().out
    assert "is not this fit's checkpoint" in out and "set aside" in out and "from scratch" in out


def test_an_allow_listed_sparse_matrix_with_out_of_range_indices_is_refused_not_densified(tmp_path):
    """A csr_matrix passes the allow-list, but its pickled indices are never checked by scipy: toarray() on
    index 10^8 wrote out of bounds and killed the process (SIGSEGV). It is now refused at load (in a
    subprocess, so a regression shows as a crash code instead of taking pytest down)."""
    import pickle
    import subprocess
    import sys

    import numpy as np
    import scipy.sparse as sp

    bad = sp.csr_matrix(np.eye(5, 2, dtype=np.float32))
    bad.indices = np.array([100_000_000, 1], dtype=np.int32)
    with open(tmp_path / "ind.x.allx", "wb") as fh:
        pickle.dump(bad, fh, protocol=2)
    good = sp.csr_matrix(np.eye(5, 2, dtype=np.float32))
    with open(tmp_path / "ind.x.tx", "wb") as fh:
        pickle.dump({"graph": [good]}, fh, protocol=2)
    code = (
        "import sys; from pathlib import Path; from models.hpde_gnn.data import read_planetoid_pickle\n"
        "m = read_planetoid_pickle(Path(sys.argv[1]) / 'ind.x.tx'); print('good', m['graph'][0].toarray().sum())\n"
        "try:\n    read_planetoid_pickle(Path(sys.argv[1]) / 'ind.x.allx').toarray()\n"
        "except Exception as exc:\n    print('refused', type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"rc {out.returncode}: {out.stderr[-500:]}"
    assert "good 2.0" in out.stdout
    assert "refused PlanetoidFormatError" in out.stdout and "inconsistent sparse matrix" in out.stdout
