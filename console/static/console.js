// Sluice console: the copy button, the live chart and the usage chart. Loaded as a file (the
// Content-Security-Policy allows no inline script).
"use strict";

document.addEventListener("click", function (ev) {
  var button = ev.target.closest("[data-copy]");
  if (!button) return;
  var input = document.getElementById(button.getAttribute("data-copy"));
  var status = document.getElementById("copy-status");
  var done = function (msg) { if (status) status.textContent = msg; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(input.value).then(
      function () { done("Copied to the clipboard."); },
      function () { input.select(); done("Select and copy it yourself (Ctrl+C)."); });
  } else {
    input.select();
    done(document.execCommand && document.execCommand("copy") ? "Copied to the clipboard." : "Select and copy it yourself (Ctrl+C).");
  }
});

// A chart drawn with uPlot from JSON fetched from the element's data-src
// every refresh milliseconds. series(d) gives the uPlot series after the
// time axis, data(d) the arrays to draw, and mark(el, d) sets the data-*
// attributes that tests and people reading the source check.
function chart(id, opts) {
  var el = document.getElementById(id);
  if (!el || typeof uPlot === "undefined") return;
  var plot = null;
  function size() { return { width: Math.max(280, el.clientWidth), height: opts.height }; }
  function draw(d) {
    var data = opts.data(d);
    opts.mark(el, d);
    if (plot) { plot.setData(data); return; }
    plot = new uPlot(Object.assign({
      series: [{}].concat(opts.series(d)),
      axes: [{}, { label: opts.axis(d) }],
      scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } }
    }, size()), data, el);
  }
  function load() {
    fetch(el.getAttribute("data-src"), { credentials: "same-origin" }).then(function (r) {
      if (r.status === 401) { window.location.href = "/console/signin"; return null; }
      return r.ok ? r.json() : null;
    }).then(function (d) { if (d) draw(d); }).catch(function () {});
  }
  load();
  setInterval(load, opts.refresh);
  window.addEventListener("resize", function () { if (plot) plot.setSize(size()); });
}

function line(label, stroke, width, dash) {
  var s = { label: label, stroke: stroke, width: width, points: { show: false } };
  if (dash) s.dash = dash;
  return s;
}

function total(xs) { return xs.reduce(function (a, b) { return a + (b || 0); }, 0); }

// The overview's live chart: this instance's decisions per second.
chart("chart", {
  height: 240, refresh: 2000,
  data: function (d) { return [d.times, d.allowed, d.denied, d.shadow_denied, d.degraded]; },
  mark: function (el, d) {
    el.setAttribute("data-allowed", Math.round(total(d.allowed) * d.step));
    el.setAttribute("data-denied", Math.round(total(d.denied) * d.step));
  },
  series: function () {
    return [line("allowed/s", "#1a7f37", 2), line("denied/s", "#b3261e", 2),
      line("shadow-denied/s", "#9a6700", 2, [6, 4]), line("degraded/s", "#6e7781", 1)];
  },
  axis: function () { return "decisions/s"; }
});

// The usage page's chart: the fleet's checks per period from the catalog
// database; a period an instance dropped is null, drawn as a break.
chart("usage-chart", {
  height: 260, refresh: 60000,
  data: function (d) { return [d.times, d.allowed, d.denied, d.shadow_denied, d.degraded, d.shed]; },
  mark: function (el, d) {
    el.setAttribute("data-allowed", total(d.allowed));
    el.setAttribute("data-denied", total(d.denied));
    el.setAttribute("data-gaps", d.allowed.filter(function (x) { return x === null; }).length);
  },
  series: function () {
    return [line("allowed", "#1a7f37", 2), line("denied", "#b3261e", 2), line("shadow-denied", "#9a6700", 2, [6, 4]),
      line("degraded", "#6e7781", 1), line("shed", "#8250df", 1)];
  },
  axis: function (d) { return "checks per " + (d.step === 60 ? "minute" : "hour"); }
});
