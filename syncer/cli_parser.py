"""The parser of one CLI verb, whose arguments may be added when the verb is used rather than when
the command line is built: `run`'s options are the agent's settings (agent/config.py, a pydantic
model), which no other verb should load (tests/unit/test_cli_imports.py; bench/cli_startup.py
measures what it costs)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any


class VerbParser(argparse.ArgumentParser):
    """A verb's parser whose arguments may be added when it is first used (parsed, its usage or help
    shown, completed): `add_arguments(parser)` runs once, then. Every subparser of the CLI is one."""

    def __init__(self, *args: Any, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._add_arguments = add_arguments

    def complete(self) -> argparse.ArgumentParser:
        """Add the arguments not added yet; returns the parser."""
        add, self._add_arguments = self._add_arguments, None
        if add is not None:
            add(self)
        return self

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        return argparse.ArgumentParser.parse_known_args(self.complete(), args, namespace)

    def format_usage(self) -> str:
        return argparse.ArgumentParser.format_usage(self.complete())

    def format_help(self) -> str:
        return argparse.ArgumentParser.format_help(self.complete())
