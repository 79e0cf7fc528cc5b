"""SOPS-encrypted files (issue 12, part 1): encrypted by the real `sops` CLI (built by
tools/build_sops.py), decrypted natively by flower-syncer. A corpus of broken, tampered and
unsupported files, each with its exact error; and what the loader does with them: the unit fails
and keeps its last state, plaintext never reaches a diagnostic."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from syncer.repo.loader import LoadCache, load_repo
from syncer.secrets.keys import Decryption, load_identities
from syncer.secrets.sops import SopsError, decrypt_document
from tests.builders import NS
from tests.builders import SECRET_VALUES as VALUES
from tests.sops_cli import SECRET, new_key, sops_encrypt

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, str, Path, str]:
    return tmp_path / "a.key", new_key(tmp_path / "a.key"), tmp_path / "b.key", new_key(tmp_path / "b.key")


def decrypt(text: str, *key_files: Path) -> dict[str, Any]:
    return decrypt_document(yaml.safe_load(text), load_identities(key_files)).data


def test_what_sops_writes_decrypts_exactly(tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    a_file, a_pub, _, _ = keys
    assert decrypt(sops_encrypt(VALUES, tmp_path, a_pub), a_file) == yaml.safe_load(VALUES)
    mac_only = tmp_path / "mac-only.sops.yaml"
    mac_only.write_text(f"creation_rules:\n  - age: {a_pub}\n    encrypted_regex: '^token$'\n"
                        "    mac_only_encrypted: true\n")
    for option in (("--encrypted-regex", "^(token|value)$"), ("--unencrypted-suffix", "_plain"),
                   ("--encrypted-suffix", "token")):
        text = sops_encrypt(VALUES, tmp_path, a_pub, args=option)
        assert decrypt(text, a_file) == yaml.safe_load(VALUES), option
    text = sops_encrypt(VALUES, tmp_path, config=mac_only)
    assert "mac_only_encrypted: true" in text and decrypt(text, a_file) == yaml.safe_load(VALUES)
    partial = sops_encrypt(VALUES, tmp_path, a_pub, args=("--encrypted-regex", "^(token|value)$"))
    assert "s3cr3t" not in partial and "replicas: 2" in partial  # only the secrets were encrypted


def test_rotation_old_and_new_keys(tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    """Re-encrypted for a new recipient, the file opens with the old key, the new key, or both
    loaded; once the old recipient is removed, only the new key opens it."""
    a_file, a_pub, b_file, b_pub = keys
    both = sops_encrypt(VALUES, tmp_path, a_pub, b_pub)
    for key_files in ((a_file,), (b_file,), (a_file, b_file), (b_file, a_file)):
        assert decrypt(both, *key_files)["supernode"]["replicas"] == 2
    only_new = sops_encrypt(VALUES, tmp_path, b_pub)
    assert decrypt(only_new, a_file, b_file)["supernode"]["replicas"] == 2
    with pytest.raises(SopsError, match="none of the decryption keys opens the file"):
        decrypt(only_new, a_file)


def _edit(pattern: str, repl: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        out, n = re.subn(pattern, repl, text, count=1, flags=re.M)
        assert n == 1 and out != text, pattern
        return out
    return edit


def _b64_flip(key: str) -> Callable[[str], str]:
    """Change the first base64 character of `key`'s ciphertext, whatever it was."""
    def edit(text: str) -> str:
        m = re.search(rf"({key}: ENC\[AES256_GCM,data:)([A-Za-z0-9+/])", text)
        assert m is not None, key
        flipped = "A" if m.group(2) != "A" else "B"
        return text[:m.start(2)] + flipped + text[m.end(2):]
    return edit


def _move_value(text: str) -> str:
    token = re.search(r"token: (ENC\[[^\]]*\])", text)
    value = re.search(r"value: (ENC\[[^\]]*\])", text)
    assert token and value
    return text.replace(value.group(1), "@@").replace(token.group(1), value.group(1)).replace("@@", token.group(1))


def _truncate(text: str) -> str:
    return text[: text.index("    lastmodified:")]


def _drop_line(prefix: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        out = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(prefix)) + "\n"
        assert out != text, prefix
        return out
    return edit


