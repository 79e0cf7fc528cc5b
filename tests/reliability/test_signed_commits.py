"""Signed commits (issue 39, item 8): the Git source checks a revision out only when its commit (or
its tag) is signed by a key the admin's policy lists. Real keys (gpg with a generated key without
passphrase in a temporary GNUPGHOME, ssh-keygen -t ed25519), real `git commit -S` and `git tag -s`,
the real GitSource; no cluster."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from syncer.agent.config import load_policy
from syncer.agent.messages import FetchFailed, RevisionFetched
from syncer.agent.state import AgentOptions
from syncer.agent.unitstate import unit_state
from syncer.agent.wiring import build_agent
from syncer.cluster.events import Event
from syncer.identity import Unit
from syncer.observe.metrics import Metrics
from syncer.source.git import Checkout, GitSource, SourceSpec
from syncer.source.refs import SourceError
from syncer.source.signatures import Mode, Verification, ssh_fingerprint
from tests.builders import federation, pool, write
from tests.fakekube import FakeKube
from tests.integration.gitservers import Repo, git, git_env

pytestmark = pytest.mark.skipif(shutil.which("gpg") is None or shutil.which("ssh-keygen") is None,
                                reason="needs gpg and ssh-keygen")

FED = "kind: Federation\nmetadata:\n  name: a\n"


@dataclass(frozen=True)
class Signer:
    name: str
    env: dict[str, str]  # GNUPGHOME for an OpenPGP signer
    options: tuple[str, ...]  # git -c options that sign with this key
    public: str  # what the admin lists: an armored key block or an SSH public key line
    fingerprint: str


@dataclass(frozen=True)
class Keys:
    alice: Signer  # OpenPGP, listed
    mallory: Signer  # OpenPGP, never listed
    bob: Signer  # SSH, listed
    eve: Signer  # SSH, never listed


def _gpg(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["gpg", "--batch", *args], env={**git_env(), **env}, capture_output=True, text=True,
                          check=True).stdout


def _gpg_signer(home: Path, name: str) -> Signer:
    env = {"GNUPGHOME": str(home)}
    _gpg(env, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.org>", "ed25519", "sign", "never")
    listed = _gpg(env, "--with-colons", "--list-keys", f"{name}@example.org")
    fingerprint = next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))
    public = _gpg(env, "--armor", "--export", fingerprint)
    return Signer(name, env, ("-c", "gpg.format=openpgp", "-c", f"user.signingkey={fingerprint}"), public,
                  fingerprint)


def _ssh_signer(folder: Path, name: str) -> Signer:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@example.org", "-f", str(key)],
                   check=True, capture_output=True)
    public = key.with_suffix(".pub").read_text().strip()
    fingerprint = ssh_fingerprint(public)
    assert fingerprint is not None
    return Signer(name, {}, ("-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"), public, fingerprint)


@pytest.fixture(scope="module")
def keys() -> Iterator[Keys]:
    # a short path: gpg-agent's socket lives in GNUPGHOME when /run/user/<uid> does not exist
    folder = Path(tempfile.mkdtemp(prefix="fs-sig-"))
    home = folder / "g"
    home.mkdir(mode=0o700)
    try:
        yield Keys(_gpg_signer(home, "alice"), _gpg_signer(home, "mallory"), _ssh_signer(folder, "bob"),
                   _ssh_signer(folder, "eve"))
    finally:  # the agent gpg started for signing
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def commit(repo: Repo, message: str, files: dict[str, str | None], signer: Signer | None) -> str:
    repo.write(files)
    repo.git("add", "-A")
    sign = [*signer.options, "commit", "-S"] if signer is not None else ["commit"]
    repo.git(*sign, "-q", "--allow-empty", "-m", message, **(signer.env if signer else {}))
    return repo.head()


def tag(repo: Repo, name: str, signer: Signer | None, *, annotated: bool = True) -> None:
    if signer is not None:
        repo.git(*signer.options, "tag", "-f", "-s", "-m", name, name, **signer.env)
    elif annotated:
        repo.git("tag", "-f", "-a", "-m", name, name)
    else:
        repo.git("tag", "-f", name)


def source(repo: Repo, tmp_path: Path, mode: Mode, *listed: Signer, ref: str | None = None) -> GitSource:
    verify = Verification(mode, tuple(s.public for s in listed))
    return GitSource(SourceSpec(url=str(repo.path), ref=ref, cache_dir=tmp_path / "cache", verify=verify))


def refused(src: GitSource) -> str:
    with pytest.raises(SourceError) as err:
        src.fetch()
    assert err.value.kind == "unverified"
    return err.value.message


def files(co: Checkout) -> dict[str, str]:
    return {p.relative_to(co.root).as_posix(): p.read_text() for p in sorted(co.root.rglob("*")) if p.is_file()}


@pytest.fixture
def work(tmp_path: Path) -> Repo:
    return Repo.init(tmp_path / "work")


def test_a_commit_signed_by_a_listed_openpgp_key_is_checked_out(tmp_path: Path, work: Repo, keys: Keys) -> None:
    sha = commit(work, "signed", {"federations/a.yaml": FED}, keys.alice)
    checkout = source(work, tmp_path, "HEAD", keys.alice, keys.bob).fetch()
    assert checkout.revision == sha
    assert files(checkout) == {"federations/a.yaml": FED}


def test_a_commit_signed_by_a_listed_ssh_key_is_checked_out(tmp_path: Path, work: Repo, keys: Keys) -> None:
    sha = commit(work, "signed", {"federations/a.yaml": FED}, keys.bob)
    assert source(work, tmp_path, "HEAD", keys.alice, keys.bob).fetch().revision == sha


def test_an_unsigned_commit_is_refused_and_the_last_good_checkout_stays(tmp_path: Path, work: Repo,
                                                                        keys: Keys) -> None:
    good = commit(work, "signed", {"federations/a.yaml": FED}, keys.alice)
    src = source(work, tmp_path, "HEAD", keys.alice)
    first = src.fetch()
    bad = commit(work, "unsigned", {"federations/a.yaml": FED + "  namespace: evil\n"}, None)
    message = refused(src)
    assert bad[:12] in message and "not signed" in message
    assert src.last() is first and first.revision == good
    assert files(first) == {"federations/a.yaml": FED}  # nothing of the refused commit was checked out
    assert refused(src) == message  # every poll refuses it again (one verification, remembered)


def test_a_commit_signed_by_an_unlisted_openpgp_key_is_refused_naming_the_key(tmp_path: Path, work: Repo,
                                                                              keys: Keys) -> None:
    bad = commit(work, "by mallory", {"federations/a.yaml": FED}, keys.mallory)
    message = refused(source(work, tmp_path, "HEAD", keys.alice, keys.bob))
    assert bad[:12] in message and keys.mallory.fingerprint.upper() in message and "does not list" in message


def test_a_commit_signed_by_an_unlisted_ssh_key_is_refused_naming_the_key(tmp_path: Path, work: Repo,
                                                                          keys: Keys) -> None:
    bad = commit(work, "by eve", {"federations/a.yaml": FED}, keys.eve)
    message = refused(source(work, tmp_path, "HEAD", keys.alice, keys.bob))
    assert bad[:12] in message and keys.eve.fingerprint in message and "does not list" in message


def test_the_users_own_keyring_is_never_used(tmp_path: Path, work: Repo, keys: Keys,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Mallory's key is in the keyring of the user running the agent (GNUPGHOME), and trusted
    there: her commit is still refused, only the admin's keys count."""
    commit(work, "by mallory", {"federations/a.yaml": FED}, keys.mallory)
    monkeypatch.setenv("GNUPGHOME", keys.mallory.env["GNUPGHOME"])
    assert keys.mallory.fingerprint.upper() in refused(source(work, tmp_path, "HEAD", keys.alice))


