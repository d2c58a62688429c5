"""Imports run one way (flows -> tasks -> models) and no project module imports itself in a circle,
counting lazy imports inside functions: a cycle hidden in a function still ties two modules together."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"flows": 2, "tasks": 1, "models": 0}  # a module may import only its own layer or lower ones


def _file_of(root: Path, dotted: str) -> Path | None:
    path = root.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(root: Path, path: Path) -> set[Path]:
    """Project files ``path`` imports anywhere in its body, each resolved to its most specific module file
    (``from a.b import c`` is ``a/b/c.py`` when that exists, else ``a/b``)."""
    package = list(path.relative_to(root).with_suffix("").parts)[:-1]
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [
                f"{module}.{alias.name}" if _file_of(root, f"{module}.{alias.name}") else module for alias in node.names
            ]
        for target in targets:
            if target.split(".")[0] in LAYERS and (file := _file_of(root, target)) is not None and file != path:
                found.add(file)
    return found


def import_graph(root: Path) -> dict[Path, set[Path]]:
    return {path: _imports(root, path) for layer in LAYERS for path in sorted((root / layer).rglob("*.py"))}


def upward_imports(root: Path, graph: dict[Path, set[Path]]) -> list[str]:
    def layer(path: Path) -> int:
        return LAYERS[path.relative_to(root).parts[0]]

    return [
        f"{src.relative_to(root)} imports {dst.relative_to(root)}"
        for src, dsts in graph.items()
        for dst in sorted(dsts)
        if layer(dst) > layer(src)
    ]


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components with more than one module (Tarjan), each a cycle of imports."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    found: list[list[Path]] = []

    def visit(node: Path) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def _package_init_edges_removed(root: Path, graph: dict[Path, set[Path]]) -> dict[Path, set[Path]]:
    """A package's ``__init__`` importing its own submodules is how packages expose names, not a cycle."""
    pruned = {}
    for src, dsts in graph.items():
        pruned[src] = {d for d in dsts if not (src.name == "__init__.py" and d.is_relative_to(src.parent))}
    return pruned


def test_imports_run_flows_to_tasks_to_models():
    assert upward_imports(ROOT, import_graph(ROOT)) == []


def test_no_import_cycles():
    graph = _package_init_edges_removed(ROOT, import_graph(ROOT))
    assert [[str(p.relative_to(ROOT)) for p in c] for c in cycles(graph)] == []


def test_checker_catches_an_upward_import_and_a_lazy_cycle(tmp_path):
    for folder in LAYERS:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "models" / "a.py").write_text("def f():\n    from models.b import g\n")
    (tmp_path / "models" / "b.py").write_text("from . import a\nfrom tasks import x\n")
    (tmp_path / "tasks" / "x.py").write_text("import models\n")
    graph = import_graph(tmp_path)
    assert upward_imports(tmp_path, graph) == ["models/b.py imports tasks/x.py"]
    assert [[p.name for p in c] for c in cycles(graph)] == [["a.py", "b.py"]]
