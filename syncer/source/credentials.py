"""How a git process gets its credentials, without ever storing them: the askpass script that answers
HTTPS prompts from the environment, the token read from its file, the SSH private key copy that ssh
accepts, and the ``GIT_SSH_COMMAND`` that pins the known hosts.

The token only travels in the environment of the git process (``FLOWER_SYNCER_GIT_TOKEN``, read back by
the askpass script); it is never put into a URL, an argument, a config file or a message.
"""

from __future__ import annotations

import os
import shlex
import stat
import threading
from pathlib import Path

import structlog

from syncer.source.refs import SourceError

log = structlog.get_logger("syncer.source")

USERNAME_VAR = "FLOWER_SYNCER_GIT_USERNAME"
TOKEN_VAR = "FLOWER_SYNCER_GIT_TOKEN"
ASKPASS = f"""#!/bin/sh
# flower-syncer: answers git's HTTPS credential prompts from the environment; stores nothing.
case "$1" in
  [Uu]sername*) printf '%s\\n' "${{{USERNAME_VAR}:-}}" ;;
  *) printf '%s\\n' "${{{TOKEN_VAR}:-}}" ;;
esac
"""


def write_askpass(cache: Path) -> Path:
    """``<cache>/askpass.sh``, written (atomically) only when missing or different."""
    path = cache / "askpass.sh"
    try:
        if path.read_text() == ASKPASS and os.access(path, os.X_OK):
            return path
    except OSError:
        pass
    tmp = cache / f"askpass.sh.{os.getpid()}"
    tmp.write_text(ASKPASS)
    tmp.chmod(0o700)
    tmp.replace(path)
    return path


def read_token(token: str | None, token_file: Path | None, *, source: str) -> str | None:
    """The HTTPS token: the one given, else the stripped content of its file (re-read at every fetch,
    so a rotated Secret is followed). None when there is none."""
    if token_file is None:
        return token or None
    try:
        text = token_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SourceError("auth", f"cannot read the token file {token_file}: {reason}") from None
    if not text:
        log.warning("the Git token file is empty", source=source, token_file=str(token_file))
    return text or None


def private_key_copy(key: Path | None, cache: Path) -> Path | None:
    """ssh refuses private keys readable by others (a mounted Secret is often 0644): a 0600 copy in
    ``cache`` for the caller to remove after the fetch, or None when the key can be used as it is."""
    if key is None:
        return None
    try:
        mode = key.stat().st_mode
        if not mode & (stat.S_IRWXG | stat.S_IRWXO):
            return None
        data = key.read_bytes()
    except OSError as exc:
        raise SourceError("auth", f"cannot read the SSH key file {key}: {exc.strerror}") from None
    copy = cache / f"ssh-key.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return copy


def ssh_command(key: Path | None, known_hosts_file: Path | None, timeout: float) -> str:
    """``GIT_SSH_COMMAND``: batch mode, strict host key checking against ``known_hosts_file`` only, and
    the given key only."""
    def opt(name: str, value: str) -> list[str]:
        return ["-o", f'{name}="{value}"' if any(c.isspace() for c in value) else f"{name}={value}"]

    parts = ["ssh", *opt("BatchMode", "yes"), *opt("StrictHostKeyChecking", "yes"),
             *opt("ConnectTimeout", str(max(1, round(timeout))))]
    if known_hosts_file is not None:
        parts += opt("UserKnownHostsFile", str(known_hosts_file.expanduser().resolve()))
        parts += opt("GlobalKnownHostsFile", "/dev/null")
    if key is not None:
        parts += ["-i", str(key.expanduser().resolve()), *opt("IdentitiesOnly", "yes")]
    return " ".join(shlex.quote(p) for p in parts)
