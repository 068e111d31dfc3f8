"""The status page's HTML: one static document, a little vanilla JavaScript that polls
``status.json`` and redraws; no build step, no dependency, no data in the markup (every value
is set as text, never as HTML)."""

from __future__ import annotations

STATUS_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Meridian status</title>
<style>
  :root { --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --muted: #57606a; --line: #d0d7de; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1f2328; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
  h2 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
  .meta { color: var(--muted); }
  .badge { display: inline-block; padding: 0 .45rem; border-radius: 1rem; font-size: 12px;
           border: 1px solid currentColor; margin-left: .3rem; }
  .ok { color: var(--ok); } .ejected, .failing, .down { color: var(--bad); }
  .cold, .draining, .panic, .degraded { color: var(--warn); }
  table { border-collapse: collapse; width: 100%; max-width: 1100px; table-layout: fixed; }
  th, td { text-align: left; padding: .3rem .6rem; border-bottom: 1px solid var(--line); }
  th { font-weight: 600; color: var(--muted); font-size: 12px; text-transform: uppercase; }
  th:first-child, td:first-child { width: 20%; } th:nth-child(3), td:nth-child(3) { width: 16%; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .bar { background: #ddf4ff; height: .6rem; display: inline-block; vertical-align: middle;
         margin-right: .4rem; }
  #error { color: var(--bad); }
</style>
</head>
<body>
<h1>Meridian <span id="gateway"></span><span id="badges"></span></h1>
<div class="meta"><span id="summary"></span> &middot; updated <span id="updated">never</span>
  (every <span id="interval"></span> s)</div>
<div id="error"></div>
<div id="regions"></div>
<script>
"use strict";
const params = new URLSearchParams(location.search);
const intervalS = Math.max(0.2, Number(params.get("refresh")) || 2);
document.getElementById("interval").textContent = String(intervalS);
let updates = 0;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function ms(value) { return value === null || value === undefined ? "-" : value.toFixed(1) + " ms"; }
function badge(text, cls) { return el("span", text, "badge " + (cls || text)); }

function backendRow(b) {
  const tr = el("tr");
  tr.dataset.backend = b.name;
  tr.dataset.health = b.health;
  tr.append(el("td", b.name), el("td", b.kind));
  const health = el("td");
  health.append(badge(b.health));
  if (b.ejected_for_s !== null) health.append(el("span", " for " + b.ejected_for_s + " s"));
  health.append(badge(b.warm ? "warm" : "cold", b.warm ? "ok" : "cold"));
  tr.append(health);
  const share = el("td");
  const bar = el("span", null, "bar");
  bar.style.width = Math.round(b.traffic_share * 60) + "px";
  share.append(bar, el("span", (b.traffic_share * 100).toFixed(1) + "%"));
  tr.append(share);
  tr.append(el("td", ms(b.predicted_ttft_ms), "num"), el("td", ms(b.observed_ttft_ms), "num"));
  tr.append(el("td", b.in_flight, "num"), el("td", b.requests, "num"), el("td", b.ejections, "num"));
  return tr;
}

function render(data) {
  const g = data.gateway;
  document.getElementById("gateway").textContent =
    (g.id || "gateway") + (g.region ? " / " + g.region : "");
  const badges = document.getElementById("badges");
  badges.replaceChildren();
  if (g.draining) badges.append(badge("draining"));
  if (g.panic) badges.append(badge("panic"));
  if (data.state) badges.append(badge("state " + data.state.status,
                                      data.state.status === "ok" ? "ok" : "degraded"));
  const usable = data.backends.filter(b => b.health === "ok").length;
  document.getElementById("summary").textContent =
    usable + " of " + data.backends.length + " backends usable, policy " + g.policy +
    ", v" + g.version;
  const byName = new Map(data.backends.map(b => [b.name, b]));
  const regions = document.getElementById("regions");
  regions.replaceChildren();
  for (const region of data.regions) {
    const section = el("section");
    section.dataset.region = region.name;
    section.append(el("h2", "Region " + region.name));
    const table = el("table");
    const head = el("tr");
    for (const title of ["backend", "kind", "health", "traffic share", "predicted TTFT",
                         "observed TTFT", "in flight", "requests", "ejections"]) {
      head.append(el("th", title));
    }
    table.append(head);
    for (const name of region.backends) table.append(backendRow(byName.get(name)));
    section.append(table);
    regions.append(section);
  }
  updates += 1;
  document.body.dataset.updates = String(updates);
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
}

async function refresh() {
  try {
    const response = await fetch("status.json", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    document.getElementById("error").textContent = "";
  } catch (err) {
    document.getElementById("error").textContent = "cannot load status: " + err.message;
  } finally {
    setTimeout(refresh, intervalS * 1000);
  }
}
refresh();
</script>
</body>
</html>
"""
