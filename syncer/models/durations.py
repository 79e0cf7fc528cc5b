"""Durations written in Git and in the admin's policy: Go-style (`90s`, `5m`, `1h30m`, `2h`) or a
bare number of seconds. Pure."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
OFF = ("off", "disabled")  # a hold duration that turns holding off


def parse_duration(text: str) -> float | None:
    """Seconds, or None when `text` is not a duration."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        parts = _PART.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            return None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    return seconds if 0 <= seconds < float("inf") else None  # NaN compares False


def duration_problem(text: str, *, allow_off: bool = False) -> str:
    """Why `text` is not a duration ("" when it is)."""
    if allow_off and text.strip().lower() in OFF:
        return ""
    if parse_duration(text) is None:
        off = ', or "off"' if allow_off else ""
        return f"{text!r} is not a duration: write e.g. 30m, 2h, 1h30m, 1d or a number of seconds{off}"
    return ""
