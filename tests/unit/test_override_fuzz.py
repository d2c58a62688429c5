"""Fuzzed overrides: any key=value either validates or raises ConfigError, never a traceback."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.registry import METHODS
from tasks.config import ConfigError, allowed_keys, build_config, parse_overrides

SPECS = list(METHODS.values())
KEYS = sorted({k for spec in SPECS for k in allowed_keys(spec.config)})
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
values = st.one_of(
    text,
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "null", "[]", "[1, 2]", "{}", "{a: 1}", "1e309", "-0", "nan", "inf", "'x'"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), key=st.one_of(st.sampled_from(KEYS), text), value=values)
def test_any_override_validates_or_fails_cleanly(spec, key, value):
    try:
        cfg = build_config(spec, "default", parse_overrides([f"{key}={value}"]))
    except ConfigError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(cfg, spec.config)
