"""Odd files in a config repository (issue 9, item 10): special files named *.yaml, symlinks that
loop or leave the repository, and file names that are not text or carry newlines. Each one is a
per-file diagnostic; validate/render never hang, never crash while printing, and a file name can
never forge a diagnostic line of its own. The CLI runs as a subprocess with a deadline."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builders import FED, NS, pool

EXIT_INVALID = 1
DEADLINE_S = 30


def good_repo(path: Path) -> Path:
    (path / "federations").mkdir(parents=True, exist_ok=True)
    (path / "flower-syncer.yaml").write_text(f"name: odd\ndefaultNamespace: {NS}\n")
    (path / "federations" / "good.yaml").write_text(FED.format(name="good", pools=pool("a"), annotations=""))
    return path


def validate(repo: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "syncer", "validate", str(repo), *extra], capture_output=True,
                          timeout=DEADLINE_S, check=False)


def _fifo(folder: Path) -> str:
    os.mkfifo(folder / "pipe.yaml")  # nobody ever writes: a blocking open would wait forever
    return "pipe.yaml"


def _socket(folder: Path) -> str:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "sock.yaml"))
    sock.close()
    return "sock.yaml"


def _loop(folder: Path) -> str:
    (folder / "loop-a.yaml").symlink_to("loop-b.yaml")
    (folder / "loop-b.yaml").symlink_to("loop-a.yaml")
    return "loop-a.yaml"


def _outside(folder: Path) -> str:
    (folder / "passwd.yaml").symlink_to("/etc/passwd")
    return "passwd.yaml"


def _device(folder: Path) -> str:
    (folder / "zero.yaml").symlink_to("/dev/zero")  # outside the repository, and endless
    return "zero.yaml"


def _directory(folder: Path) -> str:
    (folder / "dir.yaml").mkdir()
    (folder / "dir.yaml" / "inner.yaml").write_text("kind: Federation\n")
    return "dir.yaml/inner.yaml"


def _unreadable(folder: Path) -> str:
    (folder / "dangling.yaml").symlink_to("does-not-exist.yaml")
    return "dangling.yaml"


ODD: dict[str, tuple[Callable[[Path], str], str]] = {
    "fifo": (_fifo, "not a regular file: it is a FIFO"),
    "socket": (_socket, "not a regular file: it is a socket"),
    "symlink-loop": (_loop, "symlink loop"),
    "symlink-outside": (_outside, "symlink points outside the config repository"),
    "device-outside": (_device, "symlink points outside the config repository"),
    "folder-named-yaml": (_directory, "expected apiVersion"),
    "dangling-symlink": (_unreadable, "cannot read file"),
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_file_is_a_per_file_error(case: str, tmp_path: Path) -> None:
    repo = good_repo(tmp_path / "repo")
    make, expected = ODD[case]
    name = make(repo / "federations")
    proc = validate(repo, "-o", "json")  # a FIFO used to block here forever
    assert proc.returncode == EXIT_INVALID, proc.stderr.decode()[-2000:]
    out = json.loads(proc.stdout)
    messages = [d["message"] for d in out["diagnostics"] if d["file"] == f"federations/{name}"]
    assert any(expected in m for m in messages), out["diagnostics"]
    assert f"federation/{NS}/good" in out["units"]


NAMES = {
    "newline": b"evil\ngood.yaml:1:1: error: forged.yaml",
    "carriage-return": b"evil\rfake.yaml",
    "invalid-utf8": b"bad-\xff\xfe.yaml",
    "escape-sequence": b"\x1b[2Jclear.yaml",
}


@pytest.mark.parametrize("case", sorted(NAMES))
@pytest.mark.parametrize("output", ["text", "json"])
def test_odd_file_names_are_escaped_and_never_forge_lines(case: str, output: str, tmp_path: Path) -> None:
    repo = good_repo(tmp_path / "repo")
    name = NAMES[case] if NAMES[case].endswith(b".yaml") else NAMES[case] + b".yaml"
    # broken: it gets a diagnostic with its name (os.fsdecode keeps undecodable bytes as surrogates)
    (repo / "federations" / os.fsdecode(name)).write_bytes(b"kind: Federation\nspec: [\n")
    proc = validate(repo, "-o", output)
    assert proc.returncode == EXIT_INVALID, proc.stderr.decode(errors="replace")[-2000:]
    assert proc.stdout.decode("utf-8")  # printable: no UnicodeEncodeError on the way out
    assert b"\x1b" not in proc.stdout and b"\r" not in proc.stdout
    if output == "json":
        out = json.loads(proc.stdout)
        files = [d["file"] for d in out["diagnostics"]]
        assert all("\n" not in f for f in files) and len(files) == 1, files
    else:
        lines = [line for line in proc.stdout.decode().splitlines() if ": error: " in line]
        assert len(lines) == 1, lines  # one broken file, one error line: nothing forged
        assert "forged.yaml" not in lines[0] or "\\n" in lines[0]
