#!/usr/bin/env python3
"""Copy the alerts and Grafana dashboards into the Helm chart (Helm reads no file outside it).

    dashboards/alerts.yaml   -> charts/flower-syncer/files/alerts.yaml
    dashboards/*.json        -> charts/flower-syncer/files/dashboards/*.json

The copies are byte-identical; a dashboard JSON in the chart without a source in dashboards/ is
removed (the chart's other files, e.g. its README.md, are left alone). `--check` changes nothing
and exits 1 when a copy is missing, differs or is stale (tests/unit/test_dashboards.py runs it).
Standard library only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "dashboards"
CHART_FILES = ROOT / "charts" / "flower-syncer" / "files"


def planned(root: Path = ROOT) -> dict[Path, Path]:
    """Every copy to make: chart path -> source path."""
    source, files = root / "dashboards", root / "charts" / "flower-syncer" / "files"
    copies = {files / "alerts.yaml": source / "alerts.yaml"}
    for board in sorted(source.glob("*.json")):
        copies[files / "dashboards" / board.name] = board
    return copies


def stale(root: Path = ROOT) -> list[Path]:
    """Dashboard JSON files in the chart that have no source any more."""
    names = {p.name for p in (root / "dashboards").glob("*.json")}
    return sorted(p for p in (root / "charts" / "flower-syncer" / "files" / "dashboards").glob("*.json")
                  if p.name not in names)


def differences(root: Path = ROOT) -> list[str]:
    """What `sync` would change, one line each; empty when the chart is up to date."""
    out = []
    for dest, src in planned(root).items():
        if not src.exists():
            out.append(f"{src.relative_to(root)}: missing")
        elif not dest.exists():
            out.append(f"{dest.relative_to(root)}: missing (copy of {src.relative_to(root)})")
        elif dest.read_bytes() != src.read_bytes():
            out.append(f"{dest.relative_to(root)}: differs from {src.relative_to(root)}")
    out += [f"{p.relative_to(root)}: stale (no {p.name} in dashboards/)" for p in stale(root)]
    return out


def sync(root: Path = ROOT) -> list[str]:
    """Bring the chart's copies up to date; returns what changed."""
    changed = []
    for dest, src in planned(root).items():
        data = src.read_bytes()
        if not dest.exists() or dest.read_bytes() != data:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            changed.append(f"wrote {dest.relative_to(root)}")
    for p in stale(root):
        p.unlink()
        changed.append(f"removed {p.relative_to(root)}")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Copy dashboards/alerts.yaml and dashboards/*.json into the chart.")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if the chart is out of date")
    args = parser.parse_args(argv)
    if args.check:
        diffs = differences()
        for line in diffs:
            print(line, file=sys.stderr)
        if diffs:
            print("run: python3 tools/sync_chart_files.py", file=sys.stderr)
        return 1 if diffs else 0
    for line in sync() or ["chart files up to date"]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
