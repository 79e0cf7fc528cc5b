"""The web view's HTML, rendered on the server from `syncer.observe.view` data (pure: no I/O).

Every string that may come from Git (unit names, namespaces, messages, reasons, object names) goes
through `html.escape` (`_e`), in text and in attributes alike, and every link's query through
`urlencode`: a unit named ``<script>`` shows as text. The standard library's escaping and a few
small templates, rather than a template engine: the pages are few and small, and a dependency
would buy nothing the tests do not already check (`tests/unit/test_webview.py`)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlencode

from syncer.observe.view import STATES, UnitActivity, UnitRow, UnitView, ordered

FILTERS = ("namespace", "repository", "state", "q")
MAX_ROWS = 500  # rows on one overview (attention first); filters reach the rest


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _count(n: int | None, of: int | None = None) -> str:
    if n is None:
        return '<span class="muted" title="not known yet">-</span>'
    return f"{n}/{of}" if of is not None else str(n)


def _state(reason: str, ok: bool, warn: bool = False) -> str:
    cls = "ok" if ok else ("warn" if warn else "bad")
    return f'<span class="state {cls}">{_e(reason)}</span>'


def unit_href(unit: str) -> str:
    return "/ui/unit?" + urlencode({"id": unit})


def page(title: str, body: str, *, stream: str = "", notice: str = "") -> str:
    """A whole page: landmarks (banner, navigation, main, contentinfo), a skip link, the script
    that follows `stream` (an `/ui/events` URL) when there is one."""
    data = f' data-stream="{_e(stream)}"' if stream else ""
    note = f'<p class="notice" role="status">{_e(notice)}</p>' if notice else ""
    live = '<span id="live" class="muted" aria-live="polite">not live (reload to refresh)</span>' if stream else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{_e(title)} - flower-syncer</title><link rel="stylesheet" href="/ui/app.css"></head>'
        f'<body{data}><a class="skip" href="#main">Skip to content</a>'
        '<header><h1>flower-syncer</h1><nav aria-label="Main"><a href="/ui/">All units</a></nav>'
        f"{live}</header>"
        f'<main id="main" tabindex="-1">{note}{body}</main>'
        '<footer class="muted">Read-only view of the agent. Actions need the API token.</footer>'
        '<script src="/ui/app.js"></script></body></html>\n'
    )


# -- the overview -----------------------------------------------------------------------------------

def row_html(r: UnitRow) -> str:
    """One `<tr>` of the overview; also what the event stream sends when the row changes."""
    healthy_warn = r.healthy in _WARN
    synced_warn = r.synced in _WARN
    why = f'<div class="why">{_e(r.message)}</div>' if r.message and not r.ready else ""
    runs = (_count(None) if r.runs_running is None
            else f"{r.runs_running} running" + (f', <span class="state bad">{r.runs_failed} failed</span>'
                                                 if r.runs_failed else ""))
    drift = f'<span class="state bad">{r.drift}</span>' if r.drift else "0"
    attention = ' class="attention"' if r.attention else ""
    return (
        f'<tr data-unit="{_e(r.unit)}"{attention}>'
        f'<td><a href="{_e(unit_href(r.unit))}">{_e(r.name)}</a><div class="why">{_e(r.kind)}</div></td>'
        f"<td>{_e(r.namespace)}</td>"
        f'<td data-k="synced">{_state(r.synced, r.synced_ok, synced_warn)}{why}</td>'
        f'<td data-k="healthy">{_state(r.healthy, r.healthy_ok, healthy_warn)}</td>'
        f"<td><code>{_e(r.revision) or '-'}</code></td>"
        f'<td class="n">{_count(r.pools_ready, r.pools)}</td>'
        f'<td class="n">{_count(r.supernodes_online, r.supernodes_expected)}</td>'
        f"<td>{runs}</td>"
        f'<td class="n">{_count(r.gpus)}</td>'
        f'<td class="n" data-k="drift">{drift}</td></tr>'
    )


def rows_html(rows: Sequence[UnitRow]) -> str:
    """The overview's rows (the first ``MAX_ROWS``)."""
    if not rows:
        return '<tr><td colspan="10" class="muted">No unit matches.</td></tr>'
    return "".join(row_html(r) for r in rows[:MAX_ROWS])


def summary(rows: Sequence[UnitRow], total: int) -> str:
    attention = sum(1 for r in rows if r.attention)
    shown = f"{len(rows)} of {total} units" if len(rows) != total else f"{total} units"
    more = f" (the first {MAX_ROWS} shown: filter to see the others)" if len(rows) > MAX_ROWS else ""
    return f"{shown}; {attention} need{'s' if attention == 1 else ''} attention{more}"


def select(rows: Iterable[UnitRow], query: Mapping[str, str]) -> list[UnitRow]:
    """The rows the filters keep, those that need attention first."""
    return ordered([r for r in rows if r.matches(query)])


def stream_url(path: str, query: Mapping[str, str]) -> str:
    return "/ui/events?" + urlencode({"view": path, **{k: v for k, v in query.items() if v}})


