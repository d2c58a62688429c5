"""``dvc.yaml`` rendered from the registry: prepare@m -> train@m -> evaluate@m over every method.

Each method's stages depend on its own folder, the step code (``SHARED_CODE``) and exactly the shared
modules those import, found by walking their imports (``shared_modules``): editing ``models/common/tiny_lm.py``
reruns the two methods that use it, not all nineteen. A method's prepare stage also depends on the pinned raw
files its code names (``raw_inputs``): a replaced benchmark file re-prepares that method's dataset.

Every out is ``persist``: DVC then leaves it in place until the stage command replaces it, and the steps only
replace a folder once its new contents are complete (``tasks/steps.py`` writes ``<out>.partial`` and renames).
A bad ``params.yaml`` is refused by ``paperline stage`` before that, so it costs no data or model; a failed
step leaves the previous outputs. DVC keeps no run-cache entry for stages with persistent outs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from models.registry import METHODS

ROOT = Path(__file__).resolve().parents[1]
SHARED_CODE = ["models/base.py", "tasks/steps.py"]
PACKAGE = "models"  # imports are followed inside the model zoo only (third-party code is pinned, not a dep)


def _module_file(root: Path, dotted: str) -> Path | None:
    path = root.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(root: Path, path: Path) -> set[str]:
    """Dotted names ``path`` imports anywhere (lazy imports inside functions too), relative ones resolved;
    ``from a import b`` yields ``a`` and ``a.b`` (``b`` may be a submodule)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def shared_modules(slug: str, root: Path = ROOT) -> list[str]:
    """Files outside ``models/<slug>/`` that its code or ``SHARED_CODE`` imports, transitively (package
    ``__init__.py`` files included: Python runs them on the way), as sorted root-relative paths."""
    own = root / "models" / slug
    todo = [*sorted(own.rglob("*.py")), *(root / p for p in SHARED_CODE)]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported_names(root, path):
            parts = name.split(".")
            if parts[0] != PACKAGE:
                continue
            for i in range(1, len(parts) + 1):  # models, models.common, models.common.tiny_lm, ...
                found = _module_file(root, ".".join(parts[:i]))
                if found is not None and found not in seen:
                    todo.append(found)
    shared = {p.relative_to(root).as_posix() for p in seen if not p.is_relative_to(own)}
    return sorted(shared - set(SHARED_CODE))


def _string_constants(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def raw_inputs(slug: str, root: Path = ROOT) -> list[str]:
    """The pinned raw files (``models/common/raw_data.py``) a method's prepare may read: every raw-file name,
    or folder prefix such as ``"graphs/"``, written as a string in its code or the shared modules it imports."""
    from models.common.raw_data import COMMITTED, FETCHED

    known = sorted([*COMMITTED, *FETCHED])
    shared = [root / p for p in shared_modules(slug, root) if p != "models/common/raw_data.py"]  # the list itself
    files = [*(root / "models" / slug).rglob("*.py"), *shared]
    found: set[str] = set()
    for text in set().union(*(_string_constants(f) for f in files)) if files else ():
        if text in known:
            found.add(text)
        elif text.endswith("/") and len(text) > 1:
            found.update(name for name in known if name.startswith(text))
    return sorted(f"data/raw/{name}" for name in found)


def _persist(path: str, **flags) -> dict:
    return {path: {**flags, "persist": True}}


def render_dvc_yaml(root: Path = ROOT) -> str:
    code = {slug: shared_modules(slug, root) for slug in METHODS}
    everyones = [*SHARED_CODE, *sorted(set.intersection(*map(set, code.values())))]
    extra = {slug: [p for p in paths if p not in everyones] for slug, paths in code.items()}
    # DVC cannot interpolate a list into `deps`, so every method gets the same number of slots
    # `${item.code[i]}`; a shorter list is filled up with a path every stage depends on anyway.
    width = max(1, *map(len, extra.values()))
    raw = {slug: raw_inputs(slug, root) for slug in METHODS}
    raw_width = max(0, *map(len, raw.values()))
    items = {
        slug: {
            "dataset": spec.dataset,
            "code": extra[slug] + everyones[-1:] * (width - len(extra[slug])),
            **({"raw": raw[slug] + everyones[-1:] * (raw_width - len(raw[slug]))} if raw_width else {}),
        }
        for slug, spec in METHODS.items()
    }
    deps = ["models/${key}", *everyones, *(f"${{item.code[{i}]}}" for i in range(width))]
    raw_deps = [f"${{item.raw[{i}]}}" for i in range(raw_width)]
    stages = {
        "prepare": {
            "foreach": items,
            "do": {
                "cmd": "paperline stage prepare ${key}",
                "deps": [*deps, *raw_deps],
                "params": ["${key}.seed", "${key}.data"],
                "outs": [_persist("data/${item.dataset}")],
            },
        },
        "train": {
            "foreach": items,
            "do": {
                "cmd": "paperline stage train ${key}",
                "deps": ["data/${item.dataset}", *deps],
                "params": ["${key}"],
                "outs": [_persist("outputs/${key}/model")],
            },
        },
        "evaluate": {
            "foreach": items,
            "do": {
                "cmd": "paperline stage evaluate ${key}",
                "deps": ["data/${item.dataset}", "outputs/${key}/model", *deps],
                "params": ["${key}"],
                "metrics": [
                    _persist("outputs/${key}/metrics.json", cache=False),
                    _persist("outputs/${key}/claim.json", cache=False),
                ],
                "plots": [_persist("outputs/${key}/plots", cache=False)],
            },
        },
    }
    header = (
        "# Generated from models/registry.py and the methods' imports by `paperline params --write`;"
        " edit those, not this file.\n"
        "# `code`: the shared modules only some methods import; `raw`: the pinned raw files (data/raw) a method's"
        " code names; both padded with a shared path to one length (DVC cannot put a list into `deps`).\n"
    )
    return header + yaml.safe_dump({"stages": stages}, sort_keys=False)
