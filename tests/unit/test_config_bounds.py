"""Every config value that validates can run: numbers are bounded (counts above and below, floats at least
on one side, finite by ``StrictModel``), and every path to user data is a ``RelPath`` under ``data/``."""

import os
import re
import types
import typing
from dataclasses import dataclass
from unittest import mock

import annotated_types as at
import pytest
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from models.base import MethodConfig, RelPath, StrictModel
from models.registry import METHODS

RELPATH_CHECKS = typing.get_args(RelPath)[1:]  # RelPath = Annotated[str, AfterValidator(...)]


@dataclass(frozen=True)
class Leaf:
    name: str  # dotted; "[]" marks a tuple element, e.g. "kernel.cases[].canvas[]"
    type: type
    metadata: tuple

    def bounds(self, *kinds) -> list:
        found = []
        for m in self.metadata:
            found += [b for b in (m.metadata if isinstance(m, FieldInfo) else [m]) if isinstance(b, kinds)]
        return found

    @property
    def is_relpath(self) -> bool:
        return any(m in RELPATH_CHECKS for m in self.metadata)


def leaves(annotation, name: str = "", metadata: tuple = ()) -> list[Leaf]:
    """Every scalar field of a config model, through nested models, ``X | None``, ``Annotated`` and tuples."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        return leaves(base, name, metadata + tuple(extra))
    if origin in (typing.Union, types.UnionType):
        return [leaf for a in typing.get_args(annotation) if a is not type(None) for leaf in leaves(a, name, metadata)]
    if origin is tuple:
        return [leaf for a in typing.get_args(annotation) if a is not Ellipsis for leaf in leaves(a, f"{name}[]")]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        prefix = f"{name}." if name else ""
        return [
            leaf
            for field, info in annotation.model_fields.items()
            for leaf in leaves(info.annotation, prefix + field, tuple(info.metadata))
        ]
    return [Leaf(name, annotation, metadata)] if isinstance(annotation, type) else []


def unbounded(model: type[BaseModel]) -> list[str]:
    """Offenders: an int without a lower or an upper bound, a float without any bound."""
    problems = []
    for leaf in leaves(model):
        if leaf.type is int and not (leaf.bounds(at.Ge, at.Gt) and leaf.bounds(at.Le, at.Lt)):
            problems.append(f"{leaf.name}: int needs ge/gt and le/lt (a count's sane range)")
        elif leaf.type is float and not leaf.bounds(at.Ge, at.Gt, at.Le, at.Lt):
            problems.append(f"{leaf.name}: float needs a bound (its natural range)")
    return problems


# A str field named like this points at a file or folder, so it must be a RelPath.
PATH_WORDS = {
    "dir",
    "path",
    "file",
    "files",
    "npz",
    "jsonl",
    "json",
    "csv",
    "root",
    "folder",
    "trajectory",
    "topology",
    "weights",
    "ckpt",
    "checkpoint",
    "pdb",
    "wheel",
    "lm",
}


def path_like_strs(model: type[BaseModel]) -> list[str]:
    return [
        f"{leaf.name}: a path-like str; make it a RelPath (relative to data/, no '..', not absolute)"
        for leaf in leaves(model)
        if leaf.type is str and not leaf.is_relpath and PATH_WORDS & set(re.split(r"[_\W]+", leaf.name.split(".")[-1]))
    ]


# ----------------------------------------------------------------------------- the walk itself


class _Toy(MethodConfig):
    class Inner(StrictModel):
        steps: int = 3  # unbounded
        sides: tuple[int, ...] = (1,)  # unbounded elements
        ok: tuple[typing.Annotated[int, Field(ge=1, le=9)], ...] = (1,)
        data_dir: str = ""

    inner: Inner = Inner()
    cases: tuple[Inner, ...] = ()
    lr: float = 0.1
    rate: float | None = Field(None, gt=0)
    width: int = Field(4, ge=1)  # no upper bound
    weights: RelPath = ""


def test_the_walk_finds_every_offender():
    assert unbounded(_Toy) == [
        "inner.steps: int needs ge/gt and le/lt (a count's sane range)",
        "inner.sides[]: int needs ge/gt and le/lt (a count's sane range)",
        "cases[].steps: int needs ge/gt and le/lt (a count's sane range)",
        "cases[].sides[]: int needs ge/gt and le/lt (a count's sane range)",
        "lr: float needs a bound (its natural range)",
        "width: int needs ge/gt and le/lt (a count's sane range)",
    ]
    assert [p.split(":")[0] for p in path_like_strs(_Toy)] == ["inner.data_dir", "cases[].data_dir"]


def test_the_walk_reaches_nested_tuples_and_sections():
    names = {(slug, leaf.name) for slug, spec in METHODS.items() for leaf in leaves(spec.config)}
    assert {
        ("hpde_gnn", "max_epochs"),
        ("hpde_gnn", "data.csbm.homophily[]"),
        ("sta", "kernel.cases[].canvas[]"),
        ("sta", "eval.sweep_windows[][]"),
        ("bnn_linf", "data.heart_rate_bands[][]"),
        ("ars", "toy.sac.hidden[]"),
        ("hpde_gnn", "data.planetoid_dir"),
        ("sdcib", "data.real_npz"),
    } <= names


# ----------------------------------------------------------------------------- every registered config


@pytest.mark.parametrize("slug", list(METHODS))
def test_every_numeric_field_is_bounded(slug):
    problems = unbounded(METHODS[slug].config)
    assert not problems, f"{slug}:\n" + "\n".join(problems)


@pytest.mark.parametrize("slug", list(METHODS))
def test_every_path_field_is_a_relpath(slug):
    problems = path_like_strs(METHODS[slug].config)
    assert not problems, f"{slug}:\n" + "\n".join(problems)


COUNT_NAMES = ("epochs", "steps", "episodes", "rounds", "sac_steps", "dense_steps")


def count_field(slug: str) -> str:
    """The method's first training-length count (epochs, steps, episodes, rounds), else its first int."""
    ints = [leaf.name for leaf in leaves(METHODS[slug].config) if leaf.type is int and "[]" not in leaf.name]
    return next((n for n in ints if n.split(".")[-1] in COUNT_NAMES), ints[1])  # ints[0] is the seed