def test_a_force_push_to_an_unsigned_commit_is_refused(tmp_path: Path, work: Repo, keys: Keys) -> None:
    bare = tmp_path / "remote.git"
    commit(work, "signed", {"federations/a.yaml": FED}, keys.alice)
    git(tmp_path, "clone", "-q", "--bare", str(work.path), str(bare))
    src = GitSource(SourceSpec(url=str(bare), ref="main", cache_dir=tmp_path / "cache",
                               verify=Verification("HEAD", (keys.alice.public,))))
    first = src.fetch()
    work.git("reset", "-q", "--hard", "HEAD")
    work.git("checkout", "-q", "--orphan", "rewritten")
    forced = commit(work, "rewritten history", {"federations/a.yaml": FED + "  namespace: evil\n"}, None)
    work.git("push", "-q", "--force", str(bare), "rewritten:main")
    message = refused(src)
    assert forced[:12] in message and "not signed" in message
    assert src.last() is first and files(first) == {"federations/a.yaml": FED}


def test_a_tag_signed_by_a_listed_key_is_checked_out(tmp_path: Path, work: Repo, keys: Keys) -> None:
    sha = commit(work, "unsigned commit", {"federations/a.yaml": FED}, None)
    tag(work, "v1", keys.alice)
    assert source(work, tmp_path, "Tag", keys.alice, ref="v1").fetch().revision == sha


def test_a_tag_signed_by_an_unlisted_key_is_refused(tmp_path: Path, work: Repo, keys: Keys) -> None:
    commit(work, "signed commit", {"federations/a.yaml": FED}, keys.alice)
    tag(work, "v1", keys.eve)
    message = refused(source(work, tmp_path, "Tag", keys.alice, keys.bob, ref="v1"))
    assert "tag v1" in message and keys.eve.fingerprint in message


def test_unsigned_and_lightweight_tags_are_refused(tmp_path: Path, work: Repo, keys: Keys) -> None:
    commit(work, "signed commit", {"federations/a.yaml": FED}, keys.alice)
    tag(work, "v1", None)
    tag(work, "v2", None, annotated=False)
    assert "not signed" in refused(source(work, tmp_path / "a", "Tag", keys.alice, ref="v1"))
    assert "lightweight" in refused(source(work, tmp_path / "b", "Tag", keys.alice, ref="v2"))


