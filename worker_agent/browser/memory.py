"""A bound on what one page may make its renderer use, whatever the page does after it loads.

A page of a kilobyte can set 40 MB of text once it has loaded: Chromium then lays it out in
the page's renderer, which grew past 3 GB for that page alone (the worker's process tree from
1.2 to 4.5 GB). The document's own size limit (`max_bytes`) is checked on what the server
sent; this is checked on what the renderer holds.

Two bounds, each the renderer's own business:

- V8's heap: every renderer starts with `--js-flags=--max-old-space-size` at half the limit, so
  a script that piles up objects fails in V8 (the renderer stops: "out of memory").
- The renderer's resident memory, which also counts what the heap flag does not: the DOM,
  layout, decoded images, array buffers. A watcher thread reads the RSS of this browser's
  renderers every `CHECK_EVERY` seconds (listing them again every `LIST_EVERY`) while a run's
  pages are open (about 0.7% of a core; nothing otherwise), and kills one past the limit.
  Chromium reports the page as crashed; the navigation in it ends with `too_large` and the
  reason (`navigation.py`), and the page is not reused. A renderer that ends by itself (V8
  out of heap, or a defect) is `renderer_crashed`.

A cgroup would bound the processes without polling, but needs privileges an unprivileged worker
does not have (cgroup v2 delegation), and exists on Linux only: this needs neither. The
poll lets a renderer overshoot by what it allocates within one check (about 0.1 s: some
hundreds of MB at most for layout, measured at about 700 MB/s).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable

import psutil

from worker_agent.browser import DEFAULT_RENDERER_MEMORY, MIN_RENDERER_MEMORY

log = logging.getLogger("deskfleet.worker")

CHECK_EVERY = 0.1
LIST_EVERY = 0.5
RENDERER_SWITCH = "--type=renderer"
MARKER_SWITCH = "--deskfleet-browser"  # finds this service's browser among our descendants
# A crash this soon after a kill is the kill's (its pages report it within milliseconds; which
# renderer holds which page is not something Chromium tells).
KILL_IS_RECENT = 1.0


class RendererWatch:
    """Kills renderers of one browser that pass `limit_mib` of resident memory."""

    def __init__(self, limit_mib: int = DEFAULT_RENDERER_MEMORY) -> None:
        if limit_mib < MIN_RENDERER_MEMORY:
            raise ValueError(
                f"--renderer-memory: at least {MIN_RENDERER_MEMORY} MiB (a renderer at rest"
                " holds about 100)"
            )
        self.limit_mib = limit_mib
        self.marker = f"{MARKER_SWITCH}={uuid.uuid4().hex}"
        self.kills = 0  # renderers killed since the browser started (for tests and metrics)
        self._last_kill = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._active: Callable[[], bool] = lambda: True

    @property
    def args(self) -> list[str]:
        """Chromium's switches: V8's heap at half the limit, and the marker."""
        return [f"--js-flags=--max-old-space-size={self.limit_mib // 2}", self.marker]

    def start(self, active: Callable[[], bool] = lambda: True) -> None:
        """Watch the browser started with `args` (call once it has launched), while `active()`
        says a run's pages are open (a browser with none costs no polling)."""
        self._active = active
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="renderer-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Safe to call twice."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)

    def crash_outcome(self) -> tuple[str, str]:
        """(outcome, reason) of a page of this browser whose renderer went away."""
        if time.monotonic() - self._last_kill < KILL_IS_RECENT:
            return "too_large", (
                f"the page made its renderer hold more than {self.limit_mib} MiB, the worker's"
                " limit (--renderer-memory): it was stopped"
            )
        return "renderer_crashed", (
            "the page's renderer crashed (a script past its"
            f" {self.limit_mib // 2} MiB JavaScript heap ends it, as does a Chromium defect)"
        )

    def _watch(self) -> None:
        limit = self.limit_mib * 1024 * 1024
        browser: psutil.Process | None = None
        renderers: list[psutil.Process] = []
        listed = 0.0
        while not self._stop.wait(CHECK_EVERY):
            if not self._active():
                listed = 0.0  # list again first when pages open
                continue
            now = time.monotonic()
            if now - listed >= LIST_EVERY:
                listed = now
                browser = browser if browser is not None and browser.is_running() else None
                browser = browser or self._browser()
                renderers = _renderers(browser) if browser is not None else []
            for renderer in renderers:
                try:
                    rss = renderer.memory_info().rss
                    if rss > limit:
                        self._last_kill = time.monotonic()
                        renderer.kill()
                        self.kills += 1
                        log.warning(
                            "a page's renderer held %d MiB, past --renderer-memory %d: stopped it",
                            rss // (1024 * 1024),
                            self.limit_mib,
                        )
                except psutil.Error:  # it ended meanwhile
                    continue

    def _browser(self) -> psutil.Process | None:
        try:
            for process in psutil.Process(os.getpid()).children(recursive=True):
                try:
                    if self.marker in process.cmdline():
                        return process
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        return None


def _renderers(browser: psutil.Process) -> list[psutil.Process]:
    found = []
    try:
        children = browser.children(recursive=True)
    except psutil.Error:
        return []
    for child in children:
        try:
            if RENDERER_SWITCH in child.cmdline():
                found.append(child)
        except psutil.Error:
            continue
    return found
