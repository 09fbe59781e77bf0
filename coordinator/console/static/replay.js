// deskfleet console: step through a replay one frame at a time (every frame is listed without
// script). Buttons and the arrow keys move; "Show all steps" lists them again.
(function () {
  "use strict";

  function start() {
    var list = document.querySelector("[data-replay-frames]");
    var controls = document.querySelector("[data-replay-controls]");
    if (!list || !controls) { return; }
    var frames = Array.prototype.slice.call(list.querySelectorAll("li.frame"));
    var at = controls.querySelector("[data-replay-at]");
    var all = controls.querySelector("[data-replay=all]");
    var current = 0;
    var showingAll = false;

    function show(i) {
      current = Math.max(0, Math.min(frames.length - 1, i));
      frames.forEach(function (f, n) { f.hidden = !showingAll && n !== current; });
      at.textContent = String(current + 1);
      list.setAttribute("data-current", String(current + 1));
    }
    controls.hidden = false;
    controls.addEventListener("click", function (ev) {
      var op = ev.target && ev.target.getAttribute && ev.target.getAttribute("data-replay");
      if (op === "first") { show(0); }
      else if (op === "prev") { show(current - 1); }
      else if (op === "next") { show(current + 1); }
      else if (op === "last") { show(frames.length - 1); }
      else if (op === "all") {
        showingAll = !showingAll;
        all.setAttribute("aria-pressed", showingAll ? "true" : "false");
        all.textContent = showingAll ? "One step at a time" : "Show all steps";
        show(current);
      }
    });
    document.addEventListener("keydown", function (ev) {
      var tag = (ev.target && ev.target.tagName) || "";
      if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") { return; }
      if (ev.key === "ArrowRight") { show(current + 1); }
      else if (ev.key === "ArrowLeft") { show(current - 1); }
    });
    show(0);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
}());