def test_tag_and_head_wants_both_signed(tmp_path: Path, work: Repo, keys: Keys) -> None:
    unsigned = commit(work, "unsigned commit", {"federations/a.yaml": FED}, None)
    tag(work, "v1", keys.alice)
    message = refused(source(work, tmp_path / "a", "TagAndHEAD", keys.alice, ref="v1"))
    assert f"commit {unsigned[:12]}" in message and "not signed" in message
    signed = commit(work, "signed commit", {}, keys.bob)
    tag(work, "v2", keys.alice)
    assert source(work, tmp_path / "b", "TagAndHEAD", keys.alice, keys.bob, ref="v2").fetch().revision == signed


def test_a_tag_mode_on_a_branch_is_refused(tmp_path: Path, work: Repo, keys: Keys) -> None:
    commit(work, "signed commit", {"federations/a.yaml": FED}, keys.alice)
    assert "not a tag" in refused(source(work, tmp_path, "Tag", keys.alice, ref="main"))


def test_a_signed_commit_after_a_refused_one_is_checked_out(tmp_path: Path, work: Repo, keys: Keys) -> None:
    commit(work, "signed", {"federations/a.yaml": FED}, keys.alice)
    src = source(work, tmp_path, "HEAD", keys.alice)
    src.fetch()
    commit(work, "unsigned", {"federations/b.yaml": FED}, None)
    refused(src)
    fixed = commit(work, "signed again", {}, keys.alice)
    checkout = src.fetch()
    assert checkout.revision == fixed and set(files(checkout)) == {"federations/a.yaml", "federations/b.yaml"}


# -- the agent: a refused revision is a unit error, an Event, and nothing applied -------------------


def test_the_agent_keeps_the_last_good_revision_and_every_unit_says_why(tmp_path: Path, work: Repo, keys: Keys,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    write(work.path, "fed")
    write(work.path, "other")
    good = commit(work, "signed", {}, keys.alice)
    src = source(work, tmp_path, "HEAD", keys.alice)
    agent = build_agent(FakeKube(), src, Metrics(), AgentOptions())
    told: list[tuple[Unit, Event]] = []
    monkeypatch.setattr(agent.book, "report", lambda unit, event: told.append((unit, event)))
    agent.handle(RevisionFetched(src.fetch(), time.monotonic()))
    units = set(agent.installed.plan.units)
    assert {u.name for u in units} == {"fed", "other"}

    bad = commit(work, "unsigned", {"federations/fed.yaml": federation("fed", pool("a", 3))}, None)
    with pytest.raises(SourceError) as err:
        src.fetch()
    agent.handle(FetchFailed(err.value))
    assert agent.installed.plan.revision == good  # nothing of the refused commit is installed
    conditions = agent.unit_conditions()
    for unit in units:
        synced = unit_state(agent, unit).synced
        assert (synced.status, synced.reason) == (False, "Unverified")
        assert bad[:12] in synced.message and "not signed" in synced.message
        assert conditions[unit]["ready"] is False
    refusals = [(u, e) for u, e in told if e.reason == "Unverified"]
    assert {u for u, _ in refusals} == units and all(bad[:12] in e.note and e.type == "Warning" for _, e in refusals)
    assert bad[:12] in agent.status()["source"]["error"]
    agent.handle(FetchFailed(err.value))  # the next poll: the same refusal, no new Event
    assert len([e for _, e in told if e.reason == "Unverified"]) == len(units)

    fixed = commit(work, "signed again", {}, keys.alice)
    agent.handle(RevisionFetched(src.fetch(), time.monotonic()))
    assert agent.installed.plan.revision == fixed and not agent.book.refusal
    assert all(unit_state(agent, u).synced.reason != "Unverified" for u in units)


def test_the_policy_names_the_keys_and_refuses_a_private_one(tmp_path: Path, keys: Keys) -> None:
    policy = tmp_path / "policy.yaml"
    entry = {"source": "https://git.example.org/team-a/*", "verify": {"mode": "TagAndHEAD", "publicKeys": [
        keys.alice.public, keys.bob.public]}}
    policy.write_text(yaml.safe_dump({"repositories": [entry]}))
    verify = load_policy(policy).for_source("https://git.example.org/team-a/cfg").verify
    assert verify is not None and verify.mode == "TagAndHEAD" and len(verify.publicKeys) == 2
    entry["verify"] = {"publicKeys": ["-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
                                      "-----END OPENSSH PRIVATE KEY-----\n"]}
    policy.write_text(yaml.safe_dump({"repositories": [entry]}))
    with pytest.raises(ValueError, match=r"repositories\[0\]\.verify\.publicKeys\[0\].*PRIVATE key"):
        load_policy(policy)
    entry["verify"] = {"publicKeys": []}
    policy.write_text(yaml.safe_dump({"repositories": [entry]}))
    with pytest.raises(ValueError, match="publicKeys"):
        load_policy(policy)
