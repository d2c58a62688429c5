"""One layout in every method folder (docs/adding_a_method.md): a newcomer finds the same files everywhere,
the LightningModules in training.py, the figures in plots.py, and pipeline.py imported by nobody in the folder."""

import ast
from pathlib import Path

import pytest

from models.registry import METHODS
from tests.conftest import ROOT

REQUIRED = ("__init__.py", "config.py", "data.py", "plots.py", "pipeline.py")


def _classes_deriving(tree: ast.AST, base: str) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            if any(b == base or b.endswith("." + base) for b in bases):
                names.append(node.name)
    return names


def _draws_figures(tree: ast.AST) -> list[str]:
    """Functions that make a figure: they call ``plotting.pyplot()`` or ``plotting.save(...)`` themselves."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func) in ("plotting.pyplot", "plotting.save"):
                    found.append(node.name)
                    break
    return found


def _imports_pipeline(tree: ast.AST, slug: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if (node.level and module == "pipeline") or module == f"models.{slug}.pipeline":
                return True
            if (node.level and not module) or module == f"models.{slug}":
                if any(alias.name == "pipeline" for alias in node.names):
                    return True
        if isinstance(node, ast.Import) and any(a.name == f"models.{slug}.pipeline" for a in node.names):
            return True
    return False


def layout_problems(folder: Path) -> list[str]:
    slug = folder.name
    problems = [f"missing {name}" for name in REQUIRED if not (folder / name).is_file()]
    if not ((folder / "networks.py").is_file() or (folder / "algorithm.py").is_file()):
        problems.append("neither networks.py nor algorithm.py")
    modules = 0
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        lightning = _classes_deriving(tree, "LightningModule")
        modules += len(lightning)
        if lightning and path.name != "training.py":
            problems.append(f"{path.name} defines LightningModules {lightning} (they belong in training.py)")
        figures = _draws_figures(tree)
        if figures and path.name != "plots.py":
            problems.append(f"{path.name} draws figures in {figures} (they belong in plots.py)")
        if path.name not in ("pipeline.py", "__init__.py") and _imports_pipeline(tree, slug):
            problems.append(f"{path.name} imports pipeline.py (the entry point imports the rest, not back)")
    if modules and not (folder / "training.py").is_file():
        problems.append("LightningModules but no training.py")
    return problems


@pytest.mark.parametrize("slug", list(METHODS))
def test_method_folder_has_the_house_layout(slug):
    assert layout_problems(ROOT / "models" / slug) == []


def test_no_method_imports_another_methods_code():
    for slug in METHODS:
        for path in (ROOT / "models" / slug).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("models."):
                    other = node.module.split(".")[1]
                    assert other in (slug, "common", "base", "registry"), f"{path} imports {node.module}"


def test_the_check_sees_misplaced_code(tmp_path):
    folder = tmp_path / "toy"
    folder.mkdir()
    for name in ("__init__.py", "config.py", "data.py", "pipeline.py"):
        (folder / name).write_text("")
    (folder / "networks.py").write_text(
        "import lightning as L\nfrom . import pipeline\n"
        "class Net(L.LightningModule):\n    pass\n"
        "def curve(path):\n    return plotting.save(fig, path)\n"
    )
    assert layout_problems(folder) == [
        "missing plots.py",
        "networks.py defines LightningModules ['Net'] (they belong in training.py)",
        "networks.py draws figures in ['curve'] (they belong in plots.py)",
        "networks.py imports pipeline.py (the entry point imports the rest, not back)",
        "LightningModules but no training.py",
    ]
