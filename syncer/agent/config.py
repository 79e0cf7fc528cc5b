"""The agent's settings, from (highest first) command-line flags, `FLOWER_SYNCER_*` environment
variables and a YAML config file (`--config` / `FLOWER_SYNCER_CONFIG`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from syncer.agent.envnames import ENV_PREFIX, env_name, namespace_list
from syncer.models.base import validate_document
from syncer.models.policy import AdminPolicy
from syncer.yamldoc import MAX_FILE_BYTES, decode_text, load_documents


class AgentConfig(BaseModel):
    # its validators are built when a config is first loaded (`run`), not for the options of every verb
    model_config = ConfigDict(extra="forbid", defer_build=True)

    repo: str = Field(description="Git URL or local path of the config repository")
    ref: str | None = Field(None, description="branch, tag or commit to sync (default: the remote's default branch)")
    path: str = Field("", description="sub-path of the config inside the repository")
    source_url: str | None = Field(
        None, description="the URL or path the repository is known by: its derived name, the admin policy's "
                          "entry and what its inventories record (default: repo, as given; a local repository's "
                          ".git/config is never read for it)")
    interval: float = Field(60.0, gt=0, description="seconds between polls of the remote")
    kubeconfig: str | None = Field(None, description="kubeconfig file (default: in-cluster or ~/.kube/config)")
    context: str | None = Field(None, description="kubeconfig context")
    listen: str = Field("127.0.0.1:9090", description="HOST:PORT of the HTTP server (metrics, health, API, webhook)")
    api_token_file: Path | None = Field(None, description="file with the bearer token for POST /api/v1/resync")
    protect_reads: bool = Field(False, description="require the API bearer token on GET /metrics and /api/v1/status")
    webhook_secret_file: Path | None = Field(None, description="file with the webhook secret (GitHub HMAC/GitLab)")
    git_token_file: Path | None = Field(None, description="file with an HTTPS token for the Git remote")
    git_username: str = Field("git", description="user name sent with the HTTPS token")
    ssh_key_file: Path | None = Field(None, description="SSH private key for the Git remote")
    known_hosts_file: Path | None = Field(None, description="known_hosts for the Git remote (required for SSH)")
    namespaces: list[str] | None = Field(None, description="only read/write these namespaces (comma-separated)")
    cluster: str = Field("", description="this cluster's name in a repository that lays out several "
                                         "(clusters/<name>/): only its units are applied, pruned and reported")
    leader_elect: bool = Field(True, description="elect a leader through a Lease; only the leader writes")
    lease_namespace: str = Field("default", description="namespace of the leader-election Lease")
    lease_name: str = Field("flower-syncer", description="name of the leader-election Lease")
    lease_duration: float = Field(15.0, gt=0, description="seconds a leader-election Lease lasts unrenewed")
    lease_renew_period: float = Field(5.0, gt=0, description="seconds between renewals by the leader")
    lease_retry_period: float = Field(2.0, gt=0, description="seconds between attempts of a standby to lead")
    lease_safety_margin: float | None = Field(
        None, gt=0, description="the leader writes only until lease duration minus this after its last renewal "
                                "(default: a third of the lease duration; must exceed the retry period)")
    identity: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
                          description="this agent's identity in the Lease")
    workers: int = Field(4, ge=1, le=64, description="units synced in parallel")
    cache_dir: Path | None = Field(None, description="where the Git clone lives")
    notifications_file: Path | None = Field(
        None, description="YAML file with notification receivers (generic webhook, Slack, Microsoft Teams)")
    decryption_key_files: list[Path] | None = Field(
        None, description="age identity files for SOPS-encrypted files (comma-separated; read again at every "
                          "revision, so a rotated key needs no restart)")
    policy: Path | None = Field(
        None, description="the cluster admins' policy file: what the repository may do (namespaces, pod features, "
                          "names, the ServiceAccount its writes are made as); flower-syncer.yaml can only narrow it. "
                          "Unset: single-tenant, the repository's own guardrails are all there is")
    flower_health: Literal["on", "off"] = Field(
        "on", description="ask each Federation's SuperLink (its Control API) every status round which SuperNodes are "
                          "connected and how its runs went; off for an agent that cannot reach the SuperLinks (e.g. "
                          "outside the cluster, where Service DNS does not resolve)")
    log_format: Literal["auto", "json", "console"] = Field("auto", description="log format (auto: console on a TTY)")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")

    @field_validator("namespaces", "decryption_key_files", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return namespace_list(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _lease_timings(self) -> AgentConfig:
        """The fence's deadline (lease duration - margin) must leave room for renewals, and the
        margin must cover how early a standby may date our last renewal (its retry period)."""
        margin = self.lease_duration / 3 if self.lease_safety_margin is None else self.lease_safety_margin
        if margin <= self.lease_retry_period:
            raise ValueError(f"lease_safety_margin ({margin:g}s) must be more than lease_retry_period "
                             f"({self.lease_retry_period:g}s): raise lease_duration or the margin")
        if self.lease_renew_period >= self.lease_duration - margin:
            raise ValueError(f"lease_renew_period ({self.lease_renew_period:g}s) must be less than lease_duration "
                             f"minus the safety margin ({self.lease_duration - margin:g}s)")
        return self

    def listen_address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host or "0.0.0.0", int(port)  # an explicit ":9090" means all interfaces


def load_config(cli: dict[str, Any], environ: dict[str, str] | None = None) -> AgentConfig:
    """Merge flags (None = not given), environment and config file; raises ValueError with a
    readable message on bad settings."""
    environ = dict(os.environ) if environ is None else environ
    merged: dict[str, Any] = {}
    config_file = cli.get("config") or environ.get(ENV_PREFIX + "CONFIG")
    if config_file:
        try:
            with Path(config_file).open("rb") as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise ValueError(f"cannot read config file {config_file}: {exc.strerror}") from None
        text, problems = decode_text(raw, str(config_file))
        docs, more = load_documents(text, str(config_file)) if text is not None else ([], [])
        problems += [d for d in more if d.severity == "error"]
        if problems:
            raise ValueError(f"cannot read config file: {problems[0].render()}")
        data = docs[0].data if docs else {}
        if not isinstance(data, dict) or len(docs) > 1:
            raise ValueError(f"config file {config_file} must be a mapping of settings")
        merged.update({k.replace("-", "_"): v for k, v in data.items()})
    for name in AgentConfig.model_fields:
        if env_name(name) in environ:
            merged[name] = environ[env_name(name)]
    for name, value in cli.items():
        if name in AgentConfig.model_fields and value is not None:
            merged[name] = value
    try:
        return AgentConfig.model_validate(merged)
    except ValidationError as exc:
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"invalid agent settings: {detail}") from None


def load_policy(path: Path) -> AdminPolicy:
    """The admin's policy file (see syncer.models.policy); raises ValueError naming the file, line
    and field of the first problem."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the policy file {path}: {exc.strerror}") from None
    text, problems = decode_text(raw, str(path))
    docs, more = load_documents(text, str(path)) if text is not None else ([], [])
    problems += [d for d in more if d.severity == "error"]
    if not problems and len(docs) > 1:
        raise ValueError(f"{path}: expected one YAML document (the policy), got {len(docs)}")
    model = None
    if not problems and docs:
        model, problems = validate_document(AdminPolicy, docs[0])
        problems = [d for d in problems if d.severity == "error"]
    if problems:
        raise ValueError(f"invalid policy: {problems[0].render().splitlines()[0]}")
    return model or AdminPolicy()


def read_secret(path: Path | None) -> str | None:
    """A token or secret from a file (e.g. a mounted Secret), stripped; None when not configured."""
    if path is None:
        return None
    return path.read_text().strip() or None
