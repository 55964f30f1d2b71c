"""The HTML report of a trace: one self-contained page (inline CSS and script, no network).

The data is embedded as JSON in a ``<script type="application/json">`` with
``<``, ``>`` and ``&`` escaped, so no text of the trace can end the script.
When the page has drawn everything its body gets ``data-rendered="ok"``; a
script error sets ``data-error`` instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ..messages import (
    BudgetExhausted,
    PhaseEnded,
    PhaseError,
    PhaseStarted,
    RuntimeOpened,
    Stalled,
    ToolEnded,
    ToolStarted,
    TurnEnded,
    TurnStarted,
    Waited,
)
from .reader import TraceRecord
from .view import natural
from .writer import scrubbed

__all__ = ["TIMELINES", "report"]

TIMELINES = 200  # agents drawn with a timeline (the slowest and erring first)

_LAYER = {"phase": 0, "model": 1, "tool": 2, "wait": 3}  # the order spans are drawn in


def _data(records: Iterable[TraceRecord], limit: int) -> dict[str, Any]:
    spans: dict[str, list[list[Any]]] = {}
    marks: dict[str, list[list[Any]]] = {}
    opened: dict[tuple[str, str], float] = {}
    tokens: list[list[float]] = []
    stops: dict[str, int] = {}
    total = 0
    budget: int | None = None
    start: float | None = None
    for record in records:
        t, e = record.t, record.e
        if start is None:
            start = t
        t -= start
        p = e.path
        if isinstance(e, PhaseStarted):
            opened[p, "phase"] = t
        elif isinstance(e, PhaseEnded):
            stops[e.stop_reason] = stops.get(e.stop_reason, 0) + 1
            s = opened.pop((p, "phase"), t)
            spans.setdefault(p, []).append(["phase", s, t, e.stop_reason])
        elif isinstance(e, TurnStarted):
            opened[p, "model"] = t
        elif isinstance(e, TurnEnded):
            s = opened.pop((p, "model"), t)
            n = e.usage.input_tokens + e.usage.output_tokens
            spans.setdefault(p, []).append(["model", s, t, f"turn {e.iteration}: {n} tokens"])
            total += n
            tokens.append([t, total])
        elif isinstance(e, ToolStarted):
            opened[p, "tool:" + e.call_id] = t
        elif isinstance(e, ToolEnded):
            s = opened.pop((p, "tool:" + e.call_id), t)
            spans.setdefault(p, []).append(["tool", s, t, f"{e.tool}: {e.status}"])
        elif isinstance(e, Waited):
            where = f" at {e.provider}" if e.provider else ""
            text = f"waited for {e.what}{where}"
            spans.setdefault(p, []).append(["wait", max(0.0, t - e.seconds), t, text])
        elif isinstance(e, RuntimeOpened):
            budget = e.max_total_tokens
        elif isinstance(e, BudgetExhausted):
            marks.setdefault(p, []).append([t, "budget", f"budget: {e.limit}"])
        elif isinstance(e, Stalled):
            marks.setdefault(p, []).append([t, "stall", f"stalled: {e.why}"])
        elif isinstance(e, PhaseError):
            marks.setdefault(p, []).append([t, "error", f"{e.error_type}: {e.error}"])
    paths = set(spans) | set(marks)

    def rank(path: str) -> tuple[bool, float, list[tuple[str, int, str]]]:
        busy = sum(s[2] - s[1] for s in spans.get(path, ()) if s[0] == "phase")
        return (path not in marks, -busy, natural(path))

    chosen = sorted(paths, key=rank)[:limit]
    agents = [
        {
            "path": p,
            # phases below, waits on top (a wait at a provider is within its model call)
            "spans": sorted(spans.get(p, []), key=lambda s: _LAYER[s[0]]),
            "marks": marks.get(p, []),
        }
        for p in sorted(chosen, key=natural)
    ]
    if len(tokens) > 2000:  # keep the curve's size bounded
        step = len(tokens) // 2000 + 1
        tokens = [*tokens[::step], tokens[-1]]
    return {
        "agents": agents,
        "hidden": len(paths) - len(chosen),
        "tokens": tokens,
        "stops": stops,
        "budget": budget,
    }


def _json(data: object) -> str:
    try:
        text = msgspec.json.encode(data).decode()
    except UnicodeEncodeError:  # a lone surrogate read from the trace ("\\ud800")
        text = msgspec.json.encode(scrubbed(data)).decode()
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def report(
    records: Iterable[TraceRecord], *, budget_tokens: int | None = None, limit: int = TIMELINES
) -> str:
    """The report's HTML: a timeline per agent (phases, model calls, tool calls,
    waits for the budget or at a provider, budget refusals, stalls and errors),
    tokens over time against the budget (*budget_tokens*, else the root
    budget's ``max_total_tokens`` the trace recorded when the runtime opened)
    and the stop reasons. At most *limit* agents get a timeline."""
    data = _data(records, limit)
    if budget_tokens is not None:
        data["budget"] = budget_tokens
    return _PAGE.replace("__DATA__", _json(data))


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentrio trace</title>
<style>
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px}h2{font-size:15px;margin-top:20px}
.row{display:flex;align-items:center}.name{width:220px;overflow:hidden;text-overflow:ellipsis;
white-space:nowrap;font-family:monospace}
svg{background:#fafafa;border:1px solid #ddd}
.phase{fill:#cfe3ff}.model{fill:#4a8bdf}.tool{fill:#f0a030}
.wait{fill:#e8c547}.budget{fill:#d33}.stall{fill:#a0a}.error{fill:#000}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
</style></head>
<body>
<h1>agentrio trace</h1>
<div class="legend"><span style="background:#cfe3ff"></span>phase
<span style="background:#4a8bdf"></span>model call<span style="background:#f0a030"></span>tool call
<span style="background:#e8c547"></span>waited (budget, rate limit)
<span style="background:#d33"></span>budget refused<span style="background:#a0a"></span>stalled
<span style="background:#000"></span>error</div>
<h2>Stop reasons</h2><div id="stops"></div>
<h2>Tokens over time</h2><div id="tokens"></div>
<h2>Timelines</h2><div id="timelines"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
window.onerror = function (m) { document.body.dataset.error = String(m); };
(function () {
  var NS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("data").textContent);
  function el(name, attrs, parent) {
    var n = document.createElementNS(NS, name);
    for (var k in attrs) n.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(n);
    return n;
  }
  function title(node, text) { el("title", {}, node).textContent = text; }
  var end = 0;
  data.agents.forEach(function (a) {
    a.spans.forEach(function (s) { end = Math.max(end, s[2]); });
    a.marks.forEach(function (m) { end = Math.max(end, m[0]); });
  });
  data.tokens.forEach(function (p) { end = Math.max(end, p[0]); });
  end = end || 1;
  var W = 900;
  var stops = document.getElementById("stops");
  var keys = Object.keys(data.stops);
  var most = Math.max.apply(null, keys.map(function (k) { return data.stops[k]; }).concat([1]));
  var sv = el("svg", {width: W, height: 22 * keys.length + 4}, stops);
  keys.forEach(function (k, i) {
    el("rect", {x: 160, y: 22 * i + 4, width: Math.max(1, (W - 220) * data.stops[k] / most),
      height: 16, "class": "model"}, sv);
    el("text", {x: 4, y: 22 * i + 17}, sv).textContent = k;
    el("text", {x: W - 50, y: 22 * i + 17}, sv).textContent = data.stops[k];
  });
  var tk = el("svg", {width: W, height: 160}, document.getElementById("tokens"));
  var top = data.tokens.length ? data.tokens[data.tokens.length - 1][1] : 0;
  if (data.budget) top = Math.max(top, data.budget);
  top = top || 1;
  var pts = data.tokens.map(function (p) {
    return (p[0] / end * (W - 10) + 5).toFixed(1) + "," + (150 - p[1] / top * 140).toFixed(1);
  });
  el("polyline", {points: pts.join(" "), fill: "none", stroke: "#4a8bdf", "stroke-width": 2}, tk);
  if (data.budget) {
    var y = 150 - data.budget / top * 140;
    el("line", {x1: 0, x2: W, y1: y, y2: y, stroke: "#d33", "stroke-dasharray": "4"}, tk);
    el("text", {x: 6, y: y < 20 ? y + 14 : y - 4}, tk).textContent = "budget " + data.budget;
  }
  el("text", {x: W - 160, y: 14}, tk).textContent = top + " tokens";
  var box = document.getElementById("timelines");
  data.agents.forEach(function (a) {
    var row = document.createElement("div"); row.className = "row";
    var name = document.createElement("div"); name.className = "name";
    name.textContent = a.path; name.title = a.path; row.appendChild(name);
    var s = el("svg", {width: W - 230, height: 18}, row);
    var scale = (W - 240) / end;
    a.spans.forEach(function (sp) {
      var y = sp[0] === "phase" ? 1 : (sp[0] === "tool" ? 10 : 4);  // a wait: over its call
      var h = sp[0] === "phase" ? 16 : 6;
      var r = el("rect", {x: 4 + sp[1] * scale, y: y, width: Math.max(1, (sp[2] - sp[1]) * scale),
        height: h, "class": sp[0]}, s);
      title(r, sp[3] + " (" + (sp[2] - sp[1]).toFixed(3) + "s)");
    });
    a.marks.forEach(function (m) {
      var c = el("circle", {cx: 4 + m[0] * scale, cy: 9, r: 4, "class": m[1]}, s);
      title(c, m[2]);
    });
    box.appendChild(row);
  });
  if (data.hidden) {
    var more = document.createElement("p");
    more.textContent = "... " + data.hidden + " more agents not drawn";
    box.appendChild(more);
  }
  document.body.dataset.rendered = "ok";
})();
</script>
</body></html>
"""
