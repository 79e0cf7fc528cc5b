"""`flower-syncer keygen`: an age key pair without age-keygen, checked against pyrage (the age
implementation flower-syncer decrypts with) and against age's own test vector."""

from __future__ import annotations

import stat
from pathlib import Path

import pyrage
import pytest

from syncer.cli import main
from syncer.secrets.keygen import bech32, from_private_bytes, generate
from syncer.secrets.keys import load_identities


def test_the_identity_and_recipient_are_what_pyrage_reads_and_derives() -> None:
    key = generate()
    assert key.identity.startswith("AGE-SECRET-KEY-1") and key.recipient.startswith("age1")
    identity = pyrage.x25519.Identity.from_str(key.identity)
    assert str(identity.to_public()) == key.recipient
    recipient = pyrage.x25519.Recipient.from_str(key.recipient)
    sealed = pyrage.encrypt(b"federated", [recipient])
    assert pyrage.decrypt(sealed, [identity]) == b"federated"
    assert generate().identity != key.identity


def test_a_known_private_key_spells_as_age_spells_it() -> None:
    secret = bytes(range(32))
    key = from_private_bytes(secret)
    pyrage_identity = pyrage.x25519.Identity.from_str(key.identity)
    assert str(pyrage_identity) == key.identity  # pyrage writes it back the same: upper-case Bech32
    assert str(pyrage_identity.to_public()) == key.recipient
    assert bech32("a", b"") == "a12uel5l"  # BIP 173's valid test vector (checksum over the empty data)
    with pytest.raises(pyrage.IdentityError):  # one wrong character: the checksum catches it
        pyrage.x25519.Identity.from_str(key.identity[:-1] + ("Q" if key.identity[-1] != "Q" else "P"))


def test_keygen_writes_a_private_file_that_the_loader_reads_and_never_overwrites(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "age.key"
    assert main(["keygen", "-o", str(path)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("Public key: age1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# created: ") and lines[1] == "# public key: " + printed.split(": ")[1]
    (identity,) = load_identities([path])
    assert str(identity.to_public()) == printed.split(": ")[1]
    before = path.read_text()
    assert main(["keygen", "-o", str(path)]) == 2
    assert "not overwriting" in capsys.readouterr().err
    assert path.read_text() == before


def test_keygen_without_a_file_prints_the_identity_and_the_public_key_apart(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWER_SYNCER_OUTPUT", "json")  # other verbs' -o: not keygen's file
    assert main(["keygen"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[2].startswith("AGE-SECRET-KEY-1")
    assert err.startswith("Public key: age1") and "AGE-SECRET-KEY" not in err
