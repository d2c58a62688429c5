"""No unpickling of arbitrary objects: every ``torch.load`` in the project passes
``weights_only=True``; no ``pickle``/``joblib`` loads or ``allow_pickle=True``; checkpoints resume
under ``weights_only=True``."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

SOURCES = sorted(p for folder in ("models", "tasks", "flows") for p in (ROOT / folder).rglob("*.py"))
UNSAFE_CALLS = {("pickle", "load"), ("pickle", "loads"), ("cloudpickle", "load"), ("cloudpickle", "loads"),
                ("joblib", "load"), ("dill", "load"), ("dill", "loads")}


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
            yield node, owner, node.func.attr


def _keyword(node: ast.Call, name: str):
    for kw in node.keywords:
        if kw.arg == name:
            return kw.value.value if isinstance(kw.value, ast.Constant) else "<expr>"
    return None


def test_sources_were_found():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unsafe_deserialisation(path):
    problems = []
    for node, owner, attr in _calls(path):
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        if owner == "torch" and attr == "load" and _keyword(node, "weights_only") is not True:
            problems.append(f"{where}: torch.load without weights_only=True")
        if (owner, attr) in UNSAFE_CALLS:
            problems.append(f"{where}: {owner}.{attr} unpickles arbitrary objects")
        if attr == "load" and _keyword(node, "allow_pickle") is True:
            problems.append(f"{where}: allow_pickle=True")
        if attr == "fit" and _keyword(node, "ckpt_path") not in (None,) and _keyword(node, "weights_only") is None:
            problems.append(f"{where}: Trainer.fit(ckpt_path=...) without weights_only")
    assert not problems, "\n".join(problems)


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
