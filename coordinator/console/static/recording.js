// deskfleet console: play a desktop run's recording. The frames (their numbers, times, who held
// the controls, and the action drawn over each) come from the page's JSON block; each image is
// /runs/ID/recording/SEQ. Playing waits between frames as long as they were apart when
// captured, but never more than MAX_WAIT: a still screen records nothing, and the player
// should not sit idle through it.
(function () {
  "use strict";

  var MAX_WAIT = 3000; // ms

  function start() {
    var data = document.getElementById("recording-frames");
    var screen = document.querySelector("[data-recording-run]");
    var controls = document.querySelector("[data-recording-controls]");
    if (!data || !screen || !controls) { return; }
    var frames;
    try { frames = JSON.parse(data.textContent || "[]"); } catch (e) { return; }
    if (!frames.length) { return; }
    var run = screen.getAttribute("data-recording-run");
    var img = screen.querySelector("[data-recording-img]");
    var svg = screen.querySelector("[data-recording-marks]");
    var line = svg.querySelector("line.drag");
    var end = svg.querySelector("circle.click.end");
    var ring = svg.querySelector("circle.click:not(.end)");
    var dot = svg.querySelector("circle.click-dot");
    var box = svg.querySelector("g.typed-box");
    var rect = box.querySelector("rect");
    var typed = box.querySelector("text");
    var caption = screen.querySelector("[data-recording-caption]");
    var play = controls.querySelector("[data-recording=play]");
    var slider = controls.querySelector("[data-recording=slider]");
    var at = controls.querySelector("[data-recording-at]");
    var time = controls.querySelector("[data-recording-time]");
    var held = controls.querySelector("[data-recording-held]");
    var current = 0;
    var timer = null;

    function src(f) { return "/runs/" + encodeURIComponent(run) + "/recording/" + f.seq; }
    function show(el, on) { el.classList.toggle("off", !on); }
    function set(el, attrs) { Object.keys(attrs).forEach(function (k) { el.setAttribute(k, String(attrs[k])); }); }

    function draw(f) {
      var w = f.width || 1280, h = f.height || 800, m = f.mark;
      set(svg, { viewBox: "0 0 " + w + " " + h });
      svg.classList.toggle("done", !!(m && !m.acting));
      var point = m && m.point, to = m && m.to;
      show(ring, !!point); show(dot, !!point); show(line, !!(point && to)); show(end, !!(point && to));
      if (point) {
        set(ring, { cx: point[0], cy: point[1], r: (w / 60).toFixed(1) });
        set(dot, { cx: point[0], cy: point[1], r: (w / 320).toFixed(1) });
      }
      if (point && to) {
        set(line, { x1: point[0], y1: point[1], x2: to[0], y2: to[1] });
        set(end, { cx: to[0], cy: to[1], r: (w / 80).toFixed(1) });
      }
      var words = m ? (m.text ? "typed: " + m.text : (m.key ? "key: " + m.key : "")) : "";
      show(box, !!words);
      if (words) {
        set(rect, { x: 0, y: h - h / 12, width: w, height: h / 12 });
        set(typed, { x: w / 80, y: h - h / 36, "font-size": h / 30 });
        typed.textContent = words; // text, never markup
      }
      caption.textContent = "Frame " + f.seq + (m
        ? ": action #" + m.index + " " + m.action + " (" + m.status + ")" + (m.acting ? ", while it ran" : ", after it ran")
        : (f.held_by === "person" ? ": a person held the controls" : ": before any action")) + ".";
    }

    function go(i) {
      current = Math.max(0, Math.min(frames.length - 1, i));
      var f = frames[current];
      img.src = src(f);
      img.width = f.width; img.height = f.height;
      slider.value = String(current + 1);
      at.textContent = String(current + 1);
      time.textContent = f.at.toFixed(1) + " s";
      held.textContent = f.held_by;
      held.className = "badge " + (f.held_by === "person" ? "person" : "agent");
      draw(f);
      if (current + 1 < frames.length) { new Image().src = src(frames[current + 1]); } // preload
      screen.setAttribute("data-current", String(current + 1));
    }

    function stop() {
      if (timer !== null) { clearTimeout(timer); timer = null; }
      play.textContent = "Play";
      play.setAttribute("aria-pressed", "false");
    }

    function tick() {
      if (current + 1 >= frames.length) { stop(); return; }
      var wait = (frames[current + 1].at - frames[current].at) * 1000;
      timer = setTimeout(function () { go(current + 1); tick(); }, Math.max(0, Math.min(MAX_WAIT, wait)));
    }

    controls.hidden = false;
    play.addEventListener("click", function () {
      if (timer !== null) { stop(); return; }
      if (current + 1 >= frames.length) { go(0); }
      play.textContent = "Pause";
      play.setAttribute("aria-pressed", "true");
      tick();
    });
    slider.addEventListener("input", function () { stop(); go(Number(slider.value) - 1); });
    go(0);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
}());
