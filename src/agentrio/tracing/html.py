"""The HTML report of a trace: one self-contained page (inline CSS and script, no network).

The data is embedded as JSON in a ``<script type="application/json">`` with
``<``, ``>`` and ``&`` escaped, so no text of the trace can end the script, and
the page puts every text in the document as text (``textContent``, canvas
``fillText``), never as markup. When the page has drawn everything its body gets
``data-rendered="ok"``; a script error sets ``data-error`` instead. The body's
``data-view`` holds the time range shown (``start,end`` in seconds), after each
zoom or pan; ``report.html#view=START,END`` opens the page on that range.

The timelines are drawn on a canvas, only the rows in sight, so a report of
10,000 agents scrolls and zooms as one of ten.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ._spans import KINDS, LAYER, Spans
from .reader import TraceRecord
from .view import build, natural, totals
from .writer import scrubbed

__all__ = ["TIMELINES", "report"]

TIMELINES = 10_000  # agents drawn with a timeline (the slowest and erring first)
TOKEN_POINTS = 2_000  # points of the tokens curve, at most


def _data(records: Iterable[TraceRecord], limit: int) -> dict[str, Any]:
    gathered = Spans()
    trace = build(gathered.tap(records))
    gathered.finish()
    spans, marks = gathered.spans, gathered.marks
    paths = set(spans) | set(marks)

    def rank(path: str) -> tuple[bool, float, list[tuple[str, int, str]]]:
        busy = sum(s[2] - s[1] for s in spans.get(path, ()) if s[0] == "phase")
        return (path not in marks, -busy, natural(path))

    chosen = sorted(paths, key=rank)[:limit]
    agents = [
        {
            "path": p,
            # phases below, waits on top (a wait at a provider is within its model call)
            "spans": [
                [kind, _us(start), _us(end), text]
                for kind, start, end, text in sorted(spans.get(p, []), key=lambda s: LAYER[s[0]])
            ],
            "marks": [[_us(t), kind, text] for t, kind, text in marks.get(p, [])],
        }
        for p in sorted(chosen, key=natural)
    ]
    tokens = gathered.tokens
    if len(tokens) > TOKEN_POINTS:  # keep the curve's size bounded
        tokens = [*tokens[:: len(tokens) // TOKEN_POINTS + 1], tokens[-1]]
    sums = totals(trace)
    return {
        "summary": {
            "agents": sums.agents,
            "actors": sums.actors,
            "events": sums.events,
            "seconds": _us(sums.seconds),
            "input_tokens": sums.input_tokens,
            "output_tokens": sums.output_tokens,
            "cost_usd": sums.cost_usd,
            "waits": [[w, sums.waits[w], _us(s)] for w, s in sorted(sums.waited.items())],
            "errors": sums.causes.most_common(),
            "lost": sums.lost,
        },
        "kinds": {kind: list(label) for kind, label in KINDS.items()},
        "wait_kinds": sorted(gathered.wait_kinds),
        "end": _us(gathered.end),
        "agents": agents,
        "hidden": len(paths) - len(chosen),
        "tokens": [[_us(t), n] for t, n in tokens],
        "stops": dict(sums.stop_reasons.most_common()),
        "budget": gathered.budget,
    }


def _us(seconds: float) -> float:
    """*seconds* to the microsecond: what a trace's clock can tell, in fewer bytes."""
    return round(seconds, 6)


