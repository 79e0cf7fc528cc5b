"""Kubernetes naming rules, shared by the models (to validate) and renderers (to derive names)."""

from __future__ import annotations

import re

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
MAX_NAME = 63
# StatefulSet/DaemonSet pods carry `controller-revision-hash: <name>-<hash>`; a label value is at most
# 63 characters and the hash suffix takes up to 11, so longer workload names break rollouts.
MAX_WORKLOAD_NAME = 52


def name_problem(name: str, what: str, *, max_len: int = MAX_NAME, dns1035: bool = False) -> str | None:
    """Why `name` is not usable as a Kubernetes object name, or None if it is."""
    if len(name) > max_len:
        return f"{what} {name!r} is {len(name)} characters; Kubernetes allows at most {max_len}"
    pattern = DNS1035_LABEL if dns1035 else DNS1123_LABEL
    if not pattern.match(name):
        rule = "start with a lowercase letter" if dns1035 else "start and end with a lowercase letter or digit"
        return f"{what} {name!r} must consist of lowercase letters, digits and '-', and {rule}"
    return None


def label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"label key prefix {prefix!r} must be a DNS subdomain"
    if not name or len(name) > 63 or not LABEL_NAME.match(name):
        return f"label key {key!r} must be at most 63 characters of letters, digits, '-', '_' or '.'"
    return None


def label_value_problem(value: str) -> str | None:
    if len(value) > 63 or not LABEL_VALUE.match(value):
        return f"label value {value!r} must be at most 63 characters of letters, digits, '-', '_' or '.'"
    return None