def _run_cli(args, root):
    """``flows.cli.main`` in this process with PAPERLINE_ROOT=root; a run that got past validation fails the test."""
    from flows import cli

    def started(*_, **__):
        raise AssertionError(f"{args}: validation passed and a run was about to start")

    with (
        mock.patch.dict(os.environ, {"PAPERLINE_ROOT": str(root)}),
        mock.patch.object(cli.env, "make_state_dirs", started),
    ):
        return cli.main(args)


@pytest.mark.parametrize("slug", list(METHODS))
def test_an_absurd_count_exits_2_before_any_run(slug, tmp_path, capsys):
    key = count_field(slug)
    assert _run_cli(["run", slug, "--set", f"{key}=1000000000"], tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{key}=1000000000: Input should be less than or equal to" in err[0], err
    assert list(tmp_path.iterdir()) == [], "an error path wrote files"


@pytest.mark.parametrize(
    "override, message",
    [
        ("seed=-1", "seed=-1: Input should be greater than or equal to 0"),
        ("seed=1000000000000000000000000000000", "Input should be less than or equal to 4294967295"),
        ("regression_lr=.inf", "regression_lr=inf: Input should be a finite number"),
        ("regression_lr=1e400", "regression_lr=inf: Input should be a finite number"),
        ("regression_lr=1e300", "regression_lr=1e+300: Input should be less than or equal to 10"),
        ("dropout_grid=[1.0]", "dropout_grid.0=1.0: Input should be less than 1"),
        ("data.csbm.homophily=[0.1, 2.0]", "data.csbm.homophily.1=2.0: Input should be less than or equal to 1"),
        ("data.planetoid_dir=/tmp/crafted", "must be a relative path inside the project's data/ folder"),
        ("data.planetoid_dir=../crafted", "must be a relative path inside the project's data/ folder"),
        ("data.planetoid_name=../../x", "data.planetoid_name='../../x': String should match pattern"),
    ],
)
def test_the_issues_values_exit_2_naming_the_key(override, message, tmp_path, capsys):
    assert _run_cli(["run", "hpde_gnn", "--scale", "smoke", "--set", override], tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("paperline: error: invalid config for hpde_gnn") and message in err[0], (
        err
    )
    assert list(tmp_path.iterdir()) == []
