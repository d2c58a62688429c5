"""The method contract every paper in the zoo implements.

A method package ``models/<slug>/`` exports one :class:`MethodSpec` (light: pydantic only)
whose ``impl`` names the module holding the heavy code. That module defines five functions:

    prepare(cfg, data_dir: Path) -> DatasetRef
        Write the dataset deterministically from ``cfg.seed`` into ``data_dir`` (or read a
        user-supplied copy in its official format) and return ``write_manifest(...)``.
    train(cfg, data: DatasetRef, model_dir: Path) -> TrainedArtifacts
        Train the method *and* its baseline under the same budget; write weights and whatever
        ``load_model`` and ``evaluate`` need straight into ``model_dir`` (a fresh folder that becomes
        ``outputs/<slug>/model`` once the step completes) and return per-variant learning curves and
        summary metrics.
    load_model(cfg, model_dir: Path) -> object
        Rebuild the registered model (an ``nn.Module`` or an object with ``predict``)
        from ``model_dir``; torch checkpoints load with ``weights_only=True``.
    evaluate(cfg, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics
        The paper's metrics for method and baseline; figures as PNGs in ``out_dir / "plots"`` (``out_dir``
        is a fresh staging folder that replaces ``outputs/<slug>``'s results once evaluate completes).
    claim(cfg, metrics: Metrics) -> ClaimResult
        The paper's key claim as criteria (estimate, 95 % interval over paired units, threshold,
        state holds/fails/inconclusive; build them with ``models.common.verdicts``) plus the
        brief's must-pass checks.

The shared spine (``tasks/``, ``flows/``) calls these; methods never touch MLflow, Prefect
or DVC themselves.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

MANIFEST = "MANIFEST.json"
SEED_MAX = 2**32 - 1


class Scale(str, Enum):
    """Named sizes of every experiment: tests, the main job, the paper's setting (GPU)."""

    smoke = "smoke"
    default = "default"
    paper = "paper"


def _inside_project(value: str) -> str:
    path = Path(value)
    if value and (path.is_absolute() or ".." in path.parts):
        raise ValueError(f"{value!r} must be a relative path inside the project's data/ folder (no '..', not absolute)")
    return value


# A config path to user-supplied data, relative to the project's data/ folder ("" = not used).
# Absolute paths and '..' are rejected so configs cannot reach outside the project.
RelPath = Annotated[str, AfterValidator(_inside_project)]


USER_FILE_MAX_BYTES = 4 * 2**30  # a user-supplied data file above this is refused before it is read
USER_DIR_MAX_ENTRIES = 100_000


class UserDataError(ValueError):
    """A user-supplied data path that must not be read: outside data/, a special file, too large."""


def user_data_path(relative: str, max_bytes: int = USER_FILE_MAX_BYTES) -> Path:
    """Where a user-supplied file or folder named by a ``RelPath`` config field lives: under ``<project>/data/``.

    What is there must be a regular file or a folder of regular files (a FIFO would block the reader
    forever, a device could be endless), must stay inside ``data/`` once symlinks are followed, and a file
    must be at most ``max_bytes``. A path that does not exist is returned as is: the loader names it."""
    import os

    root = Path(os.environ.get("PAPERLINE_ROOT") or Path.cwd())
    data = root / "data"
    path = data / _inside_project(relative)
    if not os.path.lexists(path):
        return path
    _check_user_entry(path, relative, data.resolve(), max_bytes)
    if path.is_dir():
        for count, entry in enumerate(path.rglob("*")):
            if count >= USER_DIR_MAX_ENTRIES:
                raise UserDataError(f"data/{relative}: more than {USER_DIR_MAX_ENTRIES} entries; refusing to read it")
            if entry.is_symlink() or not entry.is_dir():
                _check_user_entry(entry, str(entry.relative_to(data)), data.resolve(), max_bytes)
    return path


