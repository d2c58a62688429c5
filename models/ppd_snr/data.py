"""Data: seeded train/test draws of the conjugate-Gaussian model for every setting of both parts.

Each dataset is one ``.npz`` in the brief's format: ``x_train`` (n, d), ``x_test`` (m, d), and the
scalars ``sigma``, ``sigma0``, ``shift``. ``index.json`` lists them with their part and setting.

Part 1 uses common random numbers: replicate r draws one noise matrix per split at the largest
(d, m) of the sweeps and every setting takes its leading block, so moving along a sweep changes one
factor and nothing else. Part-2 settings get independent streams.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.base import DatasetRef, dataset_meta, user_data_path, write_manifest

INDEX = "index.json"
USER_FILE = "estimate/user.npz"


@dataclass(frozen=True)
class GaussianData:
    """One dataset: training and test points plus the model's known scales."""

    x_train: np.ndarray  # (n, d)
    x_test: np.ndarray  # (m, d)
    sigma: float
    sigma0: float
    shift: float = float("nan")  # nan for user data (unknown)

    @property
    def d(self) -> int:
        return self.x_train.shape[1]


def tag(d: int, m: int, shift: float) -> str:
    """A dataset's name, usable as a file stem, a metric key and a module key ("d5_m10_s0p20")."""
    return f"d{d}_m{m}_s{shift:.2f}".replace(".", "p")


def part1_settings(data_cfg) -> list[tuple[int, int, float]]:
    """The unique (d, m, shift) of the three one-factor sweeps around the base point."""
    b = data_cfg.base
    points = [(d, b.m, b.shift) for d in data_cfg.sweep_d]
    points += [(b.d, m, b.shift) for m in data_cfg.sweep_m]
    points += [(b.d, b.m, s) for s in data_cfg.sweep_shift]
    return list(dict.fromkeys(points))


def save_npz(path: Path, data: GaussianData) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez(
            fh,
            x_train=data.x_train,
            x_test=data.x_test,
            sigma=np.float64(data.sigma),
            sigma0=np.float64(data.sigma0),
            shift=np.float64(data.shift),
        )


def load_npz(path: Path) -> GaussianData:
    """Read a dataset in the brief's format, checking shapes and scales."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such dataset file")
    with np.load(path, allow_pickle=False) as f:
        missing = {"x_train", "x_test", "sigma", "sigma0"} - set(f.files)
        if missing:
            raise ValueError(
                f"{path}: missing arrays {sorted(missing)} (need x_train (n, d), x_test (m, d), sigma, sigma0)"
            )
        x_train, x_test = np.asarray(f["x_train"], np.float64), np.asarray(f["x_test"], np.float64)
        sigma, sigma0 = float(f["sigma"]), float(f["sigma0"])
        shift = float(f["shift"]) if "shift" in f.files else float("nan")
    if (
        x_train.ndim != 2
        or x_test.ndim != 2
        or x_train.shape[1] != x_test.shape[1]
        or not len(x_train)
        or not len(x_test)
    ):
        raise ValueError(
            f"{path}: x_train {x_train.shape} and x_test {x_test.shape} must be non-empty (n, d) and (m, d)"
        )
    if not (
        np.isfinite(x_train).all()
        and np.isfinite(x_test).all()
        and sigma > 0
        and sigma0 > 0
        and np.isfinite(sigma)
        and np.isfinite(sigma0)
    ):
        raise ValueError(f"{path}: data must be finite and sigma, sigma0 positive")
    return GaussianData(x_train, x_test, sigma, sigma0, shift)


def prepare(cfg, data_dir: Path) -> DatasetRef:
    data_dir = Path(data_dir)
    dc = cfg.data
    root = np.random.SeedSequence(cfg.seed)
    part1_seq, part2_seq = root.spawn(2)
    index: dict[str, list[dict]] = {"snr": [], "estimate": []}
    settings = part1_settings(dc)
    d_max, m_max = max(s[0] for s in settings), max(s[1] for s in settings)
    for r, seq in enumerate(part1_seq.spawn(dc.replicates)):
        rng = np.random.default_rng(seq)
        train_noise = rng.standard_normal((dc.n_train, d_max))
        test_noise = rng.standard_normal((m_max, d_max))
        for d, m, shift in settings:
            x_train, x_test = dc.sigma * train_noise[:, :d], shift + dc.sigma * test_noise[:m, :d]
            data = GaussianData(x_train, x_test, dc.sigma, dc.sigma0, shift)
            name = f"snr/{tag(d, m, shift)}_r{r}.npz"
            save_npz(data_dir / name, data)
            index["snr"].append({"file": name, "d": d, "m": m, "shift": shift, "replicate": r})
    for setting, seq in zip(dc.estimate_settings, part2_seq.spawn(len(dc.estimate_settings))):
        rng = np.random.default_rng(seq)
        d, m, shift = setting.d, setting.m, setting.shift
        x_train = dc.sigma * rng.standard_normal((dc.n_train, d))
        x_test = shift + dc.sigma * rng.standard_normal((m, d))
        name = f"estimate/{tag(d, m, shift)}.npz"
        save_npz(data_dir / name, GaussianData(x_train, x_test, dc.sigma, dc.sigma0, shift))
        index["estimate"].append({"file": name, "d": d, "m": m, "shift": shift, "name": tag(d, m, shift)})
    if dc.user_npz:
        user = load_npz(user_data_path(dc.user_npz))  # validate before copying
        (data_dir / USER_FILE).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(user_data_path(dc.user_npz), data_dir / USER_FILE)
        index["estimate"].append(
            {
                "file": USER_FILE,
                "d": user.d,
                "m": len(user.x_test),
                "shift": None if np.isnan(user.shift) else user.shift,
                "name": "user",
            }
        )
    (data_dir / INDEX).write_text(json.dumps(index, indent=1))
    generated = (
        f"generated from seed {cfg.seed}: conjugate Gaussian mean model (sigma {dc.sigma:g}, sigma0 "
        f"{dc.sigma0:g}, n {dc.n_train}), {dc.replicates} part-1 replicates, "
        f"{len(dc.estimate_settings)} part-2 settings"
    )
    if dc.user_npz:  # it joins part 2 and can be the hardest setting the claim is read on
        source = dataset_meta("real", f"user file data/{dc.user_npz} in part 2; everything else {generated}")
    else:
        source = dataset_meta("synthetic", generated)
    return write_manifest(
        data_dir,
        meta={
            **source,
            "generator": "conjugate Gaussian mean model, z_train = 0, test mean = shift * 1",
            "synthetic": True,
            "n_train": dc.n_train,
            "snr_datasets": len(index["snr"]),
            "estimate_datasets": len(index["estimate"]),
            "user_npz": dc.user_npz,
        },
    )


def load_index(data: DatasetRef) -> dict[str, list[dict]]:
    return json.loads(data.file(INDEX).read_text())
