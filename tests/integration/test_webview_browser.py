"""The web view in a real browser (issue 42): Debian's Chromium, headless, driven by Playwright,
against the agent (`flower-syncer run`) on the local control plane. The overview lists the units
with their states and follows a typo commit and its fix without a reload; a drift of a suspended
unit shows on its page, with the next sync's diff and the unit's Events, and goes when it is
resumed and healed; a SOPS Secret's value never reaches
a page or the event stream; a browser without the token cannot resync; a Git-sourced string that
is markup shows as text. Takes the screenshots of docs/img/ (webview-overview.png,
webview-federation.png, webview-next-sync.png): into the test's temporary directory, so a test run
leaves the checkout as it was; into docs/img with FLOWER_SYNCER_SCREENSHOTS=docs/img (to refresh
the docs' images).

Needs /usr/bin/chromium (`apt-get install chromium`; tools/env.sh installs it) and the
`playwright` package (dev extras), never `playwright install`: missing, the tests skip, or fail
with CI=true."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import pytest

from syncer.cluster.client import Kube, path_for
from tests.conftest import REPO, KubeCluster, wait_until
from tests.integration.agents import FED, AgentProc, Repos
from tests.sops_cli import SECRET, new_key, sops_encrypt

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.cluster

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PLAIN = "hunter2-very-secret"
MARKUP = "<img src=x onerror=alert(1)><script>alert(2)</script>"
LIVE_SECONDS = 2.0  # a commit shows on an open page within this


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing: tools/env.sh installs it (Debian's chromium, the dev extras)")
    pytest.skip(f"{what} is missing")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover
        _missing("playwright (pip install playwright)")
    if not CHROMIUM.exists():
        _missing("chromium (apt-get install chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1180, "height": 620})
    p = context.new_page()
    dialogs: list[str] = []
    p.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    yield p
    context.close()
    assert dialogs == [], f"a script from Git ran in the page: {dialogs}"


def fed(replicas: str | int = 2) -> str:
    return FED.format(image="flwr/supernode:1.25.0", replicas=replicas)


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def row(page: Page, unit: str) -> Any:
    return page.locator(f'tr[data-unit="{unit}"]')


def events(agent: AgentProc, query: dict[str, str], until: bytes, timeout: float = 10.0) -> bytes:
    """What /ui/events sends, until `until` appears (or the timeout)."""
    url = urlsplit(agent.url)
    with socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=timeout) as sock:
        sock.sendall(f"GET /ui/events?{urlencode(query)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        deadline = time.monotonic() + timeout
        while until not in data and time.monotonic() < deadline:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
        return data


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the screenshots go: FLOWER_SYNCER_SCREENSHOTS (relative to the repository), else the
    test's own temporary directory."""
    where = os.environ.get("FLOWER_SYNCER_SCREENSHOTS")
    path = REPO / where if where else tmp_path / "img"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_overview_follows_a_typo_and_its_fix_without_a_reload(
        repos: Repos, start_agent: Callable[..., AgentProc], namespace: str, page: Page, shots: Path) -> None:
    repos.commit({"federations/lab.yaml": fed().replace("name: fed", "name: lab")}, "a second federation")
    agent = start_agent(str(repos.bare))
    unit = f"federation/{namespace}/fed"
    page.goto(agent.url + "/ui/")
    for name in ("fed", "lab"):
        wait_until(f"{name} Synced on the overview",
                   lambda n=name: "Synced" in row(page, f"federation/{namespace}/{n}").inner_text(), log=agent.log)
    wait_until("the page is live", lambda: page.inner_text("#live") == "live")
    page.evaluate("window.notReloaded = true")

    try:  # the screenshot once the pods are ready (a status round: every 10 s), if they get ready
        for name in ("fed", "lab"):
            expect(row(page, f"federation/{namespace}/{name}").locator("td").nth(3)).to_have_text(
                "Healthy", timeout=30000)
    except AssertionError:
        pass  # a busy cluster: the screenshot shows them progressing
    page.screenshot(path=str(shots / "webview-overview.png"))

    start = time.monotonic()
    repos.commit({"federations/fed.yaml": fed(MARKUP)}, "typo")
    expect(row(page, unit)).to_contain_text("ConfigError", timeout=15000)
    red = time.monotonic() - start
    text = row(page, unit).inner_text()
    # the Git-sourced value (the diagnostic shortens it), as text: the page fixture fails on any dialog
    assert "<img src=x onerror=alert(1)><script>" in text
    assert page.evaluate("window.notReloaded") is True
    assert row(page, unit).get_attribute("class") == "attention"

    start = time.monotonic()
    repos.commit({"federations/fed.yaml": fed(2)}, "fix")
    expect(row(page, unit).locator('[data-k="synced"] .state')).to_have_text("Synced", timeout=15000)
    green = time.monotonic() - start
    assert page.evaluate("window.notReloaded") is True
    assert red < LIVE_SECONDS and green < LIVE_SECONDS, f"red after {red:.2f}s, green after {green:.2f}s"



def test_a_page_refused_a_stream_goes_live_once_other_pages_close(
        repos: Repos, start_agent: Callable[..., AgentProc], page: Page) -> None:
    """Over the streams one address may hold (4), a page's stream is refused (503), which a
    browser never retries on its own: the page tries again, and gets one as soon as another page
    closes (its slot is freed at the stream's next look, not its next heartbeat 15 s later)."""
    agent = start_agent(str(repos.bare))
    url = urlsplit(agent.url)
    held = [socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=10) for _ in range(4)]
    try:
        for sock in held:
            sock.sendall(b"GET /ui/events?view=overview HTTP/1.1\r\nHost: x\r\n\r\n")
            head = b""
            while b"\r\n" not in head and (chunk := sock.recv(64)):
                head += chunk
            assert b" 200 " in head.split(b"\r\n")[0], head  # each holds one of the address's slots
        page.goto(agent.url + "/ui/")
        wait_until("the page's stream refused", lambda: page.inner_text("#live") == "reconnecting", log=agent.log)
        assert "too many web view streams" in agent.log.read_text()
    finally:
        for sock in held:
            sock.close()
    wait_until("the page live again", lambda: page.inner_text("#live") == "live", timeout=15, log=agent.log)


