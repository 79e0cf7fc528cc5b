"""The CLI's environment: every option of every command may come from `FLOWER_SYNCER_<OPTION>`,
one mechanism for all commands (`run` reads the same names through its AgentConfig)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from syncer.agent.envnames import env_name


def env_defaults(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> str:
    """Every option of every command may come from `FLOWER_SYNCER_<OPTION>` (e.g.
    FLOWER_SYNCER_OUTPUT=json, FLOWER_SYNCER_KUBECONFIG, FLOWER_SYNCER_UNIT=a,b); the command line
    wins. `run` reads its own settings (AgentConfig). Returns a problem, or ""."""
    subparsers = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    for command, sub in (subparsers.choices.items() if subparsers else []):
        if command == "run":
            continue
        defaults: dict[str, Any] = {}
        for action in sub._actions:
            if not action.option_strings or action.dest in ("help", "version"):
                continue
            text = environ.get(env_name(action.dest))
            if text is None:
                continue
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
                on = text.strip().lower() in ("1", "true", "yes", "on")
                defaults[action.dest] = on if isinstance(action, argparse._StoreTrueAction) else not on
                continue
            values = [v.strip() for v in text.split(",") if v.strip()] if isinstance(
                action, argparse._AppendAction) else [text]
            try:
                converted = [action.type(v) if callable(action.type) else v for v in values]
            except (argparse.ArgumentTypeError, ValueError) as exc:
                return f"{env_name(action.dest)}: {exc}"
            if action.choices is not None and any(v not in action.choices for v in converted):
                return f"{env_name(action.dest)} must be one of {', '.join(map(str, action.choices))}"
            defaults[action.dest] = converted if isinstance(action, argparse._AppendAction) else converted[0]
        sub.set_defaults(**defaults)
    return ""
