"""The admin policy's `verify`: which signatures a repository's revisions must carry before the
agent applies them (Flux's GitRepository `verify`, with OpenPGP and SSH keys alike; git checks
them, see syncer.source.signatures). Pure data: no I/O."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from syncer.models.base import StrictModel
from syncer.models.k8s import Issue

PGP_PUBLIC = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
_SSH_PUBLIC = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|"
                         r"sk-ecdsa-sha2-nistp256@openssh\.com)\s+[A-Za-z0-9+/]+={0,3}(\s+\S.*)?$")
_PRIVATE = re.compile(r"PRIVATE KEY")


class CommitVerification(StrictModel):
    """`verify:` of a policy entry: a revision is applied only when signed by one of `publicKeys`."""

    mode: Literal["HEAD", "Tag", "TagAndHEAD"] = "HEAD"
    """HEAD: the commit synced must be signed; Tag: the tag synced (the entry's ref must be a tag);
    TagAndHEAD: both."""
    publicKeys: Annotated[list[str], Field(min_length=1)]
    """ASCII-armored OpenPGP public key blocks (`gpg --armor --export KEY`), and SSH public key
    lines (`ssh-ed25519 AAAA... comment`, the `.pub` file's content)."""

    def key_issues(self, where: tuple[str | int, ...]) -> list[Issue]:
        issues = []
        for j, key in enumerate(self.publicKeys):
            text = key.strip()
            if _PRIVATE.search(text):
                issues.append(Issue((*where, "publicKeys", j), "this is a PRIVATE key: never give it to the agent",
                                    "list the public key only (gpg --armor --export, or the .pub file); and "
                                    "replace this key, it is no longer secret"))
            elif not (text.startswith(PGP_PUBLIC) or _SSH_PUBLIC.match(text)):
                issues.append(Issue((*where, "publicKeys", j), "neither an OpenPGP public key block nor an SSH "
                                    "public key", "give `gpg --armor --export KEY` or an `ssh-ed25519 AAAA...` line"))
        return issues