CORPUS: dict[str, tuple[Callable[[str], str], str]] = {
    "value-bit-flipped": (_b64_flip("token"), "the value at supernode:node:config:token does not decrypt"),
    "value-moved-to-another-key": (_move_value, "does not decrypt (changed, moved or truncated)"),
    "value-replaced-by-plaintext": (_edit(r"token: ENC\[[^\]]*\]", "token: hand-edited"),
                                    "the value at supernode:node:config:token should be encrypted but is not"),
    "value-deleted": (_drop_line("epochs:"), "the file's MAC does not match its contents"),
    "plain-value-added": (_edit(r"^supernode:\n", "extra: added-later\nsupernode:\n"),
                          "the value at extra should be encrypted but is not"),
    "mac-damaged": (_b64_flip("mac"),
                    "the file's MAC (or its lastmodified time) was changed or damaged"),
    "lastmodified-changed": (_edit(r'lastmodified: "[^"]*"', 'lastmodified: "2001-01-01T00:00:00Z"'),
                             "the file's MAC (or its lastmodified time) was changed or damaged"),
    "mac-removed": (_drop_line("mac:"), "the file has no MAC"),
    "truncated-after-keys": (_truncate, "the file has no MAC"),
    "type-unknown": (_edit(r"type:int\]", "type:decimal]"), "has a type sops does not write here: decimal"),
    "iv-not-base64": (_edit(r"token: ENC\[AES256_GCM,data:([^,]*),iv:", r"token: ENC[AES256_GCM,data:\1,iv:!!"),
                      "the value at supernode:node:config:token does not decrypt"),
    "age-recipient-removed": (_edit(r"(?s)    age:\n.*?-----END AGE ENCRYPTED FILE-----\n", ""),
                              "the file has no age recipient (only: none)"),
    "age-armor-damaged": (_edit(r"-----BEGIN AGE ENCRYPTED FILE-----\n\s*\S+", "-----BEGIN AGE ENCRYPTED FILE-----\n"
                                                                                 "            !!!!"),
                          "none of the decryption keys opens the file"),
    "pgp-only": (_edit(r"(?s)    age:\n.*?-----END AGE ENCRYPTED FILE-----\n",
                       "    pgp:\n        - fp: 0123456789ABCDEF\n          enc: x\n"),
                 "the file has no age recipient (only: pgp)"),
    "comment-regex-option": (_edit(r"    version:", "    encrypted_comment_regex: sops:enc\n    version:"),
                             "the sops option encrypted_comment_regex is not supported"),
    "bad-regex-option": (_edit(r"    version:", "    encrypted_regex: '['\n    version:"),
                         "the sops option encrypted_regex is not a valid regular expression"),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_broken_file_is_refused_with_its_reason(case: str, tmp_path: Path,
                                                keys: tuple[Path, str, Path, str]) -> None:
    a_file, a_pub, _, _ = keys
    edit, expected = CORPUS[case]
    text = edit(sops_encrypt(VALUES, tmp_path, a_pub))
    with pytest.raises(SopsError) as err:
        decrypt(text, a_file)
    assert expected in err.value.detail
    for secret in ("s3cr3t-token-value", "top-secret-api-key"):
        assert secret not in err.value.detail + err.value.hint


def test_several_key_groups_are_refused(tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    a_file, a_pub, _, _ = keys
    data = yaml.safe_load(sops_encrypt(VALUES, tmp_path, a_pub))
    data["sops"]["key_groups"] = [{"age": data["sops"].pop("age")}, {"age": []}]  # as Shamir splits write
    with pytest.raises(SopsError, match="several key groups"):
        decrypt_document(data, load_identities([a_file]))


def test_key_files_are_checked(tmp_path: Path) -> None:
    (tmp_path / "empty.key").write_text("# nothing here\n")
    with pytest.raises(SopsError, match="holds no age identity"):
        load_identities([tmp_path / "empty.key"])
    (tmp_path / "bad.key").write_text("AGE-SECRET-KEY-1NOTAKEY\n")
    with pytest.raises(SopsError, match="is not a valid age identity") as err:
        load_identities([tmp_path / "bad.key"])
    assert "NOTAKEY" not in str(err.value)
    with pytest.raises(SopsError, match="cannot read the decryption key file"):
        load_identities([tmp_path / "missing.key"])


# -- in the repository ---------------------------------------------------------------------------------


def repo_with(tmp_path: Path, values_text: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "supernodes" / "edge").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: sops\ndefaultNamespace: {NS}\n")
    (repo / "supernodes" / "edge" / "values.yaml").write_text(values_text)
    return repo


def test_an_encrypted_values_file_loads_with_the_key(tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    a_file, a_pub, _, _ = keys
    repo = repo_with(tmp_path, sops_encrypt(VALUES, tmp_path, a_pub))
    state = load_repo(repo, Decryption(load_identities([a_file])))
    assert [d for d in state.diagnostics if d.severity == "error"] == []
    (unit,) = state.units
    assert unit.model.supernode.replicas == 2 and unit.model.supernode.node.config["token"] == "s3cr3t-token-value"


def test_a_multi_document_file_decrypts_as_one_and_its_documents_stay_together(
        tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    """sops writes the same metadata into every document of a file and one MAC over all of them:
    they are decrypted together, and a document dropped from the file fails the MAC."""
    a_file, a_pub, _, _ = keys
    second = SECRET.replace("edge-credentials", "edge-other").replace("hunter2-very-secret", "second-plain")
    text = sops_encrypt(SECRET + "---\n" + second, tmp_path, a_pub)
    repo = tmp_path / "repo"
    (repo / "supernodes" / "edge").mkdir(parents=True)
    (repo / "flower-syncer.yaml").write_text(f"name: sops\ndefaultNamespace: {NS}\n")
    (repo / "supernodes" / "edge" / "values.yaml").write_text("tls:\n  enabled: false\n")
    (repo / "supernodes" / "edge" / "secrets.yaml").write_text(text)
    keyring = Decryption(load_identities([a_file]))
    state = load_repo(repo, keyring)
    assert [d for d in state.diagnostics if d.severity == "error"] == []
    assert {"hunter2-very-secret", "second-plain"} <= state.secrets
    (repo / "supernodes" / "edge" / "secrets.yaml").write_text(text.split("\n---\n")[0] + "\n")
    errors = [d for d in load_repo(repo, keyring).diagnostics if d.severity == "error"]
    assert errors and "MAC does not match" in errors[0].message


def test_an_unchanged_encrypted_file_is_not_parsed_or_decrypted_again(
        tmp_path: Path, keys: tuple[Path, str, Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A new revision costs only the encrypted files that changed (issue 12: a no-op resync with
    encrypted files at most 10 % slower than without; bench/sops_load.py measures it)."""
    from syncer.repo import reader

    a_file, a_pub, _, b_pub = keys
    repo = repo_with(tmp_path, sops_encrypt(VALUES, tmp_path, a_pub))
    keyring = Decryption(load_identities([a_file]))
    parsed: list[str] = []
    real = reader.load_documents
    monkeypatch.setattr(reader, "load_documents", lambda text, rel: (parsed.append(rel), real(text, rel))[1])
    first = load_repo(repo, keyring)
    second = load_repo(repo, keyring)
    assert parsed.count("supernodes/edge/values.yaml") == 1
    assert second.units[0].model == first.units[0].model and second.secrets == first.secrets
    # new content (re-encrypted for another recipient too) is opened again
    (repo / "supernodes" / "edge" / "values.yaml").write_text(sops_encrypt(VALUES, tmp_path, a_pub, b_pub))
    load_repo(repo, keyring)
    assert parsed.count("supernodes/edge/values.yaml") == 2


def test_without_a_key_validate_checks_the_rest_and_sync_refuses(tmp_path: Path,
                                                                 keys: tuple[Path, str, Path, str]) -> None:
    _, a_pub, _, _ = keys
    repo = repo_with(tmp_path, sops_encrypt(VALUES, tmp_path, a_pub, args=("--encrypted-regex", "^(token|value)$")))
    checked = load_repo(repo)  # validate: no key required
    assert [d.severity for d in checked.diagnostics] == ["warning"] and checked.units
    refused = load_repo(repo, Decryption(required=True))  # sync and the agent
    errors = [d for d in refused.diagnostics if d.severity == "error"]
    assert [e.file for e in errors] == ["supernodes/edge/values.yaml"] and not refused.units
    assert "no decryption key was given" in errors[0].message and "--decryption-key-file" in errors[0].hint


def test_plaintext_never_reaches_a_diagnostic(tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    """A schema error about an encrypted value must not quote it."""
    a_file, a_pub, _, _ = keys
    wrong = VALUES.replace("  replicas: 2\n", "  replicas: not-a-number-s3cr3t\n")
    repo = repo_with(tmp_path, sops_encrypt(wrong, tmp_path, a_pub))
    state = load_repo(repo, Decryption(load_identities([a_file])))
    rendered = "\n".join(d.render() for d in state.diagnostics)
    assert "supernode.replicas" in rendered and "not-a-number-s3cr3t" not in rendered, rendered


def test_a_cached_load_keeps_the_plaintext_it_did_not_decrypt_again_out_of_diagnostics(
        tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    """The agent's LoadCache replays an unchanged encrypted file: its plaintext values must still be
    known to the load (state.secrets), so its diagnostics and the status stay scrubbed."""
    a_file, a_pub, _, _ = keys
    wrong = VALUES.replace("  replicas: 2\n", "  replicas: not-a-number-s3cr3t\n")
    repo = repo_with(tmp_path, sops_encrypt(wrong, tmp_path, a_pub))
    keyring = Decryption(load_identities([a_file]))
    cache = LoadCache()
    first = load_repo(repo, keyring, cache)
    second = load_repo(repo, keyring, cache)
    assert (cache.hits, cache.misses) == (1, 0)
    assert second.secrets == first.secrets and "s3cr3t-token-value" in second.secrets
    assert second.diagnostics == first.diagnostics and second.failed == first.failed
    rendered = "\n".join(d.render() for d in second.diagnostics)
    assert "supernode.replicas" in rendered and "not-a-number-s3cr3t" not in rendered, rendered
    # another key set is another load: nothing is replayed across keys
    assert load_repo(repo, Decryption(required=True), cache).units == [] and cache.misses == 1


def test_the_cli_keeps_plaintext_out_of_its_output(tmp_path: Path, keys: tuple[Path, str, Path, str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from syncer.cli import EXIT_OK, EXIT_USAGE, main

    a_file, a_pub, _, _ = keys
    repo = repo_with(tmp_path, sops_encrypt(VALUES, tmp_path, a_pub))
    assert main(["validate", str(repo)]) == EXIT_OK  # no key: the rest is checked, with a warning
    assert "encrypted with SOPS" in capsys.readouterr().out
    assert main(["render", str(repo), "--decryption-key-file", str(a_file)]) == EXIT_OK
    out = capsys.readouterr().out
    # the encrypted env value reaches the pod through the sealed Secret (syncer.render.encrypted_values), redacted
    assert "top-secret-api-key" not in out and "supernode.env.API_KEY: '**redacted**'" in out
    assert main(["render", str(repo), "--decryption-key-file", str(a_file), "--show-secrets"]) == EXIT_OK
    assert base64.b64encode(b"top-secret-api-key").decode() in capsys.readouterr().out
    assert main(["render", str(repo)]) == 1  # render needs the values: no key is an error for the unit
    assert "no decryption key was given" in capsys.readouterr().err
    assert main(["render", str(repo), "--decryption-key-file", str(tmp_path / "nope.key")]) == EXIT_USAGE


def test_keys_from_a_mounted_secret_folder(tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    """The chart mounts decryption.existingSecret as a folder: every file in it is read (Kubernetes'
    ..data bookkeeping skipped)."""
    a_file, a_pub, b_file, _ = keys
    mounted = tmp_path / "mounted"
    (mounted / "..data").mkdir(parents=True)
    (mounted / "old.agekey").write_text(b_file.read_text())
    (mounted / "new.agekey").write_text(a_file.read_text())
    assert len(load_identities([mounted])) == 2
    assert decrypt(sops_encrypt(VALUES, tmp_path, a_pub), mounted)["supernode"]["replicas"] == 2


def test_an_encrypted_secret_manifest_is_applied_and_pruned_with_its_unit(
        tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    import base64

    from syncer.actions.load import load
    from syncer.actions.sync import sync
    from syncer.engine.sync import SyncOptions
    from tests.fakekube import FakeApiServer, FakeKube

    a_file, a_pub, _, _ = keys
    repo = repo_with(tmp_path, "tls:\n  enabled: false\n")
    (repo / "supernodes" / "edge" / "secrets.yaml").write_text(sops_encrypt(SECRET, tmp_path, a_pub))
    server = FakeApiServer()
    server.add_namespace(NS)
    kube = FakeKube(server)
    decryption = Decryption(load_identities([a_file]))
    assert sync(kube, load(repo, decryption=decryption), SyncOptions()).ok
    live = kube.get("Secret", NS, "edge-credentials")
    assert live is not None and base64.b64decode(live["data"]["password"]) == b"hunter2-very-secret"
    assert live["metadata"]["labels"]["flower-syncer.io/unit"] == "edge"
    assert sync(kube, load(repo, decryption=decryption), SyncOptions()).writes == 0  # nothing changed
    (repo / "supernodes" / "edge" / "secrets.yaml").unlink()  # left Git: pruned with the unit's other objects
    assert sync(kube, load(repo, decryption=decryption), SyncOptions()).ok
    assert kube.get("Secret", NS, "edge-credentials") is None


def test_require_encryption(tmp_path: Path, keys: tuple[Path, str, Path, str]) -> None:
    a_file, a_pub, _, _ = keys
    repo = repo_with(tmp_path, "tls:\n  enabled: false\n")
    (repo / "flower-syncer.yaml").write_text(f"name: sops\ndefaultNamespace: {NS}\nrequireEncryption: true\n")
    secrets = repo / "supernodes" / "edge" / "secrets.yaml"
    secrets.write_text(SECRET)
    state = load_repo(repo, Decryption(load_identities([a_file])))
    assert [d.message for d in state.diagnostics if d.severity == "error"] == [
        "Secret 'edge-credentials' is in plain text, and flower-syncer.yaml sets requireEncryption"]
    secrets.write_text(sops_encrypt(SECRET, tmp_path, a_pub))
    assert load_repo(repo, Decryption(load_identities([a_file]))).diagnostics == []
