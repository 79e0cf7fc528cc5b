"""The names of the agent's settings in the environment (`FLOWER_SYNCER_<SETTING>`), which every
CLI verb reads too: kept apart from the settings model (agent/config.py, pydantic) so that a verb
other than `run` does not import it."""

from __future__ import annotations

ENV_PREFIX = "FLOWER_SYNCER_"


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def namespace_list(text: str) -> list[str] | None:
    """`a, b,c` -> ["a", "b", "c"]; an empty text means no limit (None)."""
    return [n.strip() for n in text.split(",") if n.strip()] or None