def _check_user_entry(path: Path, name: str, data_root: Path, max_bytes: int) -> None:
    import os
    import stat

    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # a dangling link or a loop
        raise UserDataError(f"data/{name}: cannot be resolved ({exc})") from None
    if not resolved.is_relative_to(data_root):
        raise UserDataError(f"data/{name} leads outside the project's data/ folder (to {resolved}); refusing it")
    mode = os.stat(resolved).st_mode
    if stat.S_ISDIR(mode):
        return
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device or special file"
        raise UserDataError(f"data/{name} is {kind}, not a regular file; refusing to read it")
    size = os.stat(resolved).st_size
    if size > max_bytes:
        raise UserDataError(f"data/{name} is {size / 2**30:.1f} GiB, above the {max_bytes / 2**30:.1f} GiB limit")


class StrictModel(BaseModel):
    """Base of all configs: strict types, immutable, unknown keys rejected, floats finite (``inf``,
    ``nan`` and overflowing literals such as ``1e400`` are refused before anything runs)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)


class MethodConfig(StrictModel):
    """Base of a method's config.

    Field defaults are the ``default`` scale. ``SCALES`` holds the overrides (dotted keys)
    that turn it into ``smoke`` and ``paper``. Put dataset-shaping fields in a nested
    ``data`` model: the DVC prepare stage depends on ``<slug>.data`` only.
    """

    SCALES: ClassVar[dict[str, dict[str, Any]]] = {"smoke": {}, "paper": {}}

    scale: Scale = Scale.default  # which named size this is; set by for_scale, not an override
    seed: int = Field(0, ge=0, le=SEED_MAX)  # NumPy's seeding range, so a bad seed fails here, not in prepare

    @classmethod
    def for_scale(cls, scale: Scale | str, overrides: Mapping[str, Any] | None = None) -> Self:
        """The config at a named scale with dotted-key overrides applied on top."""
        scale = Scale(scale)
        if overrides and "scale" in overrides:
            raise ValueError("'scale' is not an override; choose the scale with --scale")
        values: dict[str, Any] = {"scale": scale.value}
        # A section an override reaches into starts from its *default instance*, not from its class:
        # a field declared as `teacher: Teacher = Teacher(width=8)` keeps width 8 when `teacher.lr` is set.
        defaults = cls().model_dump(mode="json")
        for key, value in cls.SCALES.get(scale.value, {}).items():
            _set_dotted(values, key, value, defaults)
        for key, value in (overrides or {}).items():
            _set_dotted(values, key, value, defaults)
        return cls.from_mapping(values)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Self:
        """Validate plain (JSON-like) data strictly; lists become tuples where declared."""
        return cls.model_validate_json(json.dumps(values))

    def flat(self) -> dict[str, Any]:
        """Dotted-key view, e.g. for MLflow params."""
        out: dict[str, Any] = {}

        def walk(prefix: str, obj: Any) -> None:
            if isinstance(obj, dict):
                for k, v in obj.items():
                    walk(f"{prefix}{k}.", v)
            else:
                out[prefix[:-1]] = obj

        walk("", self.model_dump(mode="json"))
        return out


def _set_dotted(target: dict[str, Any], key: str, value: Any, defaults: Mapping[str, Any] | None = None) -> None:
    parts = key.split(".")
    node, default = target, defaults
    for part in parts[:-1]:
        default = default.get(part) if isinstance(default, Mapping) else None
        if part not in node:
            node[part] = copy.deepcopy(default) if isinstance(default, dict) else {}
        node = node[part]
        if not isinstance(node, dict):
            raise ValueError(f"override key {key!r}: {part!r} is not a section")
    node[parts[-1]] = value


# ----------------------------------------------------------------------------- results


DATA_SOURCES = ("real", "synthetic")


def dataset_meta(source: str, provenance: str, **extra: Any) -> dict[str, Any]:
    """The ``meta`` every ``prepare`` returns: ``source`` is ``real`` (a benchmark's own files) or
    ``synthetic`` (generated from the seed); ``provenance`` says where it came from in one line
    (package and version, file and sha256, generator and parameters). Reports show both."""
    if source not in DATA_SOURCES:
        raise ValueError(f"dataset source {source!r}: expected one of {DATA_SOURCES}")
    if not provenance.strip():
        raise ValueError("dataset provenance must say where the data came from")
    return {"source": source, "provenance": provenance, **extra}


@dataclass(frozen=True)
class DatasetRef:
    """A prepared dataset on disk: folder, files, content hash and metadata."""

    name: str
    path: Path
    files: tuple[str, ...]
    sha256: str
    meta: dict[str, Any] = field(default_factory=dict)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def source(self) -> str:
        return str(self.meta.get("source", "unspecified"))

    @property
    def provenance(self) -> str:
        return str(self.meta.get("provenance", ""))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(data_dir: Path, meta: Mapping[str, Any] | None = None) -> DatasetRef:
    """Hash every file in ``data_dir`` and record it (plus ``meta``) in MANIFEST.json.

    Call it last in ``prepare``: the manifest is how later steps detect a corrupt dataset.
    """
    data_dir = Path(data_dir)
    files = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*") if p.is_file() and p.name != MANIFEST)
    hashes = {f: _sha256(data_dir / f) for f in files}
    total = hashlib.sha256("".join(f"{f}:{h}\n" for f, h in hashes.items()).encode()).hexdigest()
    manifest = {"sha256": total, "files": hashes, "meta": dict(meta or {})}
    (data_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return DatasetRef(data_dir.name, data_dir, tuple(files), total, dict(meta or {}))


class DatasetError(RuntimeError):
    """A dataset is missing or does not match its recorded hashes."""


def read_dataset(data_dir: Path, verify: bool = True) -> DatasetRef:
    """Load a prepared dataset's manifest, checking every file against its hash."""
    data_dir = Path(data_dir)
    manifest_path = data_dir / MANIFEST
    if not manifest_path.is_file():
        raise DatasetError(f"dataset {data_dir.name!r} is missing at {data_dir} (no {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise DatasetError(f"dataset {data_dir.name!r}: {manifest_path} is not valid JSON ({exc})") from exc
    if verify:
        for name, expected in manifest["files"].items():
            path = data_dir / name
            if not path.is_file():
                raise DatasetError(f"dataset {data_dir.name!r}: file {name!r} is missing")
            if _sha256(path) != expected:
                raise DatasetError(
                    f"dataset {data_dir.name!r}: file {name!r} does not match its recorded sha256 (corrupt)"
                )
    return DatasetRef(data_dir.name, data_dir, tuple(manifest["files"]), manifest["sha256"], manifest["meta"])


@dataclass
class TrainedArtifacts:
    """What ``train`` leaves behind.

    ``history`` maps a variant name ("method", "baseline", "baseline_spectral", "method_seed1"...)
    to its learning curve: a list of ``{"step": int, <metric>: float, ...}`` records, logged
    to MLflow as that variant's nested run under ``train/``. ``summary`` holds final
    training figures (also logged under ``train/``). ``evidence`` is what the selection and
    early-stopping helpers recorded during the step (``models.common.evidence``; the train step
    fills it in), read by the verdict diagnostics.
    """

    model_dir: Path
    history: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    FILE: ClassVar[str] = "train.json"

    def save(self) -> None:
        payload = {"history": self.history, "summary": self.summary, "evidence": self.evidence}
        (self.model_dir / self.FILE).write_text(json.dumps(payload, indent=1, default=float))

    @classmethod
    def load(cls, model_dir: Path) -> TrainedArtifacts:
        path = Path(model_dir) / cls.FILE
        if not path.is_file():
            raise FileNotFoundError(f"no trained model at {model_dir} (missing {cls.FILE}); run the train step first")
        payload = json.loads(path.read_text())
        return cls(Path(model_dir), payload["history"], payload["summary"], payload.get("evidence", {}))


@dataclass
class Metrics:
    """Flat metric dict (keys like ``method/acc_clean``, ``baseline/acc_clean``), figure paths, and the
    per-unit values the claim's intervals are taken over.

    ``units[metric][arm][label]`` holds one number per paired unit (``seed0``, ``split3``); add them with
    ``add_units`` and read them back aligned with ``paired``. The spine flattens them into ``values`` as
    ``<arm>/<label>/<metric>`` (``unit_values``) for ``metrics.json`` and MLflow; methods never build such
    keys by hand. The spine prefixes keys with ``eval/`` when logging; methods must not.
    """

    values: dict[str, float]
    figures: list[Path] = field(default_factory=list)
    units: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    def non_finite(self) -> list[str]:
        return [k for k, v in {**self.values, **self.unit_values()}.items() if not math.isfinite(float(v))]

    def add_units(self, metric: str, arm: str, values: Any, labels: Sequence[str] | None = None) -> None:
        """Record ``arm``'s per-unit ``values`` of ``metric``: a ``UnitValues``, or numbers with their ``labels``."""
        if labels is None:
            labels = getattr(values, "labels", None)
            if labels is None:
                raise ValueError(f"units of {arm}/{metric}: give the unit labels (or a UnitValues)")
        numbers = [float(x) for x in (values.values if hasattr(values, "labels") else values)]
        labels = [str(x) for x in labels]
        if len(labels) != len(numbers) or len(set(labels)) != len(labels):
            raise ValueError(f"units of {arm}/{metric}: {len(numbers)} values for labels {labels}")
        for part, what in ((metric, "metric"), (arm, "arm")):
            if not part or part != part.strip():
                raise ValueError(f"units: {what} name {part!r} is empty or padded")
        if any("/" in x or not x for x in labels):
            raise ValueError(f"units of {arm}/{metric}: labels {labels} must be non-empty and contain no '/'")
        arms = self.units.setdefault(metric, {})
        if arm in arms:
            raise ValueError(f"units of {arm}/{metric} recorded twice")
        arms[arm] = dict(zip(labels, numbers))

    def unit(self, metric: str, arm: str):
        """``arm``'s per-unit values of ``metric`` as a ``UnitValues``."""
        from models.common.units import UnitValues

        try:
            per_unit = self.units[metric][arm]
        except KeyError:
            have = {m: sorted(a) for m, a in self.units.items()}
            raise KeyError(f"no per-unit values of {metric!r} for arm {arm!r}; recorded: {have}") from None
        return UnitValues(list(per_unit), list(per_unit.values()))

    def paired(self, metric: str, *arms: str) -> dict[str, Any]:
        """The per-unit values of ``metric`` for ``arms``, aligned on one label order; refuses arms whose
        units differ (a seed missing from one arm is an error, never dropped)."""
        from models.common.units import UnitsNotAligned, UnitValues

        if not arms:
            arms = tuple(self.units.get(metric, {}))
        first = self.unit(metric, arms[0])
        out = {arms[0]: first}
        for arm in arms[1:]:
            other = self.units[metric].get(arm) if metric in self.units else None
            if other is None:
                self.unit(metric, arm)  # raises the KeyError naming what exists
            if set(other) != set(first.labels):
                raise UnitsNotAligned(
                    f"{metric}: arm {arm!r} has units {sorted(other)}, arm {arms[0]!r} has {sorted(first.labels)}"
                )
            out[arm] = UnitValues(first.labels, [other[label] for label in first.labels])
        return out

    def unit_values(self) -> dict[str, float]:
        """Every per-unit value under its flat key ``<arm>/<label>/<metric>``."""
        return {
            f"{arm}/{label}/{metric}": value
            for metric, arms in self.units.items()
            for arm, per_unit in arms.items()
            for label, value in per_unit.items()
        }

    def flat(self) -> dict[str, float]:
        """``values`` and the flattened per-unit values together (what ``metrics.json`` holds); a per-unit
        key that ``values`` already holds with another number is an error."""
        flat = dict(self.values)
        for key, value in self.unit_values().items():
            if key in flat and flat[key] != value and not (math.isnan(flat[key]) and math.isnan(value)):
                raise ValueError(f"metric {key!r} is both a per-unit value ({value}) and a value ({flat[key]})")
            flat[key] = value
        return flat


State = Literal["holds", "fails", "inconclusive"]
Direction = Literal[">=", ">", "<=", "<"]
STATES: tuple[State, ...] = ("holds", "fails", "inconclusive")


def _passes(value: float, threshold: float, direction: str) -> bool:
    return {">=": value >= threshold, ">": value > threshold, "<=": value <= threshold, "<": value < threshold}[
        direction
    ]


@dataclass(frozen=True)
class Criterion:
    """One measured criterion of a claim: an estimate with its 95 % interval over paired units.

    ``state`` follows REVIEW.md §1: *holds* when the whole interval ``[low, high]`` is on the
    passing side of ``threshold``, *fails* when the whole interval is on the failing side,
    *inconclusive* when it straddles. A deterministic criterion has ``low == high == estimate``.
    A non-finite estimate fails (``reason`` says why); a non-finite interval end (one unit, say)
    can at best be inconclusive. Build criteria with ``models.common.verdicts``.
    """

    name: str  # a short key, logged as claim/<name>/...
    statement: str  # one line: what is compared with what
    estimate: float
    low: float
    high: float
    threshold: float
    direction: Direction  # estimate <direction> threshold is the passing side
    units: str = "deterministic"  # what the interval is over: "5 paired seeds", "10 splits x 8 graphs"
    n_units: int = 1
    interval: str = "exact"  # "t", "bootstrap", "clopper-pearson", "exact"
    paper: str = ""  # the paper's reported number in this setting, with its source, where known
    reason: str = ""  # why the state is what it is, where the numbers do not say it
    labels: tuple[str, ...] = ()  # the paired units (seed0, split3, ...), in order
    unit_values: tuple[float, ...] = ()  # per-unit numbers the estimate is the mean of (a t interval's units)
    covers: tuple[str, ...] = ()  # the random draws the units vary: "training seed", "data split", ...
    not_covered: tuple[str, ...] = ()  # draws the result depends on that every unit shares (held fixed)

    def __post_init__(self) -> None:
        for key in ("estimate", "low", "high", "threshold"):  # numpy scalars -> float, so JSON and checks agree
            object.__setattr__(self, key, float(getattr(self, key)))
        object.__setattr__(self, "n_units", int(self.n_units))
        for key in ("labels", "covers", "not_covered"):
            object.__setattr__(self, key, tuple(str(x) for x in getattr(self, key)))
        object.__setattr__(self, "unit_values", tuple(float(x) for x in self.unit_values))
        if self.direction not in (">=", ">", "<=", "<"):
            raise ValueError(f"criterion {self.name!r}: direction {self.direction!r} is not one of >=, >, <=, <")
        if not self.name or "/" in self.name:
            raise ValueError(f"criterion name {self.name!r}: must be non-empty and contain no '/'")

    @property
    def state(self) -> State:
        if (
            not (math.isfinite(self.estimate) and math.isfinite(self.threshold))
            or math.isnan(self.low)
            or math.isnan(self.high)
        ):
            return "fails"
        lower_ok, upper_ok = (
            _passes(self.low, self.threshold, self.direction),
            _passes(self.high, self.threshold, self.direction),
        )
        if lower_ok and upper_ok:
            return "holds"
        if not lower_ok and not upper_ok:
            return "fails"
        return "inconclusive"

    @property
    def why(self) -> str:
        """The reason the state is what it is, in words."""
        if self.reason:
            return self.reason
        if not math.isfinite(self.estimate) or math.isnan(self.low) or math.isnan(self.high):
            return "the estimate is not a finite number"
        if self.state == "inconclusive":
            return "the interval straddles the threshold"
        return ""

    def describe(self, digits: int = 3) -> str:
        """``name: 0.93 [0.91, 0.95] >= 0.9 -> holds``."""

        def f(x: float) -> str:
            return f"{x:.{digits}g}"

        interval = "" if self.low == self.high == self.estimate else f" [{f(self.low)}, {f(self.high)}]"
        return f"{self.name}: {f(self.estimate)}{interval} {self.direction} {f(self.threshold)} -> {self.state}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-native (tuples as lists), so every view of a criterion compares equal."""
        payload = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        return {**payload, "state": self.state}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Criterion:
        fields = {k: v for k, v in payload.items() if k not in ("state", "units_to_decide")}
        for key in ("estimate", "low", "high", "threshold"):
            fields[key] = float(fields[key])
        return cls(**fields)


def verdict_of(criteria: Sequence[Criterion]) -> State:
    """The claim holds when every criterion holds, fails when any fails, else is inconclusive."""
    states = [c.state for c in criteria]
    if not states:
        return "inconclusive"
    if "fails" in states:
        return "fails"
    return "holds" if all(s == "holds" for s in states) else "inconclusive"


@dataclass(frozen=True)
class Control:
    """A negative control: a deliberately broken variant (the mechanism removed or weakened: too few
    samples, a random projection, the baseline labelled as the method) scored by the rule of the deciding
    criterion ``of``, at the same budget. It must not hold; when it does, that criterion cannot tell the
    method from the broken variant, and the claim cannot hold."""

    of: str  # the name of the deciding criterion it shadows
    broken: str  # what was removed or weakened, in words
    criterion: Criterion  # the same statistic, threshold and direction, measured on the broken variant

    @property
    def passes(self) -> bool:
        return self.criterion.state == "holds"

    def to_dict(self) -> dict[str, Any]:
        return {"of": self.of, "broken": self.broken, "criterion": self.criterion.to_dict()}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Control:
        return cls(payload["of"], payload["broken"], Criterion.from_dict(payload["criterion"]))


@dataclass(frozen=True)
class Separation:
    """Where the compared arms sit on a bounded metric. When every arm is within ``margin`` of the
    metric's ``ceiling`` (or of its ``floor``, e.g. chance) the task cannot separate them: saturated."""

    metric: str  # what is compared, e.g. "held-out success"
    arms: Mapping[str, float]  # each compared arm's value (the mean over units)
    floor: float | None = None  # the worst reachable value (chance, 0 success)
    ceiling: float | None = None  # the best reachable value (1.0 accuracy, 0 error)
    margin: float = 0.02

    @property
    def saturated(self) -> str:
        """``"ceiling"``, ``"floor"`` or ``""``."""
        values = [float(v) for v in self.arms.values()]
        if not values or not all(math.isfinite(v) for v in values):
            return ""
        for end, name in ((self.ceiling, "ceiling"), (self.floor, "floor")):
            if end is not None and all(abs(v - end) <= self.margin for v in values):
                return name
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "arms": dict(self.arms)}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Separation:
        return cls(**{k: v for k, v in payload.items() if k != "saturated"})


FlagKind = Literal["set-up", "budget", "check", "units", "error"]


@dataclass(frozen=True)
class Flag:
    """A diagnostic the platform raised on a verdict: something other than the method may decide it.

    ``code`` is one of ``grid_edge``, ``no_eligible_point``, ``still_improving``, ``saturated``,
    ``control_passes``, ``control_inconclusive``, ``no_control``, ``not_covered``; ``subject`` the arm or
    criterion it concerns. ``explanation`` is the claim's own account of it (``ClaimResult.explained``):
    an explained flag is still shown, and the verdict is still not decided by the method alone."""

    kind: FlagKind
    code: str
    subject: str
    text: str
    explanation: str = ""

    @property
    def key(self) -> str:
        return f"{self.code}:{self.subject}"

    @property
    def label(self) -> str:
        return f"{self.kind}: {self.text}" + (" (explained)" if self.explanation else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Flag:
        return cls(**payload)


@dataclass
class ClaimResult:
    """The paper's claim measured.

    ``statement`` is the claim in one sentence; ``criteria`` the measured criteria whose states
    decide the ``verdict``; ``sanity`` the must-pass checks (any False fails the run and blocks
    promotion); ``figures`` further measured numbers worth logging (``claim/<name>``), not part
    of the verdict. A claim that does not hold is a result, not an error.

    What the verdict diagnostics read besides the training evidence: ``controls``, the negative
    controls (a passing control keeps the claim from holding); ``separations``, where the compared arms
    sit on bounded metrics (saturation); ``explained``, the claim's account of flags it cannot remove
    within the budget, keyed by a flag's ``key`` (``still_improving:otter/fine-tuned``) or its ``code``.
    ``diagnostics`` (the flags) and ``power`` (units that would decide each inconclusive criterion) are
    filled in by the platform (``tasks.diagnostics``), never by a method.
    """

    statement: str
    criteria: list[Criterion]
    sanity: dict[str, bool] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    notes: str = ""
    controls: list[Control] = field(default_factory=list)
    separations: list[Separation] = field(default_factory=list)
    explained: dict[str, str] = field(default_factory=dict)
    diagnostics: list[Flag] = field(default_factory=list)
    power: dict[str, float | None] = field(default_factory=dict)  # None: the interval says nothing about it

    def __post_init__(self) -> None:
        names = [c.name for c in self.criteria]
        if len(set(names)) != len(names):
            raise ValueError(f"claim criteria names repeat: {names}")
        for control in self.controls:
            if control.of not in names:
                raise ValueError(f"control of {control.of!r}: no such criterion; criteria: {names}")

    @property
    def verdict(self) -> State:
        """The criteria's verdict; one that would hold is inconclusive while a negative control holds too."""
        verdict = verdict_of(self.criteria)
        if verdict == "holds" and any(c.passes for c in self.controls):
            return "inconclusive"
        return verdict

    @property
    def holds(self) -> bool:
        return self.verdict == "holds"

    @property
    def sane(self) -> bool:
        return all(self.sanity.values())

    @property
    def decided_by(self) -> str:
        """``method`` when the diagnostics raised no flag, else the flags, ``; ``-separated."""
        return "; ".join(f.label for f in self.diagnostics) if self.diagnostics else "method"

    @property
    def unexplained(self) -> list[Flag]:
        return [f for f in self.diagnostics if not f.explanation]

    def criterion(self, name: str) -> Criterion:
        for c in self.criteria:
            if c.name == name:
                return c
        raise KeyError(f"no criterion {name!r}; criteria: {[c.name for c in self.criteria]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "statement": self.statement,
            "verdict": self.verdict,
            "decided_by": self.decided_by,
            "criteria": [c.to_dict() for c in self.criteria],
            "sanity": dict(self.sanity),
            "figures": dict(self.figures),
            "notes": self.notes,
            "controls": [c.to_dict() for c in self.controls],
            "separations": [s.to_dict() for s in self.separations],
            "explained": dict(self.explained),
            "diagnostics": [f.to_dict() for f in self.diagnostics],
            "power": dict(self.power),
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> ClaimResult:
        return cls(
            payload["statement"],
            [Criterion.from_dict(c) for c in payload["criteria"]],
            dict(payload.get("sanity", {})),
            dict(payload.get("figures", {})),
            payload.get("notes", ""),
            [Control.from_dict(c) for c in payload.get("controls", [])],
            [Separation.from_dict(s) for s in payload.get("separations", [])],
            dict(payload.get("explained", {})),
            [Flag.from_dict(f) for f in payload.get("diagnostics", [])],
            dict(payload.get("power", {})),
        )


# ----------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class MethodSpec:
    """One registered method: what it is, its config class, and where its code lives."""

    slug: str
    title: str  # the paper's title
    paper: str  # short citation: venue + arXiv/OpenReview id
    claim: str  # the key claim in one line, as checked
    config: type[MethodConfig]
    impl: str  # dotted module with prepare/train/load_model/evaluate/claim
    dataset: str  # folder under data/
    primary_metric: str  # a key of Metrics.values used for champion/challenger
    higher_is_better: bool = True
    # What `paperline run --all` plans with: CPU seconds of `default` on one core, measured on the host whose
    # reference timings `flows.method_flows.RECORDED_REFERENCE` holds, and the shares of that time by kind of
    # work (tasks.speed.KINDS: gemm, conv, adam, python; they sum to 1). 0 = not measured yet.
    default_cpu_seconds: float = 0.0
    work_mix: tuple[tuple[str, float], ...] = (("adam", 0.5), ("python", 0.5))
    # Overrides on top of `paper` that cut the data to a few items and every loop to a couple of steps while
    # keeping the paper's network and data shapes: `paperline dry-run` (tasks/dry_run.py) runs them on a CPU.
    dry_run: tuple[tuple[str, Any], ...] = ()

    def module(self) -> ModuleType:
        return importlib.import_module(self.impl)

    def make_config(self, scale: Scale | str = Scale.default, overrides: Mapping[str, Any] | None = None):
        return self.config.for_scale(scale, overrides)


__all__ = [
    "ClaimResult",
    "Control",
    "Criterion",
    "Flag",
    "Separation",
    "DATA_SOURCES",
    "DatasetError",
    "DatasetRef",
    "MethodConfig",
    "MethodSpec",
    "RelPath",
    "Metrics",
    "Scale",
    "StrictModel",
    "TrainedArtifacts",
    "UserDataError",
    "ValidationError",
    "dataset_meta",
    "verdict_of",
    "read_dataset",
    "user_data_path",
    "write_manifest",
]
