/* Interactive figures of the book (no library, no network).
 *
 * Every figure is a <div class="pe-interactive" data-kind="..."> written by the
 * Sphinx extension book/_ext/interactive_figures.py. It holds range sliders, an
 * <output> per slider, an empty <svg> and a JSON block with the figure's data for
 * every combination of slider values, computed at build time by course_lib
 * (course_lib/viz/interactive.py). This script only looks the current combination up
 * and draws it: it computes no slope, bucket, angle or ramp itself.
 *
 * Drawn elements carry their value in data-* attributes (data-angle, data-value,
 * data-buckets), which tests/test_interactive_figures.py reads back.
 */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var INK = "#333", BLUE = "#1f77b4", ORANGE = "#ff7f0e", GREY = "#bbb";

  function el(parent, name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    for (var k in attrs) { node.setAttribute(k, attrs[k]); }
    if (text !== undefined) { node.textContent = text; }
    parent.appendChild(node);
    return node;
  }
  function r2(x) { return Math.round(x * 100) / 100; }
  function fmt(value) {
    if (typeof value !== "number") { return String(value); }
    if (Number.isInteger(value)) { return value.toLocaleString("en-US"); }
    return String(value);
  }
  function short(x, digits) { return Number(x.toPrecision(digits)).toString(); }

  // Axis frame with ticks: returns functions mapping data to pixels.
  function axes(svg, box, xr, yr, opts) {
    var sx = function (x) { return box.x + (x - xr[0]) / (xr[1] - xr[0]) * box.w; };
    var sy = function (y) { return box.y + box.h - (y - yr[0]) / (yr[1] - yr[0]) * box.h; };
    el(svg, "rect", {x: box.x, y: box.y, width: box.w, height: box.h,
      fill: "none", stroke: GREY});
    (opts.xticks || []).forEach(function (t) {
      el(svg, "line", {x1: r2(sx(t)), x2: r2(sx(t)), y1: box.y + box.h,
        y2: box.y + box.h + 4, stroke: INK});
      el(svg, "text", {x: r2(sx(t)), y: box.y + box.h + 15, "font-size": 10,
        "text-anchor": "middle", fill: INK}, opts.xfmt ? opts.xfmt(t) : fmt(t));
    });
    (opts.yticks || []).forEach(function (t) {
      el(svg, "line", {x1: box.x - 4, x2: box.x, y1: r2(sy(t)), y2: r2(sy(t)),
        stroke: INK});
      el(svg, "text", {x: box.x - 6, y: r2(sy(t)) + 3, "font-size": 10,
        "text-anchor": "end", fill: INK}, opts.yfmt ? opts.yfmt(t) : fmt(t));
    });
    if (opts.xlabel) {
      el(svg, "text", {x: box.x + box.w / 2, y: box.y + box.h + 29, "font-size": 11,
        "text-anchor": "middle", fill: INK}, opts.xlabel);
    }
    if (opts.ylabel) {
      el(svg, "text", {x: box.x - 34, y: box.y + box.h / 2, "font-size": 11,
        "text-anchor": "middle", fill: INK,
        transform: "rotate(-90 " + (box.x - 34) + " " + (box.y + box.h / 2) + ")"},
        opts.ylabel);
    }
    if (opts.title) {
      el(svg, "text", {x: box.x + box.w / 2, y: box.y - 6, "font-size": 11,
        "text-anchor": "middle", fill: INK}, opts.title);
    }
    return {x: sx, y: sy};
  }

  var draw = {};

  // RoPE: one dial per pair, the hand at angle m * theta_i (counter-clockwise).
  draw.rope = function (svg, fig, entry, idx) {
    var n = entry.angle.length, w = 640 / n, r = w * 0.38;
    var theta = fig.frequencies[String(idx[0])];
    svg.setAttribute("viewBox", "0 0 640 150");
    el(svg, "text", {x: 320, y: 14, "font-size": 11, "text-anchor": "middle",
      fill: INK}, "pair i of a " + fig.head_dim + "-dimensional head, rotated by m\u00b7\u03b8_i");
    entry.angle.forEach(function (angle, i) {
      var cx = w * (i + 0.5), cy = 66;
      el(svg, "circle", {cx: r2(cx), cy: cy, r: r2(r), fill: "none", stroke: GREY});
      el(svg, "line", {x1: r2(cx), y1: cy, x2: r2(cx + r), y2: cy, stroke: GREY,
        "stroke-dasharray": "2 2"});
      el(svg, "line", {"class": "pe-hand", "data-pair": i, "data-angle": angle,
        x1: r2(cx), y1: cy, x2: r2(cx + r * Math.cos(angle)),
        y2: r2(cy - r * Math.sin(angle)), stroke: BLUE, "stroke-width": 2.5,
        "stroke-linecap": "round"});
      el(svg, "text", {x: r2(cx), y: 120, "font-size": 10, "text-anchor": "middle",
        fill: INK}, "i = " + i + ", \u03b8 = " + short(theta[i], 3));
      el(svg, "text", {x: r2(cx), y: 134, "font-size": 10, "text-anchor": "middle",
        fill: INK}, short(angle / (2 * Math.PI), 3) + " turns");
    });
  };

  // ALiBi: the slopes as bars, then the causal bias matrix of every head.
  draw.alibi = function (svg, fig, entry) {
    var n = entry.slopes.length, L = fig.length, cell = 7, per = 8;
    var rows = Math.ceil(n / per), height = 170 + rows * (L * cell + 26);
    svg.setAttribute("viewBox", "0 0 640 " + height);
    var box = {x: 60, y: 20, w: 560, h: 110};
    var ax = axes(svg, box, [0.5, n + 0.5], [0, 8.5], {
      yticks: [0, 2, 4, 6, 8],
      xticks: entry.slopes.map(function (_, h) { return h + 1; }),
      xlabel: "head h", ylabel: "\u2212log\u2082 m_h",
      title: "slopes m_h of " + n + " heads (higher = slower decay)"});
    entry.slopes.forEach(function (m, h) {
      var up = -Math.log2(m);  // drawing only: the slope itself comes from the data
      el(svg, "line", {x1: r2(ax.x(h + 1)), x2: r2(ax.x(h + 1)), y1: r2(ax.y(0)),
        y2: r2(ax.y(up)), stroke: GREY});
      el(svg, "circle", {"class": "pe-slope", "data-head": h, "data-value": m,
        cx: r2(ax.x(h + 1)), cy: r2(ax.y(up)), r: 3.5, fill: BLUE});
    });
    var lowest = 0;  // the most negative bias shown sets the colour scale
    entry.bias.forEach(function (head) {
      head.forEach(function (v) { if (v !== null && v < lowest) { lowest = v; } });
    });
    var top = 178;
    el(svg, "text", {x: 320, y: top - 8, "font-size": 11, "text-anchor": "middle",
      fill: INK}, "causal bias \u2212m_h(i \u2212 j), query i down, key j across " +
      "(darker = more negative, grey = masked)");
    entry.bias.forEach(function (head, h) {
      var ox = 20 + (h % per) * 78, oy = top + Math.floor(h / per) * (L * cell + 26);
      head.forEach(function (v, k) {
        var shade = v === null ? null : (lowest < 0 ? v / lowest : 0);
        var fill = v === null ? "#e6e6e6" :
          "rgb(" + Math.round(255 - 224 * shade) + "," + Math.round(255 - 136 * shade) +
          "," + Math.round(255 - 75 * shade) + ")";
        el(svg, "rect", {"class": "pe-cell", "data-head": h,
          "data-row": Math.floor(k / L), "data-col": k % L,
          "data-value": v === null ? "masked" : v,
          x: ox + (k % L) * cell, y: oy + Math.floor(k / L) * cell,
          width: cell, height: cell, fill: fill});
      });
      el(svg, "text", {x: ox + L * cell / 2, y: oy + L * cell + 12, "font-size": 10,
        "text-anchor": "middle", fill: INK}, "head " + (h + 1));
    });
  };

  // T5: bucket against relative position, bidirectional and causal.
  draw.t5 = function (svg, fig, entry, idx, values) {
    var span = fig.span, n = values[0];
    svg.setAttribute("viewBox", "0 0 640 250");
    [["bidirectional", 60], ["causal", 370]].forEach(function (pair) {
      var mode = pair[0], box = {x: pair[1], y: 24, w: 250, h: 170};
      var ticks = [0, n / 4, n / 2, 3 * n / 4, n - 1].filter(function (t, k, a) {
        return Number.isInteger(t) && a.indexOf(t) === k;
      });
      var ax = axes(svg, box, [-span, span], [0, n - 1], {
        xticks: [-span, -span / 2, 0, span / 2, span], yticks: ticks,
        xlabel: "relative position j \u2212 i", ylabel: "bucket",
        title: mode + (mode === "causal" ? " (decoder)" : " (encoder)")});
      var buckets = entry[mode];
      if (buckets === null) {
        el(svg, "text", {"class": "pe-refused", "data-mode": mode,
          x: box.x + box.w / 2, y: box.y + box.h / 2, "font-size": 10,
          "text-anchor": "middle", fill: "#b00"},
          "refused: max_distance must exceed the exact buckets");
        return;
      }
      var d = buckets.map(function (b, k) {
        return (k === 0 ? "M" : "L") + r2(ax.x(k - span)) + " " + r2(ax.y(b));
      }).join(" ");
      el(svg, "path", {"class": "pe-t5", "data-mode": mode,
        "data-buckets": buckets.join(","), d: d, fill: "none",
        stroke: mode === "causal" ? ORANGE : BLUE, "stroke-width": 1.5});
      el(svg, "line", {x1: r2(ax.x(values[1])), x2: r2(ax.x(values[1])), y1: box.y,
        y2: box.y + box.h, stroke: GREY, "stroke-dasharray": "3 3"});
      el(svg, "line", {x1: r2(ax.x(-values[1])), x2: r2(ax.x(-values[1])), y1: box.y,
        y2: box.y + box.h, stroke: GREY, "stroke-dasharray": "3 3"});
    });
  };

  // YaRN's index ramp per pair (left panel of both YaRN figures), from the data.
  function yarnRamp(svg, entry, left, xt) {
    var n = entry.ramp.length;
    var a = axes(svg, left, [0, n - 1], [0, 1], {xticks: xt, yticks: [0, 0.5, 1],
      xlabel: "pair i", ylabel: "ramp \u03c1", title: "ramp: 0 kept, 1 interpolated"});
    [entry.low, entry.high].forEach(function (edge) {
      if (edge <= n - 1) {
        el(svg, "line", {"class": "pe-edge", x1: r2(a.x(edge)), x2: r2(a.x(edge)),
          y1: left.y, y2: left.y + left.h, stroke: GREY, "stroke-dasharray": "3 3"});
      }
    });
    entry.ramp.forEach(function (g, i) {
      el(svg, "circle", {"class": "pe-ramp", "data-pair": i, "data-value": g,
        cx: r2(a.x(i)), cy: r2(a.y(g)), r: 2.5, fill: BLUE});
    });
  }

  // YaRN: the index ramp per pair, and the frequencies before and after (log scale).
  draw.yarn = function (svg, fig, entry, idx) {
    var n = entry.ramp.length, theta = fig.theta[String(idx[3])];
    svg.setAttribute("viewBox", "0 0 640 260");
    var left = {x: 50, y: 24, w: 240, h: 170}, right = {x: 370, y: 24, w: 250, h: 170};
    var xt = [0, n / 4, n / 2, 3 * n / 4, n - 1];
    yarnRamp(svg, entry, left, xt);
    var lo = Math.floor(Math.log10(Math.min.apply(null, entry.scaled))), hi = 0;
    var yt = [];
    for (var e = lo; e <= hi; e += Math.max(1, Math.ceil((hi - lo) / 5))) { yt.push(e); }
    var b = axes(svg, right, [0, n - 1], [lo, hi], {xticks: xt, yticks: yt,
      yfmt: function (t) { return "1e" + t; }, xlabel: "pair i",
      ylabel: "frequency", title: "trained (grey) and YaRN's (orange) frequency"});
    [["pe-theta", theta, GREY], ["pe-scaled", entry.scaled, ORANGE]].forEach(function (s) {
      s[1].forEach(function (f, i) {
        el(svg, "circle", {"class": s[0], "data-pair": i, "data-value": f,
          cx: r2(b.x(i)), cy: r2(b.y(Math.log10(f))), r: 2.2, fill: s[2]});
      });
    });
    el(svg, "text", {"class": "pe-summary", x: 320, y: 250, "font-size": 11,
      "text-anchor": "middle", fill: INK}, "low = " + entry.low + ", high = " +
      entry.high + ", attention factor " + short(entry.attention, 4) +
      " (training length " + fig.training_length + ")");
  };

  // YaRN, class edition: the ramp, and how much YaRN slows each pair (theta / theta').
  draw.yarn_class = function (svg, fig, entry, idx, values) {
    var n = entry.ramp.length, s = values[2];
    svg.setAttribute("viewBox", "0 0 640 260");
    var left = {x: 50, y: 24, w: 240, h: 170}, right = {x: 370, y: 24, w: 250, h: 170};
    var xt = [0, n / 4, n / 2, 3 * n / 4, n - 1];
    yarnRamp(svg, entry, left, xt);
    var b = axes(svg, right, [0, n - 1], [1, s], {xticks: xt, yticks: [1, (1 + s) / 2, s],
      xlabel: "pair i", ylabel: "slow-down", title: "slow-down of each pair (1 kept, s interpolated)"});
    entry.slowdown.forEach(function (f, i) {
      el(svg, "circle", {"class": "pe-slowdown", "data-pair": i, "data-value": f,
        cx: r2(b.x(i)), cy: r2(b.y(f)), r: 2.2, fill: ORANGE});
    });
    el(svg, "text", {"class": "pe-summary", x: 320, y: 250, "font-size": 11,
      "text-anchor": "middle", fill: INK}, "low = " + entry.low + ", high = " +
      entry.high + " (training length " + fig.training_length + ")");
  };

  function setup(root) {
    var fig = JSON.parse(root.querySelector("script.pe-data").textContent);
    var svg = root.querySelector("svg.pe-plot");
    var inputs = Array.prototype.slice.call(root.querySelectorAll("input.pe-slider"));
    function render() {
      var idx = inputs.map(function (input) { return Number(input.value); });
      var values = idx.map(function (i, k) { return fig.sliders[k].values[i]; });
      inputs.forEach(function (input, k) {
        var text = fmt(values[k]);
        root.querySelector("output[for='" + input.id + "']").textContent = text;
        input.setAttribute("aria-valuetext", fig.sliders[k].label + " " + text);
      });
      while (svg.firstChild) { svg.removeChild(svg.firstChild); }
      draw[fig.kind](svg, fig, fig.data[idx.join(",")], idx, values);
    }
    inputs.forEach(function (input) { input.addEventListener("input", render); });
    root.querySelector(".pe-controls").hidden = false;
    svg.removeAttribute("hidden");
    render();
    root.setAttribute("data-ready", "true");
  }

  function start() {
    var figures = document.querySelectorAll("div.pe-interactive");
    Array.prototype.forEach.call(figures, setup);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
