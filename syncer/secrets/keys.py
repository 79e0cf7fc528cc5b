"""Decryption keys: age identities read from files (several, for rotation: old and new loaded
side by side, then the old one removed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from syncer.secrets.sops import SopsError


@dataclass(frozen=True)
class Decryption:
    """How the loader treats SOPS-encrypted files."""

    identities: tuple[Any, ...] = ()  # pyrage x25519 identities
    required: bool = True
    """Without a key that opens a file: its unit fails (sync, diff, the agent), or, when False
    (`validate` without a key), the file is checked with its encrypted values left opaque."""


def load_identities(paths: Sequence[Path | str]) -> tuple[Any, ...]:
    """Every `AGE-SECRET-KEY-1...` line of the given files, or of the files in a given folder (a
    mounted Secret), comments and blank lines skipped, as `age-keygen` writes them. Raises
    SopsError naming the file (never the key) when a file is unreadable or holds no identity."""
    import pyrage

    found: list[Any] = []
    files: list[Path] = []
    for given in map(Path, paths):  # a folder (a mounted Secret): each of its files
        if given.is_dir():
            files += sorted(p for p in given.iterdir() if not p.name.startswith(".") and p.is_file())
        else:
            files.append(given)
    for path in files:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise SopsError(f"cannot read the decryption key file {path}: {exc.strerror}") from None
        keys = [line.strip() for line in text.splitlines() if line.strip().startswith("AGE-SECRET-KEY-1")]
        if not keys:
            raise SopsError(f"the decryption key file {path} holds no age identity (AGE-SECRET-KEY-1...)",
                            "make one with `flower-syncer keygen -o FILE` (or age-keygen), and give the public "
                            "key to sops as a recipient")
        for i, line in enumerate(keys, 1):
            try:
                found.append(pyrage.x25519.Identity.from_str(line))
            except (pyrage.IdentityError, ValueError):
                raise SopsError(f"line {i} of the decryption keys in {path} is not a valid age identity") from None
    return tuple(found)
