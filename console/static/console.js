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

(function () {
  var el = document.getElementById("chart");
  if (!el || typeof uPlot === "undefined") return;
  var plot = null;
  function size() { return { width: Math.max(280, el.clientWidth), height: 240 }; }
  function draw(d) {
    var data = [d.times, d.allowed, d.denied, d.shadow_denied, d.degraded];
    // Decisions drawn, for people reading the page's source and for tests.
    var sum = function (xs) { return Math.round(xs.reduce(function (a, b) { return a + b; }, 0) * d.step); };
    el.setAttribute("data-allowed", sum(d.allowed));
    el.setAttribute("data-denied", sum(d.denied));
    if (plot) { plot.setData(data); return; }
    plot = new uPlot(Object.assign({
      series: [
        {},
        { label: "allowed/s", stroke: "#1a7f37", width: 2, points: { show: false } },
        { label: "denied/s", stroke: "#b3261e", width: 2, points: { show: false } },
        { label: "shadow-denied/s", stroke: "#9a6700", width: 2, dash: [6, 4], points: { show: false } },
        { label: "degraded/s", stroke: "#6e7781", width: 1, points: { show: false } }
      ],
      axes: [{}, { label: "decisions/s" }],
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
  setInterval(load, 2000);
  window.addEventListener("resize", function () { if (plot) plot.setSize(size()); });
})();

// The usage page's chart: checks per period from the catalog database, as
// GET /console/tenants/{t}/usage.json draws them; refreshed every minute.
(function () {
  var el = document.getElementById("usage-chart");
  if (!el || typeof uPlot === "undefined") return;
  var plot = null;
  function size() { return { width: Math.max(280, el.clientWidth), height: 260 }; }
  function draw(d) {
    var data = [d.times, d.allowed, d.denied, d.shadow_denied, d.degraded, d.shed];
    var sum = function (xs) { return xs.reduce(function (a, b) { return a + (b || 0); }, 0); };
    el.setAttribute("data-allowed", sum(d.allowed));
    el.setAttribute("data-gaps", d.allowed.filter(function (x) { return x === null; }).length);
    el.setAttribute("data-denied", sum(d.denied));
    if (plot) { plot.setData(data); return; }
    var per = d.step === 60 ? "minute" : "hour";
    plot = new uPlot(Object.assign({
      series: [
        {},
        { label: "allowed", stroke: "#1a7f37", width: 2, points: { show: false } },
        { label: "denied", stroke: "#b3261e", width: 2, points: { show: false } },
        { label: "shadow-denied", stroke: "#9a6700", width: 2, dash: [6, 4], points: { show: false } },
        { label: "degraded", stroke: "#6e7781", width: 1, points: { show: false } },
        { label: "shed", stroke: "#8250df", width: 1, points: { show: false } }
      ],
      axes: [{}, { label: "checks per " + per }],
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
  setInterval(load, 60000);
  window.addEventListener("resize", function () { if (plot) plot.setSize(size()); });
})();
