"""Configs: every registered config validates at every scale; bad input is rejected clearly."""

import typing

import pytest
import yaml
from pydantic import BaseModel, Field, ValidationError

from models.base import MethodConfig, RelPath, Scale, StrictModel
from models.registry import METHODS
from tasks import config as cfgmod
from tasks.dvc_pipeline import render_dvc_yaml
from tests.conftest import ROOT


@pytest.mark.parametrize("slug", list(METHODS))
@pytest.mark.parametrize("scale", list(Scale))
def test_every_config_validates_at_every_scale(slug, scale):
    cfg = METHODS[slug].make_config(scale)
    assert cfg.scale is scale
    with pytest.raises(ValidationError):
        cfg.seed = 5  # frozen
    # A round trip through plain data (what params.yaml and MLflow see) is lossless.
    assert type(cfg).from_mapping(cfg.model_dump(mode="json")) == cfg


@pytest.mark.parametrize("slug", list(METHODS))
def test_every_config_has_a_data_section(slug):
    # DVC's prepare stage depends on `<slug>.seed` and `<slug>.data` only.
    dumped = METHODS[slug].make_config().model_dump()
    assert isinstance(dumped.get("data"), dict) and dumped["data"], f"{slug} has no `data` section"


def test_scales_differ():
    for spec in METHODS.values():
        assert spec.make_config("smoke") != spec.make_config("default"), spec.slug


@pytest.mark.sync
def test_params_yaml_is_in_sync_with_the_configs():
    on_disk = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert on_disk == cfgmod.default_params(), "run `paperline params --write`"
    for slug in METHODS:
        cfgmod.config_from_params(ROOT, slug)


@pytest.mark.sync
def test_dvc_yaml_is_in_sync_with_the_registry():
    assert (ROOT / "dvc.yaml").read_text() == render_dvc_yaml(), "run `paperline params --write`"


class Toy(MethodConfig):
    class Data(StrictModel):
        n: int = Field(100, gt=0)

    data: Data = Data()
    lr: float = Field(1e-3, gt=0)
    layers: tuple[int, ...] = (8, 8)
    SCALES = {"smoke": {"data.n": 10}, "paper": {"lr": 0.1}}


@pytest.mark.parametrize(
    "override, fragment",
    [
        ({"epochs": 3}, "unknown key 'epochs'"),
        ({"lr": "fast"}, "lr='fast'"),
        ({"lr": -1.0}, "greater than 0"),
        ({"data.n": 2.5}, "data.n=2.5"),
        ({"data.n": "10"}, "data.n='10'"),  # strict: no silent string->int coercion
        ({"data.m": 1}, "unknown key 'data.m'"),
    ],
)
def test_bad_overrides_name_the_key(override, fragment, monkeypatch):
    from models.base import MethodSpec

    spec = MethodSpec("toy", "Toy", "none", "none", Toy, "tests.none", "toy", "m")
    with pytest.raises(cfgmod.ConfigError) as info:
        cfgmod.build_config(spec, "default", override)
    assert fragment in str(info.value)


def test_overrides_and_scales_compose():
    cfg = Toy.for_scale("smoke", {"lr": 0.5, "layers": [4, 4, 4]})
    assert (cfg.data.n, cfg.lr, cfg.layers, cfg.scale) == (10, 0.5, (4, 4, 4), Scale.smoke)
    with pytest.raises(ValueError, match="scale"):
        Toy.for_scale("default", {"scale": "paper"})


@pytest.mark.parametrize(
    "text, value",
    [("3", 3), ("1e-3", 1e-3), ("0.5", 0.5), ("true", True), ("[1, 2]", [1, 2]), ("adam", "adam"), ("a=b", "a=b")],
)
def test_parse_value(text, value):
    assert cfgmod.parse_value(text) == value


def test_parse_overrides_rejects_missing_equals():
    with pytest.raises(cfgmod.ConfigError, match="key=value"):
        cfgmod.parse_overrides(["epochs"])
    assert cfgmod.parse_overrides(["a.b=2", "c= x "]) == {"a.b": 2, "c": "x"}


def test_unknown_scale():
    spec = next(iter(METHODS.values()))
    with pytest.raises(cfgmod.ConfigError, match="unknown scale 'huge'; choose from: smoke, default, paper"):
        cfgmod.build_config(spec, "huge")


def test_malformed_params_yaml(tmp_path):
    (tmp_path / "params.yaml").write_text("a: [unclosed\n")
    with pytest.raises(cfgmod.ConfigError, match="params.yaml is not valid YAML"):
        cfgmod.read_params(tmp_path)
    (tmp_path / "params.yaml").write_text("nosuch: {}\n")
    with pytest.raises(cfgmod.ConfigError, match="unknown method section 'nosuch'"):
        cfgmod.read_params(tmp_path)
    slug = next(iter(METHODS))
    bad = cfgmod.default_params()
    bad[slug]["seed"] = "zero"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(cfgmod.ConfigError, match=rf"section '{slug}': seed='zero'"):
        cfgmod.config_from_params(tmp_path, slug)


def test_relpath_rejects_escapes():
    class WithPath(StrictModel):
        real: RelPath = ""

    assert WithPath(real="esp/real.npz").real == "esp/real.npz"
    for bad in ("../etc/passwd", "/abs/file.npz", "esp/../../x"):
        with pytest.raises(ValidationError, match="relative path inside the project"):
            WithPath(real=bad)


RELPATH_CHECKS = typing.get_args(RelPath)[1:]  # RelPath = Annotated[str, AfterValidator(...)]


def _relpath_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted names of every ``RelPath`` field in ``model``, walking nested config sections."""
    found = []
    for name, info in model.model_fields.items():
        if any(m in RELPATH_CHECKS for m in info.metadata):
            found.append(prefix + name)
        elif isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            found += _relpath_fields(info.annotation, f"{prefix}{name}.")
    return found


RELPATH_FIELDS = [(slug, key) for slug, spec in METHODS.items() for key in _relpath_fields(spec.config)]


def test_relpath_fields_are_found():
    # Guards the walk above: a change in how pydantic stores metadata must not empty the list below.
    assert {("sleeping_rl", "data.official_config_dir"), ("sbg", "data.user_trajectory")} <= set(RELPATH_FIELDS)


@pytest.mark.parametrize(("slug", "key"), RELPATH_FIELDS, ids=[f"{s}:{k}" for s, k in RELPATH_FIELDS])
@pytest.mark.parametrize("bad", ["../x", "/etc/x"])
def test_config_paths_cannot_escape_the_project(slug, key, bad):
    with pytest.raises(ValidationError, match="relative path inside the project"):
        METHODS[slug].make_config("default", {key: bad})


def test_an_override_keeps_the_default_instance_of_its_section():
    """`teacher: Teacher = Teacher(width=8)`: setting `teacher.lr` must not reset width to the class's 4."""
    from typing import ClassVar

    from models.base import MethodConfig, StrictModel

    class Teacher(StrictModel):
        width: int = 4
        lr: float = 1e-3

    class Toy(MethodConfig):
        SCALES: ClassVar[dict] = {"smoke": {"teacher.lr": 0.5}, "paper": {}}
        teacher: Teacher = Teacher(width=8)
        student: Teacher = Teacher(width=2)

    smoke = Toy.for_scale("smoke", {"student.lr": 0.25})
    assert (smoke.teacher.width, smoke.teacher.lr) == (8, 0.5)
    assert (smoke.student.width, smoke.student.lr) == (2, 0.25)
    assert Toy.for_scale("default") == Toy()
