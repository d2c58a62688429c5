"""Dataset manifests catch corruption; steps write atomically and say how to recover."""

import json

import pytest

from models.base import DatasetError, read_dataset, write_manifest


def _dataset(tmp_path):
    d = tmp_path / "data" / "toy"
    d.mkdir(parents=True)
    (d / "x.bin").write_bytes(bytes(range(256)) * 4)
    (d / "sub").mkdir()
    (d / "sub" / "y.json").write_text(json.dumps({"a": 1}))
    return d


def test_manifest_round_trip(tmp_path):
    d = _dataset(tmp_path)
    ref = write_manifest(d, {"synthetic": True})
    again = read_dataset(d)
    assert again.sha256 == ref.sha256 and again.files == ("sub/y.json", "x.bin")
    assert again.meta == {"synthetic": True} and again.name == "toy"


def test_flipped_byte_is_detected(tmp_path):
    d = _dataset(tmp_path)
    write_manifest(d)
    raw = bytearray((d / "x.bin").read_bytes())
    raw[100] ^= 0xFF
    (d / "x.bin").write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match="'x.bin' does not match its recorded sha256"):
        read_dataset(d)


def test_missing_dataset_and_file(tmp_path):
    with pytest.raises(DatasetError, match="missing"):
        read_dataset(tmp_path / "nothing")
    d = _dataset(tmp_path)
    write_manifest(d)
    (d / "sub" / "y.json").unlink()
    with pytest.raises(DatasetError, match="'sub/y.json' is missing"):
        read_dataset(d)


def test_same_content_same_hash(tmp_path):
    a = write_manifest(_dataset(tmp_path / "a"))
    b = write_manifest(_dataset(tmp_path / "b"))
    assert a.sha256 == b.sha256


def test_metric_names_are_made_mlflow_legal():
    from tasks.tracking import metric_name

    assert metric_name("eval/method/recon_mse_noise0.3_s2_1e+04") == "eval/method/recon_mse_noise0.3_s2_1e_04"
    assert metric_name("claim/acc gap (pts)") == "claim/acc gap _pts_"
    assert metric_name("train/loss") == "train/loss"


def test_a_failed_step_leaves_the_previous_outputs_whole_and_no_partial_folder(tmp_path):
    """A step replaces its outputs only once the new ones are complete (a kill during evaluate once left
    ``plots/`` empty beside the old ``metrics.json``); a failed prepare or evaluate leaves no ``*.partial``."""
    from tasks import steps
    from tests import toy_method

    spec = toy_method.SPEC
    good = spec.make_config("default")
    steps.prepare(spec, good, tmp_path)
    steps.train(spec, good, tmp_path)
    steps.evaluate(spec, good, tmp_path)
    layout = steps.Layout(tmp_path, spec)
    before = {p.name: p.read_bytes() for p in (layout.metrics_file, layout.claim_file, layout.plots_dir / "loss.png")}

    with pytest.raises(RuntimeError, match="half-way"):
        steps.evaluate(spec, spec.make_config("default", {"fail": "evaluate"}), tmp_path)
    after = {p.name: p.read_bytes() for p in (layout.metrics_file, layout.claim_file, layout.plots_dir / "loss.png")}
    assert after == before
    with pytest.raises(OSError, match="disk full"):
        steps.prepare(spec, spec.make_config("default", {"fail": "prepare", "data.n": 65}), tmp_path)
    assert read_dataset(layout.data_dir).meta["n"] == 64  # the old dataset is intact
    assert not list(tmp_path.rglob("*.partial")), list(tmp_path.rglob("*.partial"))
