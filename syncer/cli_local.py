"""The verbs that read neither a config repository nor a cluster: `keygen` (an age key pair) and
`completion` (the shell's completion script). Split from syncer/cli.py; the exit codes are the CLI's."""

from __future__ import annotations

import argparse
import os
import sys

from syncer.cli_repo import EXIT_OK, EXIT_USAGE


def cmd_keygen(args: argparse.Namespace) -> int:
    from syncer.secrets.keygen import generate

    key = generate()
    if args.key_out is None:
        sys.stdout.write(key.file_text())
        print(f"Public key: {key.recipient}", file=sys.stderr)
        return EXIT_OK
    try:  # created, never replaced, and readable by its owner only from the first byte on
        fd = os.open(args.key_out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"error: {args.key_out} exists; not overwriting a key (remove it first, or name another file)",
              file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"error: cannot create {args.key_out}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    with os.fdopen(fd, "w") as out:
        out.write(key.file_text())
    print(f"Public key: {key.recipient}")
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["flower-syncer"], shell=args.shell))
    return EXIT_OK
