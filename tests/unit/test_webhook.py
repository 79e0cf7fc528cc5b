"""Push webhook verification: GitHub HMAC signatures, GitLab tokens, generic deliveries, limits."""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import urlencode

import pytest

from syncer.source.webhook import (
    MAX_BODY_BYTES,
    MAX_DELIVERY_ID,
    PushEvent,
    ReplayGuard,
    WebhookRejected,
    delivery_id,
    verify,
)
from tests.doubles import Clock

SECRET = "s3cret-webhook"
SHA = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
PUSH = json.dumps({"ref": "refs/heads/main", "before": "0" * 40, "after": SHA, "repository": {"name": "r"}}).encode()


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github(body: bytes = PUSH, event: str = "push", signature: str | None = None) -> dict[str, str]:
    headers = {"X-GitHub-Event": event, "Content-Type": "application/json"}
    headers["X-Hub-Signature-256"] = sign(body) if signature is None else signature
    return headers


def rejected(headers: dict[str, str], body: bytes, secret: str = SECRET) -> str:
    with pytest.raises(WebhookRejected) as err:
        verify(headers, body, secret)
    assert str(err.value) == err.value.reason
    return err.value.reason


def test_github_push_with_a_valid_signature() -> None:
    assert verify(github(), PUSH, SECRET) == PushEvent("github", "refs/heads/main", SHA)


def test_github_headers_are_case_insensitive() -> None:
    headers = {k.lower(): v for k, v in github().items()}
    assert verify(headers, PUSH, SECRET).after == SHA
    headers = {k.upper(): v for k, v in github().items()}
    assert verify(headers, PUSH, SECRET).ref == "refs/heads/main"


@pytest.mark.parametrize(
    "signature",
    [
        sign(PUSH, "another secret"),
        sign(PUSH + b" "),
        sign(PUSH).replace("sha256=", "sha1="),
        sign(PUSH).removeprefix("sha256="),
        "sha256=" + "0" * 64,
        "sha256=zzzz",
        "sha256=\u00e9\u00e9",  # non-ASCII must be rejected, not crash compare_digest
    ],
)
def test_github_bad_signature_is_rejected(signature: str) -> None:
    assert "signature" in rejected(github(signature=signature), PUSH)


def test_github_missing_signature_is_rejected() -> None:
    headers = github()
    del headers["X-Hub-Signature-256"]
    assert "missing" in rejected(headers, PUSH)
    assert "missing" in rejected({**headers, "X-Hub-Signature-256": ""}, PUSH)


def test_github_signature_of_a_tampered_body_is_rejected() -> None:
    tampered = PUSH.replace(SHA.encode(), b"f" * 40)
    rejected(github(signature=sign(PUSH)), tampered)


def test_github_ping_is_accepted_without_a_ref() -> None:
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    assert verify(github(body, event="ping"), body, SECRET) == PushEvent("github", None, None)


def test_github_ping_still_needs_the_signature() -> None:
    body = b'{"zen": "x"}'
    rejected(github(body, event="ping", signature=sign(body, "nope")), body)


def test_github_form_encoded_payload() -> None:
    body = urlencode({"payload": PUSH.decode()}).encode()
    headers = github(body)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    assert verify(headers, body, SECRET) == PushEvent("github", "refs/heads/main", SHA)


def test_github_non_json_body_is_rejected() -> None:
    body = b"not json"
    assert "JSON" in rejected(github(body), body)


def test_github_tag_push_and_odd_fields() -> None:
    body = json.dumps({"ref": "refs/tags/v1", "after": SHA}).encode()
    assert verify(github(body), body, SECRET) == PushEvent("github", "refs/tags/v1", SHA)
    body = json.dumps({"ref": 7, "after": None}).encode()
    assert verify(github(body), body, SECRET) == PushEvent("github", None, None)
    body = b"[1, 2]"
    assert verify(github(body), body, SECRET) == PushEvent("github", None, None)


def test_gitlab_token() -> None:
    body = json.dumps({"object_kind": "push", "ref": "refs/heads/main", "after": SHA}).encode()
    headers = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET}
    assert verify(headers, body, SECRET) == PushEvent("gitlab", "refs/heads/main", SHA)
    assert verify({"x-gitlab-token": SECRET}, body, SECRET).provider == "gitlab"


@pytest.mark.parametrize("token", ["wrong", SECRET + "x", SECRET[:-1], "", "\u00e9"])
def test_gitlab_wrong_token_is_rejected(token: str) -> None:
    body = b'{"ref": "refs/heads/main"}'
    rejected({"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": token}, body)


def test_gitlab_missing_token_is_rejected() -> None:
    assert "missing" in rejected({"X-Gitlab-Event": "Push Hook"}, b'{"ref": "refs/heads/main"}')