def _json(data: object) -> str:
    try:
        text = msgspec.json.encode(data).decode()
    except UnicodeEncodeError:  # a lone surrogate read from the trace ("\\ud800")
        text = msgspec.json.encode(scrubbed(data)).decode()
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def report(
    records: Iterable[TraceRecord], *, budget_tokens: int | None = None, limit: int = TIMELINES
) -> str:
    """The report's HTML.

    A header with the run's summary (agents, wall time, tokens in and out, cost,
    stop reasons, waits, errors by cause), a legend, and a timeline per agent in
    natural order (``agent-2`` before ``agent-10``) on a time axis in seconds:
    phases, model calls, tool calls, waits for the budget or at a provider,
    budget refusals, stalls and errors, each with a tooltip that names it as
    the legend does. Ctrl+wheel (or the wheel over the axis) zooms, a drag
    pans, a double-click shows the whole run again. Then the tokens spent over
    time against the budget (*budget_tokens*, else the root budget's
    ``max_total_tokens`` the trace recorded when the runtime opened) and the
    count of each stop reason.

    Args:
        records: the trace's records, read once (a ``read_trace`` reader does).
        budget_tokens: the budget line of the tokens chart.
        limit: at most this many agents get a timeline (the erring and the
            slowest first); the page says how many more there were.
    """
    data = _data(records, limit)
    if budget_tokens is not None:
        data["budget"] = budget_tokens
    return _PAGE.replace("__DATA__", _json(data))


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentrio trace</title>
<style>
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 8px}h2{font-size:15px;margin:20px 0 6px}
#summary{display:flex;flex-wrap:wrap;gap:8px}
.card{border:1px solid #ddd;border-radius:4px;padding:6px 10px;background:#fafafa;min-width:90px}
.card b{display:block;font-size:16px}.card span{color:#666;font-size:12px}
.legend{margin:10px 0 6px}.legend i{display:inline-block;width:12px;height:12px;
margin:0 4px 0 14px;vertical-align:-2px;border-radius:2px}
.legend i.mark{border-radius:6px}
#controls button{margin-right:4px}#controls span{color:#666;margin-left:8px}
#axis{display:block;border:1px solid #ddd;border-bottom:0;background:#fff;cursor:zoom-in}
#lanes{position:relative;border:1px solid #ddd}
#rows{position:absolute;left:0;top:0}
#scroller{position:relative;overflow-y:auto;cursor:grab}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:4px 6px;
border-radius:3px;font-size:12px;white-space:pre;display:none;max-width:600px;overflow:hidden}
svg{background:#fafafa;border:1px solid #ddd}
</style></head>
<body>
<h1>agentrio trace</h1>
<div id="summary"></div>
<div class="legend" id="legend"></div>
<h2>Timelines</h2>
<div id="controls"><button id="zoom-in">zoom in</button><button id="zoom-out">zoom out</button
><button id="zoom-reset">whole run</button><span>Ctrl+wheel or wheel over the axis: zoom;
drag: pan; double-click: whole run</span></div>
<canvas id="axis"></canvas>
<div id="lanes"><canvas id="rows"></canvas><div id="scroller"><div id="spacer"></div></div></div>
<p id="more"></p>
<h2>Tokens over time</h2><div id="tokens"></div>
<h2>Stop reasons</h2><div id="stops"></div>
<div id="tip"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
window.onerror = function (m) { document.body.dataset.error = String(m); };
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("data").textContent);
  var kinds = data.kinds, agents = data.agents, sum = data.summary;
  var ROW = 18, NAME = 240, AXIS = 30, BAND = {phase: [1, 16], model: [4, 6], wait: [4, 6],
    tool: [10, 6]};
  var end = data.end || 1, view = [0, end];
  function $(id) { return document.getElementById(id); }
  function add(parent, tag, text, cls) {
    var n = document.createElement(tag);
    if (text !== undefined) n.textContent = text;
    if (cls) n.className = cls;
    parent.appendChild(n);
    return n;
  }
  function el(name, attrs, parent) {
    var n = document.createElementNS(NS, name);
    for (var k in attrs) n.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(n);
    return n;
  }
  function secs(s) {  // 12.3 s, 1.234 s, 12.3 ms, 456 \u00b5s
    if (s >= 10) return s.toFixed(1) + " s";
    if (s >= 1 || s === 0) return s.toFixed(3) + " s";
    if (s >= 0.001) return (s * 1000).toPrecision(3) + " ms";
    return (s * 1e6).toPrecision(3) + " \u00b5s";
  }
  function num(n) { return n.toLocaleString("en-US"); }

  // -- the header: the run's summary --
  function card(value, what) {
    var c = add($("summary"), "div", undefined, "card");
    add(c, "b", value); add(c, "span", what);
    return c;
  }
  card(num(sum.agents), "agents (" + num(sum.actors) + " actors)");
  card(secs(sum.seconds), "wall time");
  card(num(sum.input_tokens), "tokens in");
  card(num(sum.output_tokens), "tokens out");
  card("$" + sum.cost_usd.toFixed(4), "cost");
  var stopText = Object.keys(data.stops).map(function (k) { return k + " " + data.stops[k]; });
  card(stopText.join(", ") || "none", "stop reasons");
  if (sum.waits.length) card(sum.waits.map(function (w) {
    return w[0] + " " + w[1] + " (" + secs(w[2]) + ")"; }).join(", "), "waits");
  if (sum.errors.length) card(sum.errors.map(function (e) {
    return e[0] + " " + e[1]; }).join(", "), "errors by cause");
  if (sum.lost) card(num(sum.lost), "events lost");

  // -- the legend: the tooltips' own words --
  var legend = $("legend");
  Object.keys(kinds).forEach(function (k) {
    var sw = add(legend, "i", undefined, BAND[k] ? "" : "mark");
    sw.style.background = kinds[k][1];
    var label = kinds[k][0];
    if (k === "wait" && data.wait_kinds.length) {
      label += " (for " + data.wait_kinds.join(", ") + ")";
    }
    add(legend, "span", label).dataset.kind = k;
  });

  // -- ticks: 1, 2 or 5 times a power of ten, about every 100 pixels --
  function ticks(t0, t1, px) {
    var raw = (t1 - t0) / Math.max(1, px / 100);
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * p; })
      .filter(function (s) { return s >= raw; })[0];
    var out = [];
    for (var t = Math.ceil(t0 / step) * step; t <= t1 + step * 1e-9; t += step) out.push(t);
    return {step: step, at: out};
  }
  function tickText(t, step) {
    if (step >= 1) return t.toFixed(0) + " s";
    var places = Math.max(0, -Math.floor(Math.log10(step * 1000) + 1e-9));
    if (step >= 0.001) return (t * 1000).toFixed(places) + " ms";
    return (t * 1e6).toFixed(0) + " \\u00b5s";
  }

  // -- the timelines: a canvas drawing only the rows in sight --
  var axis = $("axis"), rows = $("rows"), scroller = $("scroller"), tip = $("tip");
  $("spacer").style.height = agents.length * ROW + "px";
  var ratio = window.devicePixelRatio || 1;
  var W = 0, H = 0;
  function size() {
    W = Math.max(600, Math.min(document.documentElement.clientWidth - 40, 1600));
    H = Math.min(agents.length * ROW, Math.max(200, window.innerHeight - 260));
    scroller.style.height = H + "px"; $("lanes").style.width = W + "px";
    [[axis, AXIS], [rows, H]].forEach(function (c) {
      c[0].width = W * ratio; c[0].height = c[1] * ratio;
      c[0].style.width = W + "px"; c[0].style.height = c[1] + "px";
    });
  }
  function inner() { return scroller.clientWidth || W; }
  function scale() { return (inner() - NAME - 8) / (view[1] - view[0]); }
  function xOf(t) { return NAME + (t - view[0]) * scale(); }
  function tOf(x) { return view[0] + (x - NAME) / scale(); }
  function shortName(ctx, path, room) {
    if (ctx.measureText(path).width <= room) return path;
    var cut = path;
    while (cut.length > 1 && ctx.measureText("\\u2026" + cut).width > room) cut = cut.slice(1);
    return "\\u2026" + cut;
  }
  function drawAxis(tk) {
    var c = axis.getContext("2d");
    c.setTransform(ratio, 0, 0, ratio, 0, 0);
    c.clearRect(0, 0, W, AXIS);
    c.font = "11px system-ui,sans-serif"; c.fillStyle = "#444"; c.strokeStyle = "#888";
    c.fillText("time since the first event", 6, 18);
    c.beginPath(); c.moveTo(NAME, AXIS - 1); c.lineTo(inner(), AXIS - 1); c.stroke();
    tk.at.forEach(function (t) {
      var x = Math.round(xOf(t)) + 0.5;
      c.beginPath(); c.moveTo(x, AXIS - 8); c.lineTo(x, AXIS); c.stroke();
      var label = tickText(t, tk.step), wide = c.measureText(label).width;
      c.fillText(label, x + 3 + wide > inner() ? x - 3 - wide : x + 3, AXIS - 12);  // in sight
    });
  }
  function drawRows(tk) {
    var c = rows.getContext("2d");
    c.setTransform(ratio, 0, 0, ratio, 0, 0);
    c.clearRect(0, 0, W, H);
    var right = inner(), sc = scale(), top = scroller.scrollTop;
    var first = Math.floor(top / ROW), last = Math.min(agents.length, Math.ceil((top + H) / ROW));
    c.fillStyle = "#f6f8fb";
    for (var j = first; j < last; j++) if (j % 2) c.fillRect(0, j * ROW - top, right, ROW);
    c.strokeStyle = "#e4e4e4";
    tk.at.forEach(function (t) {
      var x = Math.round(xOf(t)) + 0.5;
      c.beginPath(); c.moveTo(x, 0); c.lineTo(x, H); c.stroke();
    });
    c.font = "12px monospace";
    for (var i = first; i < last; i++) {
      var a = agents[i], y = i * ROW - top;
      c.save(); c.beginPath(); c.rect(NAME, y, right - NAME, ROW); c.clip();
      a.spans.forEach(function (s) {
        var x0 = xOf(s[1]), x1 = Math.max(x0 + 1, xOf(s[2])), band = BAND[s[0]];
        if (x1 < NAME || x0 > right) return;
        c.fillStyle = kinds[s[0]][1];
        c.fillRect(x0, y + band[0], x1 - x0, band[1]);
      });
      a.marks.forEach(function (m) {
        c.fillStyle = kinds[m[1]][1];
        c.beginPath(); c.arc(xOf(m[0]), y + 9, 4, 0, 2 * Math.PI); c.fill();
      });
      c.restore();
      c.fillStyle = "#222";
      c.fillText(shortName(c, a.path, NAME - 12), 4, y + 13);
    }
  }
  function draw() {
    var tk = ticks(view[0], view[1], inner() - NAME - 8);
    drawAxis(tk); drawRows(tk);
    document.body.dataset.view = view[0].toFixed(6) + "," + view[1].toFixed(6);
  }
  function show(t0, t1) {
    var least = Math.max(end * 1e-6, 1e-6), width = Math.max(least, Math.min(end, t1 - t0));
    t0 = Math.max(0, Math.min(end - width, t0));
    view = [t0, t0 + width];
    draw();
  }
  function zoom(factor, x) {  // keeps the time under x where it is
    var t = tOf(x), w = (view[1] - view[0]) * factor;
    show(t - (x - NAME) / (inner() - NAME - 8) * w, t - (x - NAME) / (inner() - NAME - 8) * w + w);
  }
  function onWheel(e, always) {
    if (!(always || e.ctrlKey || e.metaKey)) {
      if (e.deltaX && !e.deltaY) show(view[0] + e.deltaX / scale(), view[1] + e.deltaX / scale());
      return;
    }
    e.preventDefault();
    var x = e.clientX - scroller.getBoundingClientRect().left;
    var dy = e.deltaY * (e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? 400 : 1);  // lines, pages
    zoom(Math.exp(Math.max(-5, Math.min(5, dy * 0.002))), Math.max(NAME, x));
  }
  scroller.addEventListener("wheel", function (e) { onWheel(e, false); }, {passive: false});
  axis.addEventListener("wheel", function (e) { onWheel(e, true); }, {passive: false});
  scroller.addEventListener("scroll", draw);
  var drag = null;
  scroller.addEventListener("mousedown", function (e) {
    if (e.clientX - scroller.getBoundingClientRect().left > inner()) return;  // the scrollbar
    drag = {x: e.clientX, view: view.slice()}; scroller.style.cursor = "grabbing";
  });
  window.addEventListener("mouseup", function () { drag = null; scroller.style.cursor = ""; });
  window.addEventListener("mousemove", function (e) {
    if (!drag) return;
    var dt = (e.clientX - drag.x) / scale();
    show(drag.view[0] - dt, drag.view[1] - dt);
  });
  scroller.addEventListener("dblclick", function () { show(0, end); });
  $("zoom-in").onclick = function () { zoom(0.5, NAME + (inner() - NAME) / 2); };
  $("zoom-out").onclick = function () { zoom(2, NAME + (inner() - NAME) / 2); };
  $("zoom-reset").onclick = function () { show(0, end); };
  window.addEventListener("resize", function () { size(); draw(); });

  // -- tooltips: the legend's word, then the details --
  function describe(kind, text, seconds) {
    var out = kinds[kind][0] + ": " + text;
    return seconds === undefined ? out : out + " (" + secs(seconds) + ")";
  }
  function hit(x, y) {  // x, y within the scroller; the tooltip there, or null
    var i = Math.floor((y + scroller.scrollTop) / ROW), a = agents[i];
    if (!a || x < NAME) return a ? a.path : null;
    var dy = (y + scroller.scrollTop) - i * ROW, t = tOf(x), slack = 3 / scale();
    for (var m = a.marks.length - 1; m >= 0; m--) {
      var mk = a.marks[m];
      if (Math.abs(xOf(mk[0]) - x) <= 5) return a.path + "\\n" + describe(mk[1], mk[2]);
    }
    var found = null;
    a.spans.forEach(function (s) {  // the topmost span under the pointer
      var band = BAND[s[0]];
      if (t < s[1] - slack || t > s[2] + slack) return;
      if (s[0] !== "phase" && (dy < band[0] || dy > band[0] + band[1])) return;
      found = s;
    });
    return found ? a.path + "\\n" + describe(found[0], found[3], found[2] - found[1]) : a.path;
  }
  scroller.addEventListener("mousemove", function (e) {
    var r = scroller.getBoundingClientRect();
    var text = drag ? null : hit(e.clientX - r.left, e.clientY - r.top);
    if (!text) { tip.style.display = "none"; return; }
    tip.textContent = text; tip.style.display = "block";
    tip.style.left = e.clientX + 12 + "px"; tip.style.top = e.clientY + 12 + "px";
  });
  scroller.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  if (data.hidden) $("more").textContent = "... " + num(data.hidden) + " more agents not drawn";

  // -- tokens over time, against the budget; the count of each stop reason --
  var CW = 900;
  var tk = el("svg", {width: CW, height: 180}, $("tokens"));
  var topTokens = data.tokens.length ? data.tokens[data.tokens.length - 1][1] : 0;
  if (data.budget) topTokens = Math.max(topTokens, data.budget);
  topTokens = topTokens || 1;
  var pts = data.tokens.map(function (p) {
    var x = p[0] / end * (CW - 10) + 5, y = 150 - p[1] / topTokens * 140;
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  el("polyline", {points: pts.join(" "), fill: "none", stroke: kinds.model[1],
    "stroke-width": 2}, tk);
  ticks(0, end, CW - 10).at.forEach(function (t, _, all) {
    var x = t / end * (CW - 10) + 5, step = all.length > 1 ? all[1] - all[0] : end;
    el("line", {x1: x, x2: x, y1: 150, y2: 156, stroke: "#888"}, tk);
    el("text", {x: x + 2, y: 172, "font-size": 11}, tk).textContent = tickText(t, step);
  });
  if (data.budget) {
    var by = 150 - data.budget / topTokens * 140;
    el("line", {x1: 0, x2: CW, y1: by, y2: by, stroke: "#d33", "stroke-dasharray": "4"}, tk);
    el("text", {x: 6, y: by < 20 ? by + 14 : by - 4}, tk).textContent = "budget " + data.budget;
  }
  el("text", {x: CW - 160, y: 14}, tk).textContent = topTokens + " tokens";
  var keys = Object.keys(data.stops);
  var most = Math.max.apply(null, keys.map(function (k) { return data.stops[k]; }).concat([1]));
  var sv = el("svg", {width: CW, height: 22 * keys.length + 4}, $("stops"));
  keys.forEach(function (k, i) {
    el("rect", {x: 160, y: 22 * i + 4, width: Math.max(1, (CW - 220) * data.stops[k] / most),
      height: 16, fill: kinds.model[1]}, sv);
    el("text", {x: 4, y: 22 * i + 17}, sv).textContent = k;
    el("text", {x: CW - 50, y: 22 * i + 17}, sv).textContent = data.stops[k];
  });

  size(); draw();
  var asked = /^#view=([0-9.e-]+),([0-9.e-]+)$/.exec(location.hash);  // report.html#view=1,2.5
  if (asked) show(parseFloat(asked[1]), parseFloat(asked[2]));
  window.agentrioReport = {hit: hit, zoom: zoom, show: show, xOf: xOf, ROW: ROW, NAME: NAME};
  if (location.hash === "#selftest") selftest();
  document.body.dataset.rendered = "ok";

  function sample() {  // [kind, tooltip] of each kind's last bar or mark, seen up close
    var last = {}, tips = [];
    agents.forEach(function (a, i) {
      a.spans.forEach(function (s) { last[s[0] === "wait" ? s[3] : s[0]] = [i, s]; });
      a.marks.forEach(function (m) { last[m[1]] = [i, [m[1], m[0], m[0]]]; });
    });
    Object.keys(last).forEach(function (key) {
      var i = last[key][0], s = last[key][1], band = BAND[s[0]] || [9, 0];
      var phase = agents[i].spans.filter(function (p) { return p[0] === "phase"; })[0] || s;
      scroller.scrollTop = i * ROW; show(phase[1], Math.max(phase[2], s[2]) + 1e-6);
      var x = (xOf(s[1]) + Math.max(xOf(s[1]) + 1, xOf(s[2]))) / 2;
      tips.push([s[0], hit(x, i * ROW - scroller.scrollTop + band[0] + band[1] / 2)]);
    });
    return tips;
  }

  // -- what the browser test checks (report.html#selftest): real events, dispatched --
  function selftest() {
    var out = {before: view.slice(), tips: []};
    var r = scroller.getBoundingClientRect(), x = r.left + NAME + (inner() - NAME) / 4;
    scroller.dispatchEvent(new WheelEvent("wheel", {deltaY: -400, ctrlKey: true,
      clientX: x, clientY: r.top + 20, bubbles: true, cancelable: true}));
    out.zoomed = view.slice();
    scroller.dispatchEvent(new MouseEvent("mousedown", {clientX: x, clientY: r.top + 20,
      bubbles: true}));
    window.dispatchEvent(new MouseEvent("mousemove", {clientX: x - 100, clientY: r.top + 20}));
    window.dispatchEvent(new MouseEvent("mouseup", {}));
    out.panned = view.slice();
    scroller.dispatchEvent(new MouseEvent("dblclick", {bubbles: true}));
    out.reset = view.slice();
    axis.dispatchEvent(new WheelEvent("wheel", {deltaY: -300, clientX: x, clientY: 10,
      bubbles: true, cancelable: true}));
    out.axisZoom = view.slice();
    out.tips = sample();
    show(0, end); scroller.scrollTop = 0;
    out.legend = Array.prototype.map.call(legend.querySelectorAll("span"), function (s) {
      return [s.dataset.kind, s.textContent]; });
    out.axis = ticks(view[0], view[1], inner() - NAME - 8).at.map(function (t, _, all) {
      return tickText(t, all.length > 1 ? all[1] - all[0] : end); });
    out.view = document.body.dataset.view;
    var pre = add(document.body, "pre"); pre.id = "selftest"; pre.hidden = true;
    pre.textContent = JSON.stringify(out);
  }
})();
</script>
</body></html>
"""
