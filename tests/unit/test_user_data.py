"""User-supplied data paths (``RelPath`` fields) are checked before anything reads them (models.base.user_data_path)."""

import os
import subprocess
import sys
import textwrap

import pytest

from models.base import UserDataError, user_data_path


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "rt").mkdir(parents=True)
    return tmp_path / "data"


def test_a_regular_file_and_a_missing_one_pass_through(data):
    (data / "rt" / "ok.npz").write_bytes(b"x")
    assert user_data_path("rt/ok.npz") == data / "rt" / "ok.npz"
    assert user_data_path("rt/missing.npz") == data / "rt" / "missing.npz"  # the loader names it


def test_a_fifo_is_refused_instead_of_blocking_the_reader(data):
    os.mkfifo(data / "rt" / "fifo")
    with pytest.raises(UserDataError, match="data/rt/fifo is a FIFO, not a regular file"):
        user_data_path("rt/fifo")
    (data / "rt" / "folder").mkdir()
    os.mkfifo(data / "rt" / "folder" / "ind.x.allx")
    with pytest.raises(UserDataError, match="ind.x.allx is a FIFO"):
        user_data_path("rt/folder")


def test_a_symlink_out_of_data_is_refused_and_one_inside_is_followed(data, tmp_path):
    outside = tmp_path / "outside.npz"
    outside.write_bytes(b"secret")
    (data / "rt" / "out.npz").symlink_to(outside)
    with pytest.raises(UserDataError, match="leads outside the project's data/ folder"):
        user_data_path("rt/out.npz")
    (data / "rt" / "dir").mkdir()
    (data / "rt" / "dir" / "escape").symlink_to(outside)
    with pytest.raises(UserDataError, match="outside"):
        user_data_path("rt/dir")
    (data / "rt" / "inside.npz").write_bytes(b"x")
    (data / "rt" / "alias.npz").symlink_to(data / "rt" / "inside.npz")
    assert user_data_path("rt/alias.npz") == data / "rt" / "alias.npz"
    (data / "rt" / "loop").symlink_to(data / "rt" / "loop")
    with pytest.raises(UserDataError, match="cannot be resolved"):
        user_data_path("rt/loop")


def test_a_file_above_the_size_limit_is_refused_before_reading(data):
    with open(data / "rt" / "questions.jsonl", "wb") as fh:
        fh.truncate(20 * 2**30)  # a 20 GB sparse file: nothing is written to disk
    with pytest.raises(UserDataError, match="20.0 GiB, above the 4.0 GiB limit"):
        user_data_path("rt/questions.jsonl")


def test_prepare_stops_at_once_on_a_fifo_for_every_file_field(tmp_path):
    """The fields the reliability test saw block forever: each prepare now stops with one clear error."""
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        root = Path(sys.argv[1]); (root / "data" / "rt").mkdir(parents=True); os.mkfifo(root / "data" / "rt" / "fifo")
        os.environ["PAPERLINE_ROOT"] = str(root)
        from models.registry import METHODS
        from tasks import steps
        cases = {"ibmd": {"data.pairs_npz": "rt/fifo"}, "sta": {"data.videos_npz": "rt/fifo"},
                 "self_ref": {"data.questions_jsonl": "rt/fifo"}, "win_rate": {"data.pairs_jsonl": "rt/fifo"}}
        for slug, overrides in cases.items():
            spec = METHODS[slug]
            fields = spec.config.model_fields["data"].annotation.model_fields
            extra = {"data.source": "user"} if "source" in fields else {}
            try:
                cfg = spec.make_config("smoke", {**overrides})
            except Exception as exc:
                print(slug, "config", type(exc).__name__, exc); continue
            try:
                steps.prepare(spec, cfg, root)
                print(slug, "prepared")
            except Exception as exc:
                print(slug, type(exc).__name__, str(exc)[:200])
            assert not (root / "data" / (spec.dataset + ".partial")).exists(), slug
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=240, check=True
    )
    lines = [line for line in out.stdout.splitlines() if line.split(" ")[0] in ("ibmd", "sta", "self_ref", "win_rate")]
    assert len(lines) == 4, out.stdout + out.stderr
    for line in lines:
        assert "is a FIFO, not a regular file" in line, line
