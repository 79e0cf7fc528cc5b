"""Signed commits: a fetched revision is checked out only when its commit (or its tag, or both) is
signed by a key the admin lists (the admin policy's `verify`, as Flux's GitRepository `verify`
with its modes `HEAD`, `Tag` and `TagAndHEAD`).

`git` verifies, natively: `git verify-commit --raw` and `git verify-tag --raw`, for OpenPGP
signatures with a temporary GNUPGHOME that holds only the listed public keys (never a user's
keyring: GNUPGHOME, the system and global git config are overridden), and for SSH signatures with
`gpg.ssh.allowedSignersFile` listing only the listed SSH keys. A signature is taken only when git
says it is good AND the key that made it is one of the listed ones (its fingerprint, read from
git's raw output, is compared with the fingerprints of the listed keys), so neither a trust
setting nor a key some other keyring knows can let a commit through.

An unsigned commit, a bad signature, a key not listed, a lightweight or unsigned tag: a
`SourceError` of kind "unverified" naming the commit (or tag) and the signer (its key
fingerprint, its user id or SSH principal when git names one). The source then keeps its last
checkout: nothing of the refused revision is checked out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from syncer.source.refs import SourceError, summarize

Mode = Literal["HEAD", "Tag", "TagAndHEAD"]
MODES: tuple[Mode, ...] = ("HEAD", "Tag", "TagAndHEAD")

# git's options for a verification, whatever the user's or the system's git config says
_VERIFY_OPTIONS = ("-c", "gpg.program=gpg", "-c", "gpg.ssh.program=ssh-keygen", "-c", "gpg.minTrustLevel=undefined")
_GPG_CONF = "no-autostart\ntrust-model always\nno-auto-key-retrieve\n"
_SSH_KEY_RE = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)|sk-ssh-ed25519@openssh\.com|"
                         r"sk-ecdsa-sha2-nistp256@openssh\.com)\s+([A-Za-z0-9+/]+={0,3})(?:\s+.*)?$")
_SSH_FINGERPRINT_RE = re.compile(r"\bkey (SHA256:[A-Za-z0-9+/]+)")
_SSH_PRINCIPAL_RE = re.compile(r'^Good "git" signature for (\S+) with', re.M)
PGP_BLOCK = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
IMPORT_TIMEOUT = 30.0

# runs git in the cache clone: (arguments, extra environment) -> (exit status, stdout, stderr)
Git = Callable[[list[str], dict[str, str]], tuple[int, str, str]]


@dataclass(frozen=True)
class Verification:
    """What the admin requires: `mode` and the public keys (ASCII-armored OpenPGP key blocks and
    `ssh-ed25519 AAAA... comment` lines) whose signatures are taken."""

    mode: Mode
    keys: tuple[str, ...]


def ssh_fingerprint(line: str) -> str | None:
    """`SHA256:...` of an SSH public key line, as ssh-keygen prints it; None if it is not one."""
    match = _SSH_KEY_RE.match(line.strip())
    if match is None:
        return None
    try:
        blob = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        return None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class _Verdict:
    ok: bool
    signer: str  # who signed, as git says ("" for no signature)
    problem: str  # why not ("" when ok)
    settled: bool = True  # False: git could not say (a timeout, a killed gpg): asked again at the next fetch


class Verifier:
    """Checks revisions against one `Verification`; remembers the verdicts on the commits (and tag
    objects) it checked, so a refused commit that stays on the remote costs one check, not one per poll."""

    def __init__(self, verification: Verification) -> None:
        self.verification = verification
        self.ssh = {fp: line.strip() for line in verification.keys if (fp := ssh_fingerprint(line))}
        self.pgp = tuple(k for k in verification.keys if PGP_BLOCK in k)
        self._pgp_fingerprints: frozenset[str] | None = None  # read from the keyring at the first check
        self._verdicts: dict[tuple[str, str], str] = {}  # (commit, tag object) -> "" or the refusal

    def check(self, git: Git, target: str, remote_ref: str | None, display: str) -> str:
        """Raises SourceError("unverified") unless `target` (a local ref or a commit of the cache
        clone, fetched as `remote_ref`) is signed as the admin requires. Returns the commit."""
        mode = self.verification.mode
        status, out, err = git(["rev-parse", "--verify", "-q", f"{target}^{{commit}}"], {})
        if status != 0:
            raise SourceError("corrupt", f"cannot read the fetched commit of {display}: {summarize(err)}")
        commit = out.strip()
        tag = remote_ref.removeprefix("refs/tags/") if remote_ref and remote_ref.startswith("refs/tags/") else None
        tag_object = ""
        if mode in ("Tag", "TagAndHEAD"):
            if tag is None:
                raise SourceError("unverified", f"{display}: the admin's policy requires a signed tag (verify mode "
                                                f"{mode}), but the ref synced is not a tag ({remote_ref or commit})")
            status, out, _ = git(["rev-parse", "--verify", "-q", f"refs/tags/{tag}"], {})
            tag_object = out.strip() if status == 0 else ""
        key = (commit, tag_object)
        refusal = self._verdicts.get(key)
        if refusal is None:
            refusal, settled = self._refusal(git, commit, tag, tag_object, display)
            if len(self._verdicts) >= 256:
                self._verdicts.clear()
            if settled:  # a verdict git could not reach is not remembered: a signed tip is not refused for good
                self._verdicts[key] = refusal
        if refusal:
            raise SourceError("unverified", refusal)
        return commit

    def _refusal(self, git: Git, commit: str, tag: str | None, tag_object: str, display: str) -> tuple[str, bool]:
        """Why the revision is refused ("" when it is not), and whether that is settled."""
        mode = self.verification.mode
        with tempfile.TemporaryDirectory(prefix="flower-syncer-keys-") as tmp:
            env, options = self._keyring(Path(tmp))
            if mode in ("Tag", "TagAndHEAD"):
                assert tag is not None
                if not tag_object or git(["cat-file", "-t", tag_object], {})[1].strip() != "tag":
                    return (f"{display}: tag {tag} (commit {commit[:12]}) is a lightweight tag: it cannot be signed, "
                            f"and the admin's policy requires a signed tag (verify mode {mode})"), True
                verdict = self._verify(git, [*options, "verify-tag", "--raw", tag_object], env)
                if not verdict.ok:
                    return f"{display}: tag {tag} (commit {commit[:12]}) {verdict.problem}", verdict.settled
            if mode in ("HEAD", "TagAndHEAD"):
                verdict = self._verify(git, [*options, "verify-commit", "--raw", commit], env)
                if not verdict.ok:
                    return f"{display}: commit {commit[:12]} {verdict.problem}", verdict.settled
        return "", True

    def _keyring(self, home: Path) -> tuple[dict[str, str], list[str]]:
        """The environment and git options of a verification: GNUPGHOME with the listed OpenPGP
        keys only, the allowed signers file with the listed SSH keys only; no user or system config."""
        gnupg = home / "gnupg"
        gnupg.mkdir(mode=0o700)
        (gnupg / "gpg.conf").write_text(_GPG_CONF)
        if self.pgp:
            if shutil.which("gpg") is None:
                raise SourceError("invalid", "the admin's policy lists OpenPGP keys, but gpg is not installed "
                                             "(install gnupg)")
            self._import(gnupg)
        signers = home / "allowed_signers"
        signers.write_text("".join(f'key-{i} namespaces="git" {line}\n'
                                   for i, line in enumerate(self.ssh.values(), 1)))
        env = {"GNUPGHOME": str(gnupg), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
        return env, [*_VERIFY_OPTIONS, "-c", f"gpg.ssh.allowedSignersFile={signers}"]

    def _import(self, gnupg: Path) -> None:
        base = ["gpg", "--batch", "--no-tty", "--homedir", str(gnupg)]
        try:
            done = subprocess.run([*base, "--import"], input="\n".join(self.pgp).encode(), capture_output=True,
                                  timeout=IMPORT_TIMEOUT, check=False)
            listed = subprocess.run([*base, "--with-colons", "--list-keys"], capture_output=True,
                                    timeout=IMPORT_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SourceError("invalid", f"cannot read the admin's OpenPGP keys with gpg: {exc}") from None
        fingerprints = frozenset(line.split(":")[9].upper() for line in listed.stdout.decode(errors="replace")
                                 .splitlines() if line.startswith("fpr:") and len(line.split(":")) > 9)
        if done.returncode != 0 and not fingerprints:
            raise SourceError("invalid", "gpg cannot import the admin's OpenPGP keys: "
                                         f"{summarize(done.stderr.decode(errors='replace'))}")
        self._pgp_fingerprints = fingerprints

    def _verify(self, git: Git, args: list[str], env: dict[str, str]) -> _Verdict:
        status, out, err = git(args, env)
        text = f"{out}\n{err}"
        if "[GNUPG:]" in text:
            return self._pgp_verdict(status, text)
        ssh = _SSH_FINGERPRINT_RE.search(text)
        if ssh is not None:
            fingerprint = ssh.group(1)
            principal = _SSH_PRINCIPAL_RE.search(text)
            if status == 0 and principal is not None and fingerprint in self.ssh:
                return _Verdict(True, f"SSH key {fingerprint}", "")
            return _Verdict(False, f"SSH key {fingerprint}", f"is signed by SSH key {fingerprint}, which the "
                            "admin's policy does not list")
        if status == 0:  # git said good, but nothing we can match to a listed key
            return _Verdict(False, "", "has a signature flower-syncer cannot read (neither OpenPGP nor SSH)")
        if "no signature found" in text or not text.strip():
            return _Verdict(False, "", "is not signed; the admin's policy requires a signature by a listed key")
        return _Verdict(False, "", f"has a signature git cannot verify: {summarize(err)}", settled=False)

    def _pgp_verdict(self, status: int, text: str) -> _Verdict:
        fields: dict[str, list[str]] = {}
        for line in text.splitlines():
            if line.startswith("[GNUPG:] "):
                word, *rest = line.removeprefix("[GNUPG:] ").split(" ")
                fields.setdefault(word, rest)
        uid = ""
        for word in ("GOODSIG", "BADSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG"):
            if word in fields:
                uid = " ".join(fields[word][1:])
        valid = fields.get("VALIDSIG", [])
        if valid:  # the signing key's fingerprint, and its primary key's last
            signed_by = {valid[0].upper(), valid[-1].upper()}
            who = f"OpenPGP key {valid[-1].upper()}" + (f" ({uid})" if uid else "")
            if status == 0 and "GOODSIG" in fields and signed_by & (self._pgp_fingerprints or frozenset()):
                return _Verdict(True, who, "")
            if signed_by & (self._pgp_fingerprints or frozenset()):
                state = next((w for w in ("EXPKEYSIG", "REVKEYSIG", "EXPSIG") if w in fields), "")
                return _Verdict(False, who, f"is signed by {who}, but the signature is not valid now "
                                f"({state or 'git refused it'})")
            return _Verdict(False, who, f"is signed by {who}, which the admin's policy does not list")
        missing = fields.get("ERRSIG") or fields.get("NO_PUBKEY") or []
        if missing:
            fingerprint = missing[6].upper() if len(missing) > 6 and missing[6] != "-" else ""
            who = f"OpenPGP key {fingerprint or missing[0].upper()}"
            return _Verdict(False, who, f"is signed by {who}, which the admin's policy does not list")
        bad = fields.get("BADSIG")
        if bad:
            return _Verdict(False, f"OpenPGP key {bad[0]}", f"has a bad signature (OpenPGP key {bad[0]}"
                            + (f", {uid}" if uid else "") + "): the content does not match what was signed")
        return _Verdict(False, "", "has an OpenPGP signature gpg could not verify")