def test_a_drift_shows_on_the_federation_page_until_healed_and_actions_need_the_token(
        repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster, namespace: str,
        page: Page, shots: Path) -> None:
    agent = start_agent(str(repos.bare))
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    unit = f"federation/{namespace}/fed"
    page.goto(agent.url + "/ui/unit?" + urlencode({"id": unit}))
    wait_until("objects listed", lambda: "fed-supernode-a" in page.inner_text("#detail"), log=agent.log)

    # a browser without the token: the form is answered 401 and nothing is resynced
    page.fill("#t-resync", "not-the-token")
    with page.expect_navigation():
        page.click("text=Resync now")
    assert "missing or invalid bearer token" in page.content()
    assert "web view action refused" in agent.log.read_text()

    page.goto(agent.url + "/ui/unit?" + urlencode({"id": unit}))
    page.fill("#t-suspend", agent.token)
    with page.expect_navigation():
        page.click("button:text('Suspend')")
    assert "Suspended." in page.inner_text("main")
    wait_until("suspended", lambda: "Suspended" in page.inner_text("#detail"), log=agent.log)

    kube.request("PATCH", path_for("StatefulSet", namespace, "fed-supernode-a"), body={"spec": {"replicas": 5}},
                 content_type="application/merge-patch+json", query={"fieldManager": "kubectl-scale"})
    # the drift of a suspended unit is measured at the next status round (every 10 s)
    wait_until("the drift shows on the open page", lambda: "drifted" in page.inner_text("#detail"),
               timeout=40, log=agent.log)
    assert "StatefulSet" in page.locator("#detail tr", has_text="drifted").first.inner_text()
    # down to the objects (the image stays small: < 150 KB)
    bottom = page.locator("#detail table", has_text="drifted").bounding_box() or {"y": 900.0, "height": 100.0}
    page.screenshot(path=str(shots / "webview-federation.png"), full_page=True,
                    clip={"x": 0, "y": 0, "width": 1180, "height": bottom["y"] + bottom["height"] + 12})

    # the next sync's diff and the unit's Events: computed when the page is requested (a reload)
    def activity(want: tuple[str, ...]) -> bool:
        page.reload()
        text = page.inner_text("#activity")
        return all(w in text for w in want)

    wait_until("the page shows what resuming would change, and the Suspended Event",
               lambda: activity((f"StatefulSet/{namespace}/fed-supernode-a", "replicas: 5", "replicas: 2",
                                 "Suspended")), timeout=20, interval=0.5, log=agent.log)
    diff = page.locator("#activity li", has_text="fed-supernode-a").inner_text()
    assert "-  replicas: 5" in diff and "+  replicas: 2" in diff, diff
    assert "resuming it would change" in page.inner_text("#activity")
    assert page.locator("#activity tr", has_text="Suspended").count() >= 1
    page.locator("#activity").screenshot(path=str(shots / "webview-next-sync.png"))

    page.fill("#t-resume", agent.token)
    with page.expect_navigation():
        page.click("button:text('Resume')")
    assert "Resumed." in page.inner_text("main")
    wait_until("healed: the drift is gone from the page", lambda: "drifted" not in page.inner_text("#detail"),
               timeout=30, log=agent.log)
    wait_until("nothing left for the next sync, and the Resumed Event", lambda: activity(("Nothing", "Resumed")),
               timeout=20, interval=0.5, log=agent.log)
    assert (kube.get("StatefulSet", namespace, "fed-supernode-a") or {})["spec"]["replicas"] == 2


def test_a_sops_secret_never_reaches_a_page_or_the_event_stream(
        repos: Repos, start_agent: Callable[..., AgentProc], kube_cluster: KubeCluster, namespace: str,
        page: Page, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    pub = new_key(keys / "key.agekey")
    work = tmp_path / "enc"
    work.mkdir()
    values = "tls:\n  enabled: false\nsupernode:\n  env:\n    - name: API_KEY\n      value: api-key-plaintext-42\n"
    repos.commit({"supernodes/edge/values.yaml": sops_encrypt(values, work, pub),
                  "supernodes/edge/secrets.yaml": sops_encrypt(SECRET, work, pub)}, "encrypted")
    agent = start_agent(str(repos.bare), "--decryption-key-file", str(keys))
    kube = Kube.from_kubeconfig(kube_cluster.kubeconfig)
    wait_until("the Secret applied", lambda: kube.get("Secret", namespace, "edge-credentials"), log=agent.log)
    unit = f"supernode/{namespace}/edge"
    page.goto(agent.url + "/ui/unit?" + urlencode({"id": unit}))
    wait_until("its objects listed", lambda: "edge-credentials" in page.inner_text("#detail"), log=agent.log)
    shown = [page.content()]
    page.goto(agent.url + "/ui/")
    wait_until("the release listed", lambda: row(page, unit).count() == 1)
    shown.append(page.content())
    shown.append(events(agent, {"view": "overview"}, b"event: rows").decode())
    shown.append(events(agent, {"view": "unit", "id": unit}, b"event: unit").decode())
    assert "event: unit" in shown[-1] and "edge-credentials" in shown[-1]
    for text in shown:
        for plain in (PLAIN, "api-key-plaintext-42"):
            assert plain not in text
