"""Parse Flower commands with one Flower release's own argument parsers.

Run by the dependency interpreter of tools/flower_releases.py with PYTHONPATH set to one unpacked
`flwr` wheel, so `import flwr` is that release. Reads JSON from stdin, a list of
{"exe": "flower-superlink" | "flower-supernode" | "flower-superexec", "args": [...]}; writes JSON to
stdout, one result per command: {"ok": bool, "error": str, "deprecated": [flags whose help says
deprecated]}, plus {"flwr": the path flwr was imported from}. Standalone: imports nothing from flower-syncer.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

PARSERS = {
    "flower-superlink": [("flwr.superlink.cli.flower_superlink", "_parse_args_run_superlink"),
                         ("flwr.server.app", "_parse_args_run_superlink")],
    "flower-supernode": [("flwr.supernode.cli.flower_supernode", "_parse_args_run_supernode"),
                         ("flwr.client.supernode.app", "_parse_args_run_supernode")],
    "flower-superexec": [("flwr.supercore.cli.flower_superexec", "_parse_args")],
}


def parser_factory(exe: str) -> Callable[[], argparse.ArgumentParser] | None:
    for module, name in PARSERS[exe]:
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            continue
        factory = getattr(loaded, name, None)
        if factory is not None:
            return factory  # type: ignore[no-any-return]
    return None


def check(exe: str, args: list[str]) -> dict[str, Any]:
    factory = parser_factory(exe)
    if factory is None:
        return {"ok": False, "error": f"{exe} does not exist in this release", "deprecated": [], "missing": True}
    parser = factory()
    parser.exit_on_error = False
    deprecated = {}
    for action in parser._actions:
        help_text = action.help if isinstance(action.help, str) else ""
        for option in action.option_strings:
            if "deprecated" in help_text.lower() or "no longer" in help_text.lower():
                deprecated[option] = help_text
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(args)
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return {"ok": False, "error": lines[-1] if lines else "exit", "deprecated": []}
    except argparse.ArgumentError as exc:
        return {"ok": False, "error": str(exc), "deprecated": []}
    used = sorted({a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in deprecated})
    return {"ok": True, "error": "", "deprecated": used}


def main() -> None:
    logging.disable(logging.CRITICAL)  # Flower logs warnings while parsing (hidden aliases)
    commands = json.load(sys.stdin)
    import flwr

    out = {"flwr": flwr.__file__, "results": [check(c["exe"], c["args"]) for c in commands]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
