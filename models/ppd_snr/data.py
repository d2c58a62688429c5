"""Data: seeded draws of the synthetic models and random splits of the real posteriordb regressions.

Parts 1-2 (conjugate Gaussian mean): one ``.npz`` per dataset in the brief's format, ``x_train`` (n, d),
``x_test`` (m, d) and the scalars ``sigma``, ``sigma0``, ``shift``. Part 3 (``heavy/``): the same design
with Student-t noise (``scale``, ``nu`` added). Part 4 (``real/``, the default ``data.source="real"``):
the posteriordb data sets (stan-dev/posteriordb @ 28f8d3d6, committed under ``data/raw/posteriordb/``),
each a zip holding one JSON of Stan data, turned into the design of its posteriordb linear model,
split at random (``data.real.splits`` seeds), columns and response standardised with the training
split's moments, sigma fixed at the training residual sd. ``index.json`` lists every file by part.

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
from models.common import raw_data

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


# ----------------------------------------------------------------------------- posteriordb regressions

# Raw file of each data set (literal names: they become the DVC stage's dependencies).
POSTERIORDB_FILES = {
    "kidiq": "posteriordb/kidiq.json.zip",
    "earnings": "posteriordb/earnings.json.zip",
    "radon_mn": "posteriordb/radon_mn.json.zip",
    "mesquite": "posteriordb/mesquite.json.zip",
    "kilpisjarvi_mod": "posteriordb/kilpisjarvi_mod.json.zip",
    "diamonds": "posteriordb/diamonds.json.zip",
}


def load_stan_data(name: str) -> dict:
    """The Stan data of one posteriordb data set: the single JSON inside its checked zip."""
    archive = POSTERIORDB_FILES[name]
    raw = raw_data.archive_member(archive, f"{name}.json")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise raw_data.RawDataError(f"{archive}: {name}.json is not valid JSON ({error})") from error


def regression_design(name: str, stan: dict) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(covariates without intercept, response, column names) of the posteriordb linear model of ``name``.

    kidiq-kidscore_momhsiq, earnings-logearn_height_male, radon_mn-radon_county_intercept (floor, log uranium,
    one indicator per county), mesquite-logmesquite, kilpisjarvi_mod-kilpisjarvi, diamonds-diamonds (the
    24 non-intercept columns of X)."""

    def col(key):
        try:
            return np.asarray(stan[key], np.float64)
        except KeyError as error:
            raise raw_data.RawDataError(f"posteriordb {name}: no variable {key!r} in its Stan data") from error

    if name == "kidiq":
        return np.column_stack([col("mom_hs"), col("mom_iq")]), col("kid_score"), ["mom_hs", "mom_iq"]
    if name == "earnings":
        return np.column_stack([col("height"), col("male")]), np.log(col("earn")), ["height", "male"]
    if name == "radon_mn":
        county = col("county_idx").astype(int)
        levels = np.unique(county)
        onehot = (county[:, None] == levels[None, :]).astype(np.float64)
        names = ["floor", "log_uppm"] + [f"county{c}" for c in levels]
        return np.column_stack([col("floor_measure"), col("log_uppm"), onehot]), col("log_radon"), names
    if name == "mesquite":
        d1, d2, height = col("diam1"), col("diam2"), col("canopy_height")
        x = np.column_stack(
            [
                np.log(d1 * d2 * height),
                np.log(d1 * d2),
                np.log(d1 / d2),
                np.log(col("total_height")),
                np.log(col("density")),
                col("group"),
            ]
        )
        names = ["log_volume", "log_area", "log_shape", "log_total_height", "log_density", "group"]
        return x, np.log(col("weight")), names
    if name == "kilpisjarvi_mod":
        return col("x")[:, None], col("y"), ["year"]
    if name == "diamonds":
        x = col("X")
        return x[:, 1:], col("Y"), [f"x{j}" for j in range(1, x.shape[1])]
    raise ValueError(f"unknown posteriordb data set {name!r}; known: {sorted(POSTERIORDB_FILES)}")


def split_regression(x: np.ndarray, y: np.ndarray, test_fraction: float, rng: np.random.Generator) -> dict:
    """A random split, standardised with the training part's moments, intercept column first, and sigma fixed
    at the training least-squares residual sd (plug-in, so the model stays conjugate)."""
    order = rng.permutation(len(y))
    m = min(max(1, round(test_fraction * len(y))), len(y) - 2)
    test, train = order[:m], order[m:]
    mean, sd = x[train].mean(0), x[train].std(0)
    sd = np.where(sd > 0, sd, 1.0)  # a column constant on the training part (a county absent from it)
    y_mean, y_sd = y[train].mean(), y[train].std()

    def design(rows):
        return np.column_stack([np.ones(len(rows)), (x[rows] - mean) / sd])

    x_train, x_test = design(train), design(test)
    y_train, y_test = (y[train] - y_mean) / y_sd, (y[test] - y_mean) / y_sd
    coef, _, rank, _ = np.linalg.lstsq(x_train, y_train, rcond=None)
    dof = max(len(train) - rank, 1)
    sigma = float(np.sqrt(np.sum((y_train - x_train @ coef) ** 2) / dof))
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test, "sigma": sigma}


