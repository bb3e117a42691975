"""``redact_data``'s walk (sped up for ``list --json``) hides exactly what the plain
recursive walk hid, and copies everything else as it was."""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from starebrain_actions._logging import SENSITIVE_KEYS
from starebrain_actions.render.sanitize import redact_body, redact_data, redact_number


class _Word(str):
    """A string of a subclass (returned as it is, never looked into)."""


class _Level(enum.IntEnum):
    LOW = 1


def _reference(value: Any) -> Any:
    """The walk as it was written before: one call per value."""
    if isinstance(value, Mapping):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if key in SENSITIVE_KEYS and isinstance(item, str):
                result[key] = (
                    redact_body(item)
                    if key in ("body", "text", "sms_body")
                    else redact_number(item)
                )
            else:
                result[key] = _reference(item)
        return result
    if isinstance(value, list | tuple):
        return [_reference(item) for item in value]
    return value


KEYS = st.sampled_from([*sorted(SENSITIVE_KEYS), "id", "device", "evidence", "n"])
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.text(max_size=12).map(_Word),
    st.just(_Level.LOW),
)
VALUES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(KEYS, children, max_size=5),
        st.dictionaries(KEYS, children, max_size=5).map(types.MappingProxyType),
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_redaction_is_the_plain_walks(value: Any) -> None:
    """Whatever the nesting (dicts, mappings that are not dicts, lists, tuples) and leaves
    (a string subclass, an int enum, booleans), every sensitive string is hidden as the plain
    walk hid it, every other value is kept, of the same type, and shown private nothing is
    touched."""
    found = redact_data(value, show_private=False)
    expected = _reference(value)
    assert repr(found) == repr(expected)
    assert found == expected
    assert redact_data(value, show_private=True) is value