def test_gitlab_non_json_body_is_rejected() -> None:
    rejected({"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET}, b"<html>")


def test_oversize_body_is_rejected_even_when_signed() -> None:
    body = b"{" + b" " * MAX_BODY_BYTES + b"}"
    assert "large" in rejected(github(body), body)
    assert "large" in rejected({"X-Gitlab-Token": SECRET}, body)


def test_body_of_exactly_the_limit_is_accepted() -> None:
    payload = json.dumps({"ref": "refs/heads/main", "after": SHA}).encode()
    body = payload + b" " * (MAX_BODY_BYTES - len(payload))
    assert len(body) == MAX_BODY_BYTES
    assert verify(github(body), body, SECRET).ref == "refs/heads/main"


def test_generic_with_a_hub_signature_or_bearer_token() -> None:
    assert verify({"X-Hub-Signature-256": sign(PUSH)}, PUSH, SECRET) == PushEvent("generic", "refs/heads/main", SHA)
    assert verify({"Authorization": f"Bearer {SECRET}"}, b"", SECRET) == PushEvent("generic", None, None)
    assert verify({"authorization": f"bearer {SECRET}"}, b"plain text, not JSON", SECRET).ref is None


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Content-Type": "application/json"},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {SECRET}"},
        {"X-Hub-Signature-256": sign(PUSH, "wrong")},
    ],
)
def test_generic_without_valid_credentials_is_rejected(headers: dict[str, str]) -> None:
    rejected(headers, PUSH)


def test_an_empty_secret_rejects_everything() -> None:
    assert "secret" in rejected({"X-Gitlab-Token": ""}, b"{}", secret="")
    assert "secret" in rejected(github(PUSH), PUSH, secret="")


# -- delivery ids and replays ----------------------------------------------------------------------------


def test_delivery_ids_per_provider() -> None:
    gh = verify({**github(), "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}, PUSH, SECRET)
    assert gh.delivery == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    ping = verify({**github(b"{}", event="ping"), "X-GitHub-Delivery": "p-1"}, b"{}", SECRET)
    assert ping.delivery == "p-1"
    gl = {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": SECRET}
    assert verify({**gl, "X-Gitlab-Event-UUID": "ev-1"}, PUSH, SECRET).delivery == "ev-1"
    # GitLab's Idempotency-Key stays the same across its retries: preferred
    assert verify({**gl, "X-Gitlab-Event-UUID": "ev-1", "Idempotency-Key": "ik-1"}, PUSH, SECRET).delivery == "ik-1"
    generic = {"Authorization": f"Bearer {SECRET}"}
    assert verify({**generic, "X-Gitea-Delivery": "g-1"}, PUSH, SECRET).delivery == "g-1"
    assert verify({**generic, "X-Delivery-Id": "d-1"}, PUSH, SECRET).delivery == "d-1"
    assert verify(generic, PUSH, SECRET).delivery is None
    assert verify(github(), PUSH, SECRET).delivery is None


@pytest.mark.parametrize("value", ["", "   ", "x" * (MAX_DELIVERY_ID + 1), "a\nb", "a\x00b"])
def test_implausible_delivery_ids_are_not_ids(value: str) -> None:
    assert delivery_id("github", {"X-GitHub-Delivery": value}) is None


def event(delivery: str | None, provider: str = "github") -> PushEvent:
    return PushEvent(provider, "refs/heads/main", SHA, delivery)  # type: ignore[arg-type]


def test_replay_within_the_window_is_not_a_first_time() -> None:
    clock = Clock()
    guard = ReplayGuard(window=600, clock=clock)
    assert guard.first_time(event("d-1"))
    assert not guard.first_time(event("d-1"))
    clock.now += 599
    assert not guard.first_time(event("d-1"))
    assert guard.first_time(event("d-2"))
    assert guard.first_time(event("d-1", provider="gitlab"))  # ids are per provider


def test_replay_after_the_window_is_a_first_time_again() -> None:
    clock = Clock()
    guard = ReplayGuard(window=600, clock=clock)
    assert guard.first_time(event("d-1"))
    clock.now += 600
    assert guard.first_time(event("d-1"))


def test_events_without_an_id_are_never_duplicates() -> None:
    guard = ReplayGuard(window=600, clock=Clock())
    assert all(guard.first_time(event(None)) for _ in range(3))
    assert all(ReplayGuard(window=0).first_time(event("d")) for _ in range(3))  # window 0: off


def test_the_guard_remembers_a_bounded_number_of_ids() -> None:
    guard = ReplayGuard(window=600, capacity=100, clock=Clock())
    for n in range(1000):
        assert guard.first_time(event(f"d-{n}"))
    assert len(guard._seen) <= 100
    assert not guard.first_time(event("d-999"))  # the newest are kept
    assert guard.first_time(event("d-0"))  # the oldest were forgotten
