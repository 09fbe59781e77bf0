// deskfleet console: live updates (server-sent events) and drawing an approval's region.
// Served by the console itself; no inline script anywhere (the CSP forbids it).
(function () {
  "use strict";

  function $(sel) { return document.querySelector(sel); }

  function setText(sel, text) {
    var el = $(sel);
    if (el && el.textContent !== text) { el.textContent = text; }
    return el;
  }

  function live() {
    if (!$("[data-live=pending]") || !window.EventSource) { return; }
    var runBox = $("[data-live-run]");
    var url = "/events" + (runBox ? "?run=" + encodeURIComponent(runBox.getAttribute("data-live-run")) : "");
    var source = new EventSource(url);
    source.addEventListener("signed-out", function () { source.close(); window.location.assign("/signin"); });
    source.addEventListener("state", function (ev) {
      var doc = JSON.parse(ev.data);
      if (doc.error) { return; }
      var badge = setText("[data-live=pending]", String(doc.pending));
      if (badge) { badge.classList.toggle("hot", doc.pending > 0); }
      var bar = $("[data-live=fleet-stopped]");
      if (bar) {
        bar.classList.toggle("engaged", !!doc.fleet_stopped);
        bar.setAttribute("data-engaged", doc.fleet_stopped ? "yes" : "no");
        if (doc.fleet_stopped) {
          setText("[data-live=fleet-state]", "The fleet kill switch is ENGAGED: desktop input is stopped everywhere.");
        }
      }
      if (doc.run && runBox) {
        var status = setText("[data-live=run-status]", doc.run.status);
        if (status) { status.className = "status s-" + doc.run.status.toLowerCase(); }
        setText("[data-live=run-stop]", doc.run.stop_reason || "—");
        setText("[data-live=run-waiting]", doc.run.waiting || "—");
        setText("[data-live=run-seq]", String(doc.run.last_seq));
        var shown = parseInt(runBox.getAttribute("data-last-seq"), 10);
        var reload = $("[data-live=run-reload]");
        if (reload && doc.run.last_seq > shown) { reload.classList.remove("hidden"); }
      }
    });
  }

  // Drag on the display drawing to choose the allowed region, in the display's real pixels.
  function region() {
    var svg = $("#screen");
    var rect = $("#drawn");
    if (!svg || !rect) { return; }
    var inputs = { x: $("#rx"), y: $("#ry"), width: $("#rw"), height: $("#rh") };
    var maxW = parseInt(svg.getAttribute("data-width"), 10);
    var maxH = parseInt(svg.getAttribute("data-height"), 10);
    var start = null;

    function point(ev) {
      var p = svg.createSVGPoint();
      p.x = ev.clientX; p.y = ev.clientY;
      var q = p.matrixTransform(svg.getScreenCTM().inverse());
      return { x: Math.max(0, Math.min(maxW, Math.round(q.x))), y: Math.max(0, Math.min(maxH, Math.round(q.y))) };
    }
    function show(r) {
      rect.setAttribute("x", r.x); rect.setAttribute("y", r.y);
      rect.setAttribute("width", r.width); rect.setAttribute("height", r.height);
    }
    function fromPoints(a, b) {
      return { x: Math.min(a.x, b.x), y: Math.min(a.y, b.y), width: Math.abs(a.x - b.x), height: Math.abs(a.y - b.y) };
    }
    function fill(r) {
      Object.keys(inputs).forEach(function (k) { if (inputs[k]) { inputs[k].value = r.width > 0 && r.height > 0 ? String(r[k]) : ""; } });
    }
    svg.addEventListener("pointerdown", function (ev) {
      ev.preventDefault();
      start = point(ev);
      if (svg.setPointerCapture) { svg.setPointerCapture(ev.pointerId); }
      show({ x: start.x, y: start.y, width: 0, height: 0 });
    });
    svg.addEventListener("pointermove", function (ev) {
      if (start) { show(fromPoints(start, point(ev))); }
    });
    svg.addEventListener("pointerup", function (ev) {
      if (!start) { return; }
      var r = fromPoints(start, point(ev));
      start = null;
      show(r); fill(r);
    });
    // Typed numbers draw the same rectangle.
    Object.keys(inputs).forEach(function (k) {
      if (!inputs[k]) { return; }
      inputs[k].addEventListener("input", function () {
        var r = {};
        Object.keys(inputs).forEach(function (j) { r[j] = parseInt(inputs[j].value, 10) || 0; });
        show(r);
      });
    });
  }

  // The kill switch page follows acknowledgements until every worker has confirmed.
  function refresh() {
    var hint = $("[data-refresh]");
    if (!hint) { return; }
    if (document.querySelector(".unacked .tag")) {
      window.setTimeout(function () { window.location.reload(); }, 1000 * parseInt(hint.getAttribute("data-refresh"), 10));
    } else {
      hint.classList.add("hidden");
    }
  }

  document.addEventListener("DOMContentLoaded", function () { live(); region(); refresh(); });
})();
