"""Where a Federation's SuperLink keeps its state (runs and their history, registered SuperNodes
and their keys): Flower's SQLite database (`--database`) on a persistent volume, or in memory.
Set on the Federation with annotations, so the document stays a valid flower-operator document:

    flower-syncer.io/superlink-state: persistent | memory
    flower-syncer.io/superlink-state-size: 1Gi               (a quantity; the default)
    flower-syncer.io/superlink-state-storage-class: standard  (unset: the cluster's default class)
    flower-syncer.io/superlink-state-retention: Retain | Delete

Unset, the state is persistent for a new SuperLink; a SuperLink that already runs in memory (one
flower-syncer rendered before it kept state) stays in memory until Git says `persistent`, because
a StatefulSet's volumeClaimTemplates cannot change in place: the switch recreates the SuperLink's
StatefulSet once, and only when Git asks (syncer.engine.superlink_state). `retention` is the
StatefulSet's `persistentVolumeClaimRetentionPolicy.whenDeleted`: Retain keeps the volume when
the Federation leaves Git (pruned) and a Federation of the same name finds its state again;
Delete removes it with the StatefulSet. A SuperLink whose `extraArgs` pass `--database` keeps its
own arrangement (nothing is added). docs/superlink-state.md says it for users.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from syncer.diagnostics import FieldPath
from syncer.identity import ANN_SUPERLINK_STATE, SUPERLINK_STATE_DIR, SUPERLINK_STATE_VOLUME
from syncer.models.k8s import Issue, is_quantity
from syncer.models.names import DNS1123_SUBDOMAIN

ANN_STATE = ANN_SUPERLINK_STATE
ANN_STATE_SIZE = "flower-syncer.io/superlink-state-size"
ANN_STATE_CLASS = "flower-syncer.io/superlink-state-storage-class"
ANN_STATE_RETENTION = "flower-syncer.io/superlink-state-retention"
DEFAULT_SIZE = "1Gi"
DATABASE = f"{SUPERLINK_STATE_DIR}/state.db"
DATABASE_FLAG = "--database"

Mode = Literal["persistent", "memory", "default", "user"]
"""persistent, memory: as Git says; default: persistent unless the SuperLink already runs in memory;
user: `--database` is in the SuperLink's extraArgs (nothing added)."""


@dataclass(frozen=True)
class StateSettings:
    mode: Mode
    size: str = DEFAULT_SIZE
    storage_class: str | None = None
    retention: Literal["Retain", "Delete"] = "Retain"

    @property
    def persistent(self) -> bool:
        """flower-syncer renders the state volume (explicitly or by default)."""
        return self.mode in ("persistent", "default")


def _at(key: str) -> FieldPath:
    return ("metadata", "annotations", key)


def user_database(extra_args: list[str]) -> bool:
    return any(a == DATABASE_FLAG or a.startswith(DATABASE_FLAG + "=") for a in extra_args)


def state_settings(annotations: dict[str, str], extra_args: list[str]) -> StateSettings:
    """The settings of a well-formed document (state_issues reports the rest; values it refuses
    fall back to the defaults here)."""
    written = annotations.get(ANN_STATE, "").strip()
    mode: Mode = ("persistent" if written == "persistent" else "memory" if written == "memory"
                  else "user" if user_database(extra_args) else "default")
    size = annotations.get(ANN_STATE_SIZE, "").strip()
    klass = annotations.get(ANN_STATE_CLASS, "").strip()
    retention = annotations.get(ANN_STATE_RETENTION, "").strip()
    return StateSettings(mode, size if _size_problem(size) is None else DEFAULT_SIZE,
                         klass if klass and _class_problem(klass) is None else None,
                         "Delete" if retention == "Delete" else "Retain")


def _size_problem(size: str) -> str | None:
    if not is_quantity(size):
        return f"{size!r} is not a Kubernetes quantity"
    mantissa = re.split(r"[eE]", size, maxsplit=1)[0]
    if size.startswith("-") or not any(c in "123456789" for c in mantissa):
        return f"{size!r} is not a size: a volume needs more than nothing"
    if size[-1] == "m":
        return f"{size!r} is in thousandths of a byte"
    return None


def _class_problem(name: str) -> str | None:
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        return f"{name!r} is not a StorageClass name (lowercase letters, digits, '-' and '.')"
    return None


def state_issues(annotations: dict[str, str], extra_args: list[str], claim_names: set[str],
                 volume_names: set[str]) -> list[Issue]:
    """What is wrong with a Federation's SuperLink state settings, each naming its annotation."""
    issues: list[Issue] = []
    written = annotations.get(ANN_STATE)
    if written is not None and written.strip() not in ("persistent", "memory"):
        issues.append(Issue(_at(ANN_STATE), f"{written!r} is not a setting",
                            "write persistent (a volume; the default for a new SuperLink) or memory"))
    size = annotations.get(ANN_STATE_SIZE)
    if size is not None and (problem := _size_problem(size.strip())):
        issues.append(Issue(_at(ANN_STATE_SIZE), problem, 'write the size of the volume, e.g. "1Gi" or "500Mi"'))
    klass = annotations.get(ANN_STATE_CLASS)
    if klass is not None and (problem := _class_problem(klass.strip())):
        issues.append(Issue(_at(ANN_STATE_CLASS), problem,
                            "name a StorageClass of the cluster (kubectl get storageclass), or remove the annotation "
                            "to use the cluster's default class"))
    retention = annotations.get(ANN_STATE_RETENTION)
    if retention is not None and retention.strip() not in ("Retain", "Delete"):
        issues.append(Issue(_at(ANN_STATE_RETENTION), f"{retention!r} is not a retention policy",
                            "write Retain (the volume outlives the Federation; the default) or Delete (it goes "
                            "with the SuperLink's StatefulSet)"))
    settings = state_settings(annotations, extra_args)
    if user_database(extra_args) and written is not None:
        issues.append(Issue(_at(ANN_STATE), "the SuperLink's extraArgs pass --database, and the annotation asks "
                            "flower-syncer to place the database too",
                            f"remove --database from spec.superlink.extraArgs, or remove {ANN_STATE}"))
    elif settings.persistent:
        for names, field in ((claim_names, "volumeClaimTemplates"), (volume_names, "volumes")):
            if SUPERLINK_STATE_VOLUME in names:
                issues.append(Issue(("spec", "superlink", field), f"{SUPERLINK_STATE_VOLUME!r} is the name of the "
                                    "volume flower-syncer keeps the SuperLink's state on",
                                    f"rename yours, or set {ANN_STATE}: memory"))
    else:
        unused = [k for k in (ANN_STATE_SIZE, ANN_STATE_CLASS, ANN_STATE_RETENTION) if k in annotations]
        why = ("the SuperLink keeps its state in memory" if settings.mode == "memory"
               else "the SuperLink's extraArgs place the database (--database)")
        issues += [Issue(_at(k), f"{k} has no effect: {why}", f"remove it, or set {ANN_STATE}: persistent",
                         "warning") for k in unused]
    return issues
