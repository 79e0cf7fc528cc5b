"""The content keys of the render and plan caches: a digest of everything a cached result depends
on, made here and nowhere else. Pure: no I/O, no clock, nothing kept between calls.

A unit's render (its manifests and the guardrails it crosses; `render.repo` `RenderCache`), the
UnitPlan made from it (`plan_repo`'s `previous`) and the Flower-level target worked out from it
(`render.flower_targets` `FlowerMemo`) depend on:

- the unit as loaded, `unit_key`: the loader's digest of what it made the `LoadedUnit` from
  (`LoadedUnit.inputs`: the bytes of the files of its federation file or release folder, the
  folder's file names, the repository's settings, the decryption keys, the cluster), else, for a
  unit made without a `LoadCache`, the content of every field that defines its equality (unit,
  source, line, the model with its annotations, policy, the Secrets declared beside it, the
  sealed values and their key, cluster): a field added to `LoadedUnit` is in the key unasked;
- the render's context, `context_key`: the repository's settings as the admin's policy left them
  (guardrails, allowed Secrets and ServiceAccounts, policy defaults), the agent's own
  ServiceAccount, and Flower's release facts (`syncer.models.flower`: the release an untagged
  image is rendered for, every flag's boundaries).

Identity is only a fast path in front of these keys (`same_unit`): a frozen object is equal to
itself. tests/unit/test_cachekey.py changes each input in turn and sees a new render."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable

from pydantic import BaseModel

from syncer.models import flower
from syncer.models.settings import RepoSettings
from syncer.render.podrules import AgentAccount
from syncer.repo.state import LoadedUnit

Key = bytes
"""A SHA-256 digest; b"" is never a key (unknown: nothing is reused for it)."""


def unit_key(loaded: LoadedUnit) -> Key:
    """What `loaded` is: the loader's digest of its inputs, else a digest of its content."""
    return loaded.inputs or hashlib.sha256(_encode(loaded)).digest()


def same_unit(a: LoadedUnit, b: LoadedUnit) -> bool:
    """`a` and `b` are the same unit with the same content (the same object, as a fast path)."""
    return a is b or unit_key(a) == unit_key(b)


def context_key(settings: RepoSettings, agent: AgentAccount | None) -> Key:
    """What every unit's render depends on besides the unit: `settings` (the effective ones,
    after the admin's policy), the agent's own ServiceAccount (None: not known) and Flower's
    release facts."""
    return hashlib.sha256(_framed([settings.model_dump_json().encode(), repr(agent).encode(),
                                   flower_facts()])).digest()


def render_key(unit: Key, context: Key) -> Key:
    """The key of one unit's render, and of the UnitPlan made from it."""
    return hashlib.sha256(unit + context).digest()


def flower_facts() -> Key:
    """Every constant of `syncer.models.flower` (the newest release, the boundaries, ports and the
    flag table): a boundary moved by a new release renders every unit again."""
    facts = sorted((name, repr(value)) for name, value in vars(flower).items() if name.lstrip("_").isupper())
    return hashlib.sha256(_framed(f"{name}={value}".encode() for name, value in facts)).digest()


def _framed(parts: Iterable[bytes]) -> bytes:
    """`parts` joined so that no two different sequences join to the same bytes."""
    return b"".join(len(p).to_bytes(8, "big") + p for p in parts)


def _encode(value: object) -> bytes:
    """The content of `value` as bytes, tagged by its type; equal values give equal bytes. A type
    not listed here raises: a field of a new type needs a decision, not a silent `repr`."""
    if isinstance(value, BaseModel):
        return b"M" + type(value).__name__.encode() + b":" + value.model_dump_json().encode()
    if isinstance(value, bytes):
        return b"B" + value
    if value is None or isinstance(value, (str, int, float)):  # bool is an int
        return b"V" + repr(value).encode()
    if isinstance(value, (frozenset, set)):
        return b"S" + _framed(sorted(_encode(v) for v in value))
    if isinstance(value, (tuple, list)):
        return b"T" + _framed(_encode(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return b"D" + type(value).__name__.encode() + b":" + _framed(
            _encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.compare)
    raise TypeError(f"render.cachekey cannot key a {type(value).__name__}: say how its content is encoded")
