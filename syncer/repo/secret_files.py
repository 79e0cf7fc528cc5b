"""The Secret manifests of a config repository (a Federation file's Secret documents, a release's
`secrets.yaml`): validated, and held to the repository's `requireEncryption` (every value SOPS
encrypted), each problem a diagnostic of its unit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from syncer.diagnostics import Diagnostic, format_path
from syncer.identity import Unit
from syncer.models.base import validate_document
from syncer.models.secret import SecretManifest
from syncer.repo.reader import Reader
from syncer.repo.state import RepoState
from syncer.yamldoc import YamlDoc


def load_secrets(reader: Reader, path: Path, state: RepoState,
                  unit: Unit) -> tuple[list[tuple[str, SecretManifest]], bool]:
    """`supernodes/<release>/secrets.yaml`: the release's Secret manifests (one per document)."""
    rel = reader.rel(path)
    text = reader.read(path)
    if text is None:
        return [], False
    docs, problems = reader.documents(text, rel)
    state.diagnostics.extend(of_unit(problems, unit.id))
    if any(p.severity == "error" for p in problems):
        return [], False
    return validate_secrets(reader, rel, docs, state, unit.id)


def of_unit(problems: list[Diagnostic], unit: str) -> list[Diagnostic]:
    """The problems of reading a unit's file (YAML, decryption), attributed to the unit, so that
    its status, metrics and Events show them."""
    return [replace(p, unit=unit) if unit and not p.unit else p for p in problems]


def validate_secrets(reader: Reader, rel: str, docs: list[YamlDoc], state: RepoState,
                      unit: str) -> tuple[list[tuple[str, SecretManifest]], bool]:
    out: list[tuple[str, SecretManifest]] = []
    ok = True
    for doc in docs:
        model, problems = validate_document(SecretManifest, doc, unit=unit)
        state.diagnostics.extend(problems)
        if model is None:
            ok = False
            continue
        if state.settings.requireEncryption and rel not in reader.encrypted:
            state.diagnostics.append(Diagnostic(rel, doc.start_line, 1, "", f"Secret {model.metadata.name!r} is in "
                                                f"plain text, and {state.encryption_by} sets requireEncryption",
                                                "encrypt the file with sops", unit=unit))
            ok = False
            continue
        plain = plain_values(reader, rel, [(("data", k), v) for k, v in model.data.items()]
                              + [(("stringData", k), v) for k, v in model.stringData.items()])
        if state.settings.requireEncryption and plain:
            line, col = doc.position(plain[0])
            state.diagnostics.append(Diagnostic(
                rel, line, col, format_path(plain[0]), f"Secret {model.metadata.name!r}: "
                f"{', '.join(format_path(p) for p in plain)} {'is' if len(plain) == 1 else 'are'} not encrypted "
                f"(the file's sops rules, e.g. encrypted_regex, leave them in plain text), and {state.encryption_by} "
                "sets requireEncryption", "encrypt every value of the Secret: sops encrypt with an encrypted_regex "
                "that matches ^(data|stringData)$, or none", unit=unit))
            ok = False
            continue
        out.append((rel, model))
    return out, ok


def plain_values(reader: Reader, rel: str, values: Sequence[tuple[tuple[str, ...], str]]) -> list[tuple[str, ...]]:
    """The paths of `values` (field path, value) that `rel` does not hold encrypted: the file is
    not SOPS-encrypted, or its sops rules left the value in plain text."""
    if rel not in reader.encrypted:
        return [path for path, value in values if value]
    secrets = reader.secrets.get(rel, frozenset())
    opaque = set(reader.opaque.get(rel, ()))  # validate without a key: the values left encrypted
    return [path for path, value in values if value and value not in secrets and format_path(path) not in opaque]
