"""Property: any node config the validator accepts, rendered and parsed back with Flower's rules
(regex split, TOML parse), gives the same keys, values and types."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncer.models.nodeconfig import (
    NodeConfigError,
    Var,
    check_key,
    encode_template,
    encode_typed,
    join_pairs,
)
from tests.flower_parse import parse_node_config

keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=1,
               max_size=12)
any_keys = st.text(min_size=1, max_size=12)
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),  # TOML integers are 64-bit
    st.floats(allow_nan=False),
    st.text(max_size=30),
)
_TOML_INT = re.compile(r"^[+-]?(0|[1-9][0-9]*)$")


def _accepted(pairs: dict[str, Any], encode: Any) -> list[tuple[str, Any]] | None:
    out = []
    for key, value in pairs.items():
        try:
            check_key(key)
            out.append((key, encode(value)))
        except NodeConfigError:
            return None
    return out


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(any_keys, scalars, max_size=6))
def test_typed_values_read_back_exactly(config: dict[str, Any]) -> None:
    pairs = _accepted(config, encode_typed)
    if pairs is None:
        return  # rejected with an error; nothing to round-trip
    text = join_pairs(pairs).static_text()
    parsed = parse_node_config(text)
    assert set(parsed) == set(config)
    for key, value in config.items():
        got = parsed[key]
        assert type(got) is type(value), (key, value, got, text)
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(got)
        else:
            assert got == value


def _expected_template(raw: str, pool: str, replicas: int) -> Any:
    text = raw.replace("{pool}", pool).replace("{replicas}", str(replicas))
    if raw in ("{replicas}",) or _TOML_INT.match(text):
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    return text


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(keys, st.text(max_size=30), max_size=6), st.integers(min_value=1, max_value=500))
def test_federation_strings_read_back_as_the_operator_types_them(config: dict[str, str], replicas: int) -> None:
    pool = "pool-a"
    pairs = _accepted(config, lambda v: encode_template(v, pool=pool, replicas=replicas, stateful=True))
    if pairs is None:
        return
    token = join_pairs(pairs)
    if token.dynamic:
        # fill the per-pod variables the way the shell wrapper does
        text = "".join("7" if isinstance(p, Var) else p.text for p in token.parts)
        expected = {k: _expected_template(v.replace("{index}", "7").replace("{node}", "7"), pool, replicas)
                    for k, v in config.items()}
    else:
        text = token.static_text()
        expected = {k: _expected_template(v, pool, replicas) for k, v in config.items()}
    parsed = parse_node_config(text)
    assert parsed == expected
    assert {k: type(v) for k, v in parsed.items()} == {k: type(v) for k, v in expected.items()}


@pytest.mark.parametrize(("value", "expected"), [
    ("007", '"007"'),         # the operator emits 007, which is not a TOML integer
    ("-1", "-1"),
    ("0.01", '"0.01"'),       # like the operator: only integers and booleans stay unquoted
    ("True", '"True"'),
    ('say "hi"', "'say \"hi\"'"),
    ("C:\\data", "'C:\\data'"),
])
def test_federation_value_quoting(value: str, expected: str) -> None:
    assert encode_template(value, pool="p", replicas=1, stateful=True).static_text() == expected


@pytest.mark.parametrize("value", ["line\nbreak", "both ' and \" quotes"])
def test_values_flower_cannot_read_are_rejected(value: str) -> None:
    with pytest.raises(NodeConfigError):
        encode_template(value, pool="p", replicas=1, stateful=True)


@pytest.mark.parametrize("key", ["a.b", "with space", "quote\"", ""])
def test_keys_flower_cannot_read_are_rejected(key: str) -> None:
    with pytest.raises(NodeConfigError):
        check_key(key)


def test_index_is_refused_in_daemonset_mode() -> None:
    with pytest.raises(NodeConfigError, match="only exist in StatefulSet mode"):
        encode_template("{index}", pool="p", replicas=None, stateful=False)


def test_large_integers_print_exactly() -> None:
    assert encode_typed(1000000).static_text() == "1000000"  # Helm would print 1e+06
    assert parse_node_config("n=" + encode_typed(2**62).static_text()) == {"n": 2**62}
