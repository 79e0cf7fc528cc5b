"""docs/reference/ is generated from the code (tools/gen_reference.py): these tests fail when a page
differs from what the code gives, or when a model field, annotation, CLI flag, metric family or
Event reason has no meaning written for it, so nothing new ships undocumented."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "tools" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@functools.cache
def _generated() -> tuple[dict[str, str], list[str]]:
    pages, missing = _generator().generate()
    return pages, missing


def test_the_reference_pages_are_what_the_code_gives() -> None:
    pages, _ = _generated()
    stale = [name for name, text in pages.items()
             if not (REPO / "docs" / "reference" / name).is_file()
             or (REPO / "docs" / "reference" / name).read_text() != text]
    assert not stale, f"run `python3 tools/gen_reference.py`: {stale} differ from the code"


def test_everything_the_code_accepts_or_serves_is_documented() -> None:
    _, missing = _generated()
    assert not missing, ("write a meaning for each (a docstring under the field, a help= for a flag, "
                         "the tables in tools/gen_reference.py):\n" + "\n".join(missing))


def test_the_reference_has_a_row_for_every_field_flag_metric_and_annotation() -> None:
    gen = _generator()
    pages, _ = _generated()
    fields = sum(len(gen.model_rows(model)) for _, _, model in gen._models())
    assert pages["config.md"].count("\n| `") == fields > 300
    assert pages["metrics.md"].count("\n| `flower_syncer_") == len(gen.metric_families()) >= 30
    assert pages["annotations.md"].count("\n| `flower-syncer.io/") == len(gen.annotations_in_code()) >= 25
    from syncer.cli import build_parser

    verbs = list(gen._subparsers(build_parser()))
    flags = sum(1 for _, sub, _ in verbs for a in sub._actions if a.help not in ("==SUPPRESS==",)
                and a.__class__.__name__ != "_HelpAction")
    assert pages["cli.md"].count("\n| `") == flags and len(verbs) >= 10


def test_an_annotation_the_tables_do_not_describe_is_reported(monkeypatch: Any) -> None:
    gen = _generator()
    first = sorted(gen.annotations_in_code())[0]
    monkeypatch.delitem(gen.ANNOTATIONS, first)
    _, missing = gen.annotations_page()
    assert f"annotation {first}" in missing


def test_every_metric_the_reference_names_is_served_under_that_name() -> None:
    import re

    gen = _generator()
    served = set(re.findall(r"^# TYPE (\S+) ", bytes(gen.served_metrics().exposition()).decode(), re.M))
    listed = [name for name, *_ in gen.metric_families()]
    assert listed and not [name for name in listed if name not in served]


def test_defaults_and_allowed_values_are_written_as_yaml() -> None:
    gen = _generator()
    assert [gen._yaml_scalar(v) for v in ("", "on", "*", "ClusterIP", ["ALL"], 60.0, 0.5, True)] == [
        '""', '"on"', '"*"', "ClusterIP", '["ALL"]', "60", "0.5", "true"]
    config = _generated()[0]["config.md"]
    assert "| `spec.superlink.service.ports.grpc` | integer, 1 to 65535 | `9092` |" in config
    assert "'" not in "".join(line.split("|")[3] for line in config.splitlines() if line.startswith("| `"))
