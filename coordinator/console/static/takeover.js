// deskfleet console: a takeover's input. Mouse and keyboard on the live image become the
// HumanEvents of desktop.proto in the display's real pixels, sent in batches (at most 64) to
// the console, which hands them to the coordinator's SendInput. Only the takeover page loads
// this file; the coordinator runs the events only for the person holding the takeover.
(function () {
  "use strict";

  var MAX_BATCH = 64;
  var MOVE_EVERY = 50; // ms between two pointer moves sent: at most 20 a second
  var MAX_TEXT = 2000;
  var BUTTONS = ["left", "middle", "right"];
  // Browser key names -> the X keysym names a `key` combo takes.
  var NAMES = {
    Enter: "Return", Backspace: "BackSpace", Tab: "Tab", Escape: "Escape", Delete: "Delete",
    Insert: "Insert", Home: "Home", End: "End", PageUp: "Prior", PageDown: "Next",
    ArrowUp: "Up", ArrowDown: "Down", ArrowLeft: "Left", ArrowRight: "Right",
    ContextMenu: "Menu", " ": "space", "+": "plus"
  };
  var MODIFIER_KEYS = ["Shift", "Control", "Alt", "Meta", "AltGraph", "CapsLock", "OS"];

  function start() {
    var box = document.querySelector("[data-input]");
    if (!box) { return; }
    var img = box.querySelector("[data-screen=image]");
    var url = box.getAttribute("data-input");
    var csrf = box.getAttribute("data-csrf");
    var errorLine = document.querySelector("[data-screen=input-error]");
    var queue = [], sending = false, applied = 0;
    var pendingMove = null, lastMoveAt = 0, moveTimer = null;

    function clamp(v, low, high) { return Math.max(low, Math.min(high, v)); }

    // A point on the shown image -> the display's pixel (the frame's width and height).
    function point(ev) {
      var w = parseInt(img.getAttribute("data-width"), 10);
      var h = parseInt(img.getAttribute("data-height"), 10);
      var r = img.getBoundingClientRect();
      if (!(w > 0 && h > 0 && r.width > 0 && r.height > 0)) { return null; }
      return {
        x: clamp(Math.floor((ev.clientX - r.left) * w / r.width), 0, w - 1),
        y: clamp(Math.floor((ev.clientY - r.top) * h / r.height), 0, h - 1)
      };
    }

    function refused(text) {
      errorLine.textContent = text;
      errorLine.classList.remove("hidden");
      box.setAttribute("data-input-error", text);
    }

    function send() {
      if (sending || !queue.length) { return; }
      sending = true;
      var batch = queue.splice(0, MAX_BATCH);
      fetch(url, {
        method: "POST",
        credentials: "same-origin",
        redirect: "error", // signed out: the console redirects to sign-in; that is a failure
        headers: { "content-type": "application/json", "x-csrf-token": csrf },
        body: JSON.stringify({ events: batch })
      }).then(function (response) {
        return response.json().then(function (doc) { return { ok: response.ok, doc: doc }; });
      }).then(function (answer) {
        if (answer.ok) {
          applied += answer.doc.applied || 0;
          box.setAttribute("data-applied", String(applied));
          errorLine.classList.add("hidden");
          box.removeAttribute("data-input-error");
        } else {
          refused("Your input was refused: " + (answer.doc.error || "no reason given"));
        }
      }).catch(function () {
        refused("Your input could not be sent (signed out, or the console is unreachable): reload the page.");
      }).then(function () {
        sending = false;
        send();
      });
    }

    function flushMove() {
      if (moveTimer !== null) { window.clearTimeout(moveTimer); moveTimer = null; }
      if (pendingMove) { queue.push(pendingMove); pendingMove = null; lastMoveAt = Date.now(); }
    }

    function push(event) {
      flushMove(); // the pointer gets where the person left it before anything else happens
      var last = queue[queue.length - 1];
      // Keys typed while a request is under way join one `type` event (what is queued has
      // not been sent: a request takes its events out of the queue).
      if (event.kind === "type" && last && last.kind === "type" &&
          last.text.length + event.text.length <= MAX_TEXT) {
        last.text += event.text;
      } else {
        queue.push(event);
      }
      send();
    }

    function move(p) {
      pendingMove = { kind: "move", x: p.x, y: p.y };
      var wait = MOVE_EVERY - (Date.now() - lastMoveAt);
      if (wait <= 0) { flushMove(); send(); }
      else if (moveTimer === null) {
        moveTimer = window.setTimeout(function () { moveTimer = null; flushMove(); send(); }, wait);
      }
    }

    img.addEventListener("dragstart", function (ev) { ev.preventDefault(); });
    img.addEventListener("contextmenu", function (ev) { ev.preventDefault(); });
    img.addEventListener("mousemove", function (ev) {
      var p = point(ev);
      if (p) { move(p); }
    });
    img.addEventListener("mousedown", function (ev) {
      ev.preventDefault();
      box.focus({ preventScroll: true }); // a scroll here would move the screen under the pointer
      var p = point(ev);
      if (p && BUTTONS[ev.button]) { push({ kind: "down", x: p.x, y: p.y, button: BUTTONS[ev.button] }); }
    });
    img.addEventListener("mouseup", function (ev) {
      ev.preventDefault();
      var p = point(ev);
      if (p && BUTTONS[ev.button]) { push({ kind: "up", x: p.x, y: p.y, button: BUTTONS[ev.button] }); }
    });
    img.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var p = point(ev);
      if (!p) { return; }
      // One click of the wheel per notch (a line scroll), whatever unit the browser uses.
      var dy = clamp(Math.round(ev.deltaY / (ev.deltaMode === 0 ? 100 : ev.deltaMode === 1 ? 3 : 1)), -100, 100);
      var dx = clamp(Math.round(ev.deltaX / (ev.deltaMode === 0 ? 100 : ev.deltaMode === 1 ? 3 : 1)), -100, 100);
      if (!dy && ev.deltaY) { dy = ev.deltaY > 0 ? 1 : -1; }
      if (!dx && ev.deltaX) { dx = ev.deltaX > 0 ? 1 : -1; }
      if (dx || dy) { push({ kind: "scroll", x: p.x, y: p.y, dx: dx, dy: dy }); }
    }, { passive: false });

    // The keyboard goes to the desktop while the screen has the focus (click it).
    box.addEventListener("keydown", function (ev) {
      if (ev.isComposing || MODIFIER_KEYS.indexOf(ev.key) >= 0) { return; }
      var plain = ev.key.length === 1 && !ev.ctrlKey && !ev.altKey && !ev.metaKey;
      if (plain) {
        ev.preventDefault();
        push({ kind: "type", text: ev.key });
        return;
      }
      var name = NAMES[ev.key] || (/^F([1-9]|1[0-9]|2[0-4])$/.test(ev.key) ? ev.key : null);
      if (!name && ev.key.length === 1) { name = ev.key.toLowerCase(); }
      if (!name) { return; }
      ev.preventDefault();
      var combo = [];
      if (ev.ctrlKey) { combo.push("ctrl"); }
      if (ev.altKey) { combo.push("alt"); }
      if (ev.shiftKey) { combo.push("shift"); }
      if (ev.metaKey) { combo.push("super"); }
      combo.push(name);
      push({ kind: "key", key: combo.join("+") });
    });
  }

  document.addEventListener("DOMContentLoaded", start);
})();
