// deskfleet console: a desktop's live view. Frames come as server-sent events (JPEG, base64)
// and replace the image; the status line says how the view is doing. This file sends nothing
// to the desktop: input is takeover.js, loaded by the takeover page only.
(function () {
  "use strict";

  function start() {
    var box = document.querySelector("[data-screen-stream]");
    if (!box || !window.EventSource) { return; }
    var img = box.querySelector("[data-screen=image]");
    var status = document.querySelector("[data-screen=status]");
    var endLine = document.querySelector("[data-screen=end]");
    var frames = 0, lastChange = null, latency = null, state = "connecting…";
    var captured = 0;

    function show() {
      var parts = [state, frames + (frames === 1 ? " frame" : " frames")];
      if (lastChange) { parts.push("last change " + lastChange.toLocaleTimeString()); }
      // The worker's clock against this browser's: exact when they are one machine's.
      if (latency !== null) { parts.push("captured → shown " + Math.max(0, Math.round(latency)) + " ms"); }
      status.textContent = parts.join(" · ");
    }

    img.addEventListener("load", function () {
      var now = Date.now();
      if (captured) { latency = now - captured * 1000; }
      frames += 1;
      lastChange = new Date(now);
      box.setAttribute("data-frames", String(frames));
      box.setAttribute("data-shown-at", String(now));
      show();
    });

    var source = new EventSource(box.getAttribute("data-screen-stream"));
    source.addEventListener("open", function () { state = "connected"; show(); });
    source.addEventListener("frame", function (ev) {
      var doc = JSON.parse(ev.data);
      if (doc.media_type !== "image/jpeg" || typeof doc.data !== "string") { return; }
      captured = Number(doc.captured_at) || 0;
      // The display's real pixels: what a takeover's pointer is translated to.
      img.setAttribute("data-width", String(doc.width));
      img.setAttribute("data-height", String(doc.height));
      box.setAttribute("data-seq", String(doc.seq));
      img.src = "data:image/jpeg;base64," + doc.data;
    });
    source.addEventListener("end", function (ev) {
      source.close();
      var doc = JSON.parse(ev.data);
      state = "ended";
      box.setAttribute("data-ended", "yes");
      endLine.textContent = "The live view ended: " + (doc.error || "no reason given");
      endLine.classList.remove("hidden");
      show();
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED && state !== "ended") {
        // Refused before its first frame (the browser does not show why): the page does.
        state = "ended";
        box.setAttribute("data-ended", "yes");
        endLine.textContent = "The live view was refused or could not be reached: reload the page to see why.";
        endLine.classList.remove("hidden");
      } else if (state !== "ended") {
        state = "reconnecting…";
      }
      show();
    });
    show();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
