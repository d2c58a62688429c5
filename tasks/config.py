"""Configs from the command line and from params.yaml, validated before anything runs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from models.base import MethodConfig, MethodSpec, Scale
from models.registry import METHODS, get


class ConfigError(ValueError):
    """A bad override, scale or params file; the message names the bad value and what is allowed."""


class StrictYamlLoader(yaml.SafeLoader):
    """YAML with only the plain number and boolean forms (YAML 1.2's core schema): YAML 1.1 read ``010`` as 8,
    ``0x10`` as 16, ``1:30`` as 90 and ``yes``/``on`` as True, so a typo became another valid value. Those
    forms stay strings here, which the strict configs then refuse with the key's name."""


# A copy, not the inherited dict: editing SafeLoader's own table would change every yaml.safe_load in the
# process (dask read its TLS version 1.2 as the string '1.2' and refused to start a cluster).
_DROPPED = {f"tag:yaml.org,2002:{_tag}" for _tag in ("bool", "int", "float")}
StrictYamlLoader.yaml_implicit_resolvers = {
    _first: [(t, r) for t, r in _resolvers if t not in _DROPPED]
    for _first, _resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_PLAIN = {
    "bool": (re.compile(r"^(?:true|false)$"), "tf"),
    "int": (re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), "-+0123456789"),
    "float": (
        # YAML 1.2 core's infinities and NaN stay numbers, so the finite-number check names them.
        re.compile(
            r"^(?:[-+]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+.0123456789",
    ),
}
for _tag, (_pattern, _first) in _PLAIN.items():
    StrictYamlLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", _pattern, list(_first))


def strict_yaml(text: str) -> Any:
    return yaml.load(text, Loader=StrictYamlLoader)  # noqa: S506 (a SafeLoader subclass)


def parse_value(text: str) -> Any:
    """``3`` -> 3, ``1e-3`` -> 0.001, ``true`` -> True, ``[1,2]`` -> [1, 2], anything else a string (``010``,
    ``0x10`` and ``yes`` included: only plain number and boolean forms are numbers and booleans)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        value = strict_yaml(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, (bool, int, float, list, dict)) else text


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"bad override {pair!r}: expected key=value (e.g. seed=1)")
        out[key] = parse_value(value.strip())
    return out


def overrides_for(slug: str, pairs: Iterable[str] | None) -> list[str]:
    """The overrides that apply to ``slug``: plain ``key=value`` items, and ``slug:key=value`` ones
    (so one nightly run can change a single method)."""
    out = []
    for pair in pairs or []:
        target, sep, rest = pair.partition(":")
        if sep and "=" not in target:
            if target.strip() == slug:
                out.append(rest)
        else:
            out.append(pair)
    return out


def check_override_targets(pairs: Iterable[str] | None, methods: Iterable[str]) -> None:
    """``slug:key=value`` items must name one of ``methods``."""
    chosen = list(methods)
    for pair in pairs or []:
        target, sep, _ = pair.partition(":")
        if sep and "=" not in target and target.strip() not in chosen:
            raise ConfigError(
                f"override {pair!r} names method {target.strip()!r}, which is not in this run ({', '.join(chosen)})"
            )


def describe_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<config>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown key {loc!r}")
        else:
            parts.append(f"{loc}={err.get('input')!r}: {err['msg']}")
    return "; ".join(parts)


def allowed_keys(config: type[MethodConfig]) -> list[str]:
    return [k for k in config.for_scale(Scale.default).flat() if k != "scale"]


def build_config(
    spec: MethodSpec, scale: str | Scale = Scale.default, overrides: dict[str, Any] | None = None
) -> MethodConfig:
    """The validated config, or a ConfigError naming what is wrong and what is allowed."""
    try:
        scale = Scale(scale)
    except ValueError:
        raise ConfigError(f"unknown scale {scale!r}; choose from: {', '.join(s.value for s in Scale)}") from None
    try:
        return spec.make_config(scale, overrides)
    except ValidationError as exc:
        msg = describe_validation(exc)
        if "unknown key" in msg:
            msg += f" (allowed keys: {', '.join(allowed_keys(spec.config))})"
        raise ConfigError(f"invalid config for {spec.slug}: {msg}") from None
    except ValueError as exc:
        raise ConfigError(f"invalid config for {spec.slug}: {exc}") from None


# ----------------------------------------------------------------------------- params.yaml


def params_path(root: Path) -> Path:
    return root / "params.yaml"


def read_params(root: Path) -> dict[str, Any]:
    path = params_path(root)
    try:
        data = strict_yaml(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing; write it with `paperline params --write`") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of method -> config, got {type(data).__name__}")
    unknown = [k for k in data if k not in METHODS]
    if unknown:
        raise ConfigError(f"{path}: unknown method section {unknown[0]!r}; choose from: {', '.join(METHODS)}")
    return data


def config_from_params(root: Path, slug: str) -> MethodConfig:
    """The config DVC stages run with: the method's section of params.yaml, strictly validated."""
    spec = get(slug)
    data = read_params(root)
    if slug not in data:
        raise ConfigError(f"{params_path(root)}: no section for {slug!r}; write it with `paperline params --write`")
    try:
        return spec.config.from_mapping(data[slug])
    except ValidationError as exc:
        raise ConfigError(f"{params_path(root)}: section {slug!r}: {describe_validation(exc)}") from None


def default_params() -> dict[str, Any]:
    return {slug: spec.make_config(Scale.default).model_dump(mode="json") for slug, spec in METHODS.items()}


def render_params() -> str:
    header = (
        "# Per-method parameters tracked by DVC (the `default` scale).\n"
        "# Validated by the same pydantic models as the CLI; regenerate with `paperline params --write`.\n"
    )
    return header + yaml.safe_dump(default_params(), sort_keys=False, default_flow_style=None)