def overview(all_rows: Sequence[UnitRow], query: Mapping[str, str], *, notice: str = "") -> str:
    rows = select(all_rows, query)
    return page("Units", overview_body(all_rows, rows, query), stream=stream_url("overview", query), notice=notice)


def _options(name: str, values: Iterable[str], chosen: str, label: str) -> str:
    opts = "".join(f'<option value="{_e(v)}"{" selected" if v == chosen else ""}>{_e(v)}</option>'
                   for v in sorted(set(values)))
    return (f'<label for="f-{name}">{label}<select id="f-{name}" name="{name}">'
            f'<option value="">all</option>{opts}</select></label>')


def overview_body(all_rows: Sequence[UnitRow], rows: Sequence[UnitRow], query: Mapping[str, str]) -> str:
    filters = (
        '<form class="filters" method="get" action="/ui/" role="search" aria-label="Filter units">'
        + _options("namespace", (r.namespace for r in all_rows), query.get("namespace", ""), "Namespace")
        + _options("repository", (r.repository for r in all_rows), query.get("repository", ""), "Repository")
        + _options("state", STATES, query.get("state", ""), "State")
        + f'<label for="f-q">Name contains<input id="f-q" name="q" value="{_e(query.get("q", ""))}"></label>'
        + '<button type="submit">Filter</button> <a href="/ui/">Clear</a></form>'
    )
    return (
        f'<h2 id="units-title">Units</h2>{filters}'
        f'<p id="summary" role="status">{_e(summary(rows, len(all_rows)))}</p>'
        '<table aria-labelledby="units-title"><thead><tr>'
        '<th scope="col">Unit</th><th scope="col">Namespace</th><th scope="col">Synced</th>'
        '<th scope="col">Healthy</th><th scope="col">Revision</th><th scope="col">Pools ready</th>'
        '<th scope="col">SuperNodes connected</th><th scope="col">Runs</th><th scope="col">GPUs allocated</th>'
        '<th scope="col">Drift</th></tr></thead>'
        f'<tbody id="units">{rows_html(rows)}</tbody></table>'
    )


# -- a unit's page ----------------------------------------------------------------------------------

