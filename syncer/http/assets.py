"""The web view's stylesheet and script, served from the agent itself (`/ui/app.css`,
`/ui/app.js`) so the pages need no inline code and the Content-Security-Policy can forbid it.
Plain CSS and a few lines of vanilla JavaScript: no build step, no framework. Without JavaScript
the pages still work (a reload shows the agent's state now); with it, an `EventSource` on
`/ui/events` swaps in the rows and sections the server rendered (and escaped)."""

from __future__ import annotations

CSS = """\
:root { color-scheme: light; --bad: #a4000f; --bad-bg: #fde8ea; --ok: #0b6b2b; --ok-bg: #e6f4ea;
  --warn: #7a4b00; --warn-bg: #fff4d6; --muted: #4a4a4a; --line: #c8c8c8; --link: #0645ad; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #111;
  background: #fff; }
header, main, footer { padding: 0.6rem 1.2rem; }
header { border-bottom: 1px solid var(--line); display: flex; gap: 1.5rem; align-items: baseline;
  flex-wrap: wrap; }
header h1 { font-size: 1.15rem; margin: 0; }
nav a, main a { color: var(--link); }
a:focus-visible, button:focus-visible, input:focus-visible, select:focus-visible {
  outline: 3px solid #1a5fb4; outline-offset: 2px; }
.skip { position: absolute; left: -999px; }
.skip:focus { left: 0.5rem; top: 0.5rem; background: #fff; padding: 0.3rem; z-index: 1; }
h2 { font-size: 1.05rem; margin: 1.2rem 0 0.4rem; }
table { border-collapse: collapse; width: 100%; margin: 0.3rem 0 1rem; }
caption { text-align: left; font-weight: 600; padding: 0.2rem 0; }
th, td { border-bottom: 1px solid var(--line); padding: 0.3rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f2f2f2; font-weight: 600; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.state { display: inline-block; padding: 0 0.4rem; border-radius: 3px; font-weight: 600; }
.state.ok { color: var(--ok); background: var(--ok-bg); }
.state.bad { color: var(--bad); background: var(--bad-bg); }
.state.warn { color: var(--warn); background: var(--warn-bg); }
tr.attention td:first-child { border-left: 4px solid var(--bad); }
.why { color: var(--muted); font-size: 0.9em; }
.muted { color: var(--muted); }
form.filters { display: flex; gap: 0.8rem; flex-wrap: wrap; align-items: end; margin: 0.5rem 0; }
form.filters label, form.action label { display: flex; flex-direction: column; font-size: 0.9em; }
input, select, button { font: inherit; padding: 0.2rem 0.4rem; }
button { cursor: pointer; }
form.action { display: inline-flex; gap: 0.5rem; align-items: end; margin: 0 1rem 0.5rem 0; }
.notice { padding: 0.5rem 0.8rem; border: 1px solid var(--line); background: #f7f7f7; }
#live { font-size: 0.85em; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dt { font-weight: 600; }
dd { margin: 0; }
pre.diff { background: #f7f7f7; border: 1px solid var(--line); padding: 0.4rem; overflow: auto; max-height: 24rem;
  font-size: 0.85em; }
ul.changes { padding-left: 1.2rem; }
"""

JS = """\
(function () {
  "use strict";
  var root = document.querySelector("[data-stream]");
  var live = document.getElementById("live");
  if (!root || !window.EventSource) { return; }
  function connect() {
    var es = new EventSource(root.getAttribute("data-stream"));
    es.onopen = function () { if (live) { live.textContent = "live"; } };
    es.onerror = function () {
      if (live) { live.textContent = "reconnecting"; }
      // a refused stream (503: too many open pages) is closed for good by the browser: try again
      if (es.readyState === EventSource.CLOSED) { setTimeout(connect, 5000); }
    };
    es.addEventListener("rows", function (e) {
      var d = JSON.parse(e.data);
      var body = document.getElementById("units");
      if (!body) { return; }
      if (typeof d.tbody === "string") { body.innerHTML = d.tbody; }
      Object.keys(d.rows || {}).forEach(function (id) {
        var rows = body.querySelectorAll("tr[data-unit]");
        for (var i = 0; i < rows.length; i++) {
          if (rows[i].getAttribute("data-unit") === id) { rows[i].outerHTML = d.rows[id]; break; }
        }
      });
      var summary = document.getElementById("summary");
      if (summary && typeof d.summary === "string") { summary.textContent = d.summary; }
    });
    es.addEventListener("unit", function (e) {
      var d = JSON.parse(e.data);
      var detail = document.getElementById("detail");
      if (detail && typeof d.html === "string") { detail.innerHTML = d.html; }
    });
  }
  connect();
}());
"""
