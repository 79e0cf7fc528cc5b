"""How Flower (1.20-1.26) reads `--node-config`, reimplemented for tests from its documented rules:
split with a regex, join the pairs as `k = v` lines, parse as TOML."""

from __future__ import annotations

import re
import tomllib
from typing import Any

PAIR = re.compile(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)")


def parse_node_config(text: str) -> dict[str, Any]:
    toml = "\n".join(f"{k} = {v}" for k, v in PAIR.findall(text))
    return tomllib.loads(toml)