def load_regression(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as f:
        return {k: np.asarray(f[k], np.float64) for k in f.files}


def prepare(cfg, data_dir: Path) -> DatasetRef:
    data_dir = Path(data_dir)
    dc = cfg.data
    root = np.random.SeedSequence(cfg.seed)
    part1_seq, part2_seq, heavy_seq, real_seq = root.spawn(4)
    index: dict[str, list[dict]] = {"snr": [], "estimate": [], "heavy": [], "real": []}
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
    hc = dc.heavy
    t_scale = dc.sigma * float(np.sqrt((hc.nu - 2) / hc.nu))  # noise variance sigma^2, as in the Gaussian model
    for setting, seq in zip(hc.settings, heavy_seq.spawn(len(hc.settings))):
        rng = np.random.default_rng(seq)
        d, m, shift = setting.d, setting.m, setting.shift
        x_train = t_scale * rng.standard_t(hc.nu, (dc.n_train, d))
        x_test = shift + t_scale * rng.standard_t(hc.nu, (m, d))
        name = f"heavy/{tag(d, m, shift)}.npz"
        (data_dir / name).parent.mkdir(parents=True, exist_ok=True)
        with open(data_dir / name, "wb") as fh:
            np.savez(fh, x_train=x_train, x_test=x_test, scale=t_scale, nu=hc.nu, sigma0=dc.sigma0, shift=shift)
        index["heavy"].append({"file": name, "d": d, "m": m, "shift": shift, "name": "t_" + tag(d, m, shift)})
    real_sources = []
    if dc.source == "real":
        rc = dc.real
        for dataset, seq in zip(rc.datasets, real_seq.spawn(len(rc.datasets))):
            x, y, _ = regression_design(dataset, load_stan_data(dataset))
            real_sources.append(raw_data.provenance(POSTERIORDB_FILES[dataset]))
            for j, split_seq in enumerate(seq.spawn(rc.splits)):
                split = split_regression(x, y, rc.test_fraction, np.random.default_rng(split_seq))
                name = f"real/{dataset}_s{j}.npz"
                (data_dir / name).parent.mkdir(parents=True, exist_ok=True)
                with open(data_dir / name, "wb") as fh:
                    np.savez(fh, **split, tau=rc.prior_scale)
                index["real"].append(
                    {
                        "file": name,
                        "dataset": dataset,
                        "split": j,
                        "name": f"{dataset}_s{j}",
                        "n": len(split["y_train"]),
                        "m": len(split["y_test"]),
                        "d": split["x_train"].shape[1],
                    }
                )
    (data_dir / INDEX).write_text(json.dumps(index, indent=1))
    generated = (
        f"generated from seed {cfg.seed}: conjugate Gaussian mean model (sigma {dc.sigma:g}, sigma0 "
        f"{dc.sigma0:g}, n {dc.n_train}), {dc.replicates} part-1 replicates, "
        f"{len(dc.estimate_settings)} part-2 settings"
    )
    generated += f", {len(hc.settings)} Student-t (nu {hc.nu:g}) settings"
    if real_sources:
        generated = f"posteriordb regressions from {'; '.join(real_sources)}; parts 1-3 {generated}"
    if dc.user_npz:  # it joins part 2 and can be the hardest setting the claim is read on
        source = dataset_meta("real", f"user file data/{dc.user_npz} in part 2; everything else {generated}")
    else:
        source = dataset_meta("real" if real_sources else "synthetic", generated)
    return write_manifest(
        data_dir,
        meta={
            **source,
            "generator": "conjugate Gaussian mean model, z_train = 0, test mean = shift * 1",
            "synthetic": not real_sources,
            "real_datasets": len(index["real"]),
            "heavy_datasets": len(index["heavy"]),
            "n_train": dc.n_train,
            "snr_datasets": len(index["snr"]),
            "estimate_datasets": len(index["estimate"]),
            "user_npz": dc.user_npz,
        },
    )


def load_index(data: DatasetRef) -> dict[str, list[dict]]:
    return json.loads(data.file(INDEX).read_text())