def _table(caption: str, heads: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    """A table whose cells are HTML already escaped by the caller."""
    if not rows:
        return f"<h2>{_e(caption)}</h2><p class=\"muted\">{_e(empty)}</p>"
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h2>{_e(caption)}</h2><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_WARN = ("Pending", "Suspended", "Progressing", "Unknown")


def _why(message: str) -> str:
    return f' <span class="why">{_e(message)}</span>' if message else ""


def _drift(now: bool, corrected: bool) -> str:
    if now:
        return '<span class="state bad">drifted</span>'
    return '<span class="state warn">put back by the last sync</span>' if corrected else "no"


def detail_html(v: UnitView) -> str:
    """The part of a unit's page the event stream replaces when it changes."""
    r = v.row
    conds = "".join(
        f"<dt>{_e(t)}</dt><dd>{_state(reason, ok, reason in _WARN)}{_why(msg)}</dd>"
        for t, ok, reason, msg in v.conditions)
    facts = (f"<dt>Revision</dt><dd><code>{_e(r.revision) or '-'}</code></dd>"
             f"<dt>Last sync</dt><dd>{_e(v.last_sync or '-')}</dd>"
             f"<dt>Drift</dt><dd data-k=\"drift\">{r.drift} object{'s' if r.drift != 1 else ''}</dd>"
             f"<dt>GPUs allocated</dt><dd>{_count(r.gpus)}</dd>")
    errors = ("<h2>Errors</h2><ul>" + "".join(f"<li>{_e(x)}</li>" for x in v.errors) + "</ul>") if v.errors else ""
    pools = _table("Pools", ("Pool", "Workload", "Ready", "State", "SuperNodes connected", "GPUs"), [
        (_e(p.pool), f"{_e(p.kind)} {_e(p.name)}", f"{p.ready}/{p.desired}",
         _state("Ready" if p.healthy else (p.reason or "Not ready"), p.healthy),
         _count(p.online, p.expected), str(p.gpus)) for p in v.pools], "No status round yet, or no workloads.")
    dialing = _table("SuperNodes of other units dialling its SuperLink", ("Unit", "Pool", "Connected"), [
        (f'<a href="{_e(unit_href(d.unit))}">{_e(d.unit)}</a>', _e(d.pool), f"{d.online}/{d.expected}")
        for d in v.dialing], "None.") if r.kind == "federation" else ""
    runs = ""
    if r.kind == "federation":
        error = f': <span class="state bad">{_e(v.superlink_error)}</span>' if v.superlink_error else ""
        link = (f"<p>SuperLink <code>{_e(v.superlink)}</code>{error}</p>"
                if v.superlink else '<p class="muted">The SuperLink was not asked (Flower health is off, '
                'or no round yet).</p>')
        counts = ", ".join(f"{n} {_e(s)}" for s, n in v.runs.items() if n) or "none"
        failure = f'<p>Last failure: <span class="state bad">{_e(v.last_failure)}</span></p>' if v.last_failure else ""
        runs = f"<h2>SuperLink and runs</h2>{link}<p>Runs: {counts}</p>{failure}"
    objects = _table("Objects", ("Object", "Last sync", "Drift", "Detail"), [
        (f"<code>{_e(o.ref)}</code>", _e(o.action or "-"),
         _drift(o.drift, o.corrected), _e(o.detail)) for o in v.objects],
        "No objects recorded yet.")
    history = _table("Last revisions", ("Revision", "Applied at", "By", "Changes"), [
        (f"<code>{_e(h.revision)}</code>", _e(h.applied_at), _e(h.agent), _e(h.summary)) for h in v.history],
        "No revision applied yet.")
    return f"<dl>{conds}{facts}</dl>{errors}{pools}{dialing}{runs}{objects}{history}"


def activity_html(a: UnitActivity) -> str:
    """What the next sync would change (each object's diff, as `flower-syncer diff` prints it:
    Secret values masked, encrypted files' plaintext redacted) and the unit's Events, newest first.
    Computed for this page request only: the event stream never sends it (reload to refresh)."""
    when = f'<p class="muted">As of {_e(a.at)}; reload the page to compute it again.</p>' if a.at else ""
    plan = '<p>Nothing: the cluster is as Git says.</p>' if a.planned and not a.changes else ""
    if a.changes:
        lead = ("<p>The unit is suspended: this is what resuming it would change.</p>" if a.suspended
                else "<p>The next sync would change:</p>")
        items = []
        for c in a.changes:
            why = f' <span class="why">{_e(c.message)}</span>' if c.message else ""
            cut = '<p class="muted">(cut: <code>flower-syncer diff</code> shows all of it)</p>' if c.cut else ""
            diff = (f'<pre class="diff" tabindex="0" aria-label="diff of {_e(c.ref)}"><code>{_e(c.diff)}</code></pre>'
                    if c.diff else "")
            items.append(f"<li><code>{_e(c.ref)}</code>: {_e(c.action)}{why}{diff}{cut}</li>")
        more = f'<p class="muted">And {a.more_changes} more objects.</p>' if a.more_changes else ""
        plan = f'{lead}<ul class="changes">{"".join(items)}</ul>{more}'
    if a.plan_error:
        plan += f'<p class="state bad">{_e(a.plan_error)}</p>'
    events = _table("Events", ("Last seen", "Type", "Reason", "Object", "Message", "Count"), [
        (_e(ev.at), _state(ev.type, ev.type == "Normal"), _e(ev.reason), f"<code>{_e(ev.regarding)}</code>",
         _e(ev.note), str(ev.count)) for ev in a.events], a.events_error or "No Events in the last hour.")
    if a.events_error and a.events:
        events += f'<p class="state bad">{_e(a.events_error)}</p>'
    return (f'<section id="activity" aria-labelledby="next-title"><h2 id="next-title">Next sync</h2>{when}'
            f"{plan}{events}</section>")


def actions_html(unit: str, suspended: bool, enabled: bool, held: bool = False) -> str:
    """Resync and suspend/resume: forms that POST the API token (never a cookie), so another site
    cannot make a browser act for its user."""
    if not enabled:
        return ('<h2>Actions</h2><p class="muted">Actions are off: the agent has no API token '
                "(--api-token-file).</p>")

    def form(action: str, ident: str, label: str, extra: str = "") -> str:
        return (f'<form class="action" method="post" action="{action}">'
                f'<input type="hidden" name="id" value="{_e(unit)}">{extra}'
                f'<label for="t-{ident}">API token<input id="t-{ident}" name="token" type="password" '
                'autocomplete="off" required></label>'
                f'<button type="submit">{_e(label)}</button></form>')

    toggle = ("resume", "Resume") if suspended else ("suspend", "Suspend")
    release = form("/ui/release-hold", "release", "Release the hold: restart now") if held else ""
    return ("<h2>Actions</h2>" + form("/ui/resync", "resync", "Resync now")
            + form("/ui/suspend", toggle[0], toggle[1], f'<input type="hidden" name="suspend" value="{toggle[0]}">')
            + release)


def unit_page(v: UnitView, *, actions: bool, notice: str = "", activity: UnitActivity | None = None) -> str:
    r = v.row
    body = (f'<h2 id="unit-title">{_e(r.kind)} <code>{_e(r.namespace)}/{_e(r.name)}</code></h2>'
            f'<section id="detail" aria-labelledby="unit-title">{detail_html(v)}</section>'
            + (activity_html(activity) if activity is not None else "")
            + actions_html(r.unit, r.suspended, actions, held=r.synced == "Held"))
    return page(r.unit, body, stream=stream_url("unit", {"id": r.unit}), notice=notice)


def message_page(title: str, text: str, *, back: str = "/ui/") -> str:
    return page(title, f'<h2>{_e(title)}</h2><p>{_e(text)}</p><p><a href="{_e(back)}">Back</a></p>')
