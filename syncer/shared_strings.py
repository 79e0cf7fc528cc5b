"""Keeping many small JSON objects compact: the short strings they repeat, stored once.

The agent holds tens of thousands of objects parsed from the API server (live metadata, slim
pods and workloads). Each parse makes new string objects for values that thousands of objects
share: label values, namespaces, field managers, timestamps to the second. Interned, each is
stored once, which is a good part of what a live object's metadata takes.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar

T = TypeVar("T")

SHORT = 64  # longer strings are rarely repeated (certificates, messages)


def share_strings(value: T, skip: frozenset[str] = frozenset()) -> T:
    """Intern the short strings of `value` (dicts and lists changed in place; a string is
    returned interned), except under the dict keys in `skip`. Returns `value`."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= SHORT else value  # type: ignore[return-value]
    if isinstance(value, dict):
        items: dict[Any, Any] = value
        for key, item in items.items():
            if key not in skip:
                items[key] = share_strings(item, skip)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            value[i] = share_strings(item, skip)
    return value
