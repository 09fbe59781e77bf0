"""How a page is loaded for reading: what a text read does not need is skipped, and the page
is read once it settles.

Skipping: images, media and fonts are refused inside Chromium for a text read (CDP
`Fetch.enable` with resource-type patterns, on the page's own session), so only those
requests make a round trip to Python and everything else stays in Chromium's network stack
and cache (no `page.route`, which would pause every request). A screenshot turns it off.

Settling: client-rendered text arrives after `load`. An init script in every document counts
what is still going on (fetch and XHR requests in flight, timers due within the bound) and
when the DOM last changed after `load`; `settle` waits until nothing is in flight or due and
the DOM has been quiet for `QUIET_MS`, at most `BOUND_MS`, and says how long it waited. A
static page settles at once. What the page sees of this is one non-enumerable property.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from playwright.async_api import CDPSession, Error as PlaywrightError, Page

QUIET_MS = 300
BOUND_MS = 3000
SKIPPED_TYPES = ("Image", "Media", "Font")

# Runs before any script of the page, in every frame.
SETTLE_SCRIPT = """(() => {
  if (window.__deskfleetSettle) return;
  const state = {inflight: 0, timers: new Set(), last: 0, loaded: false, bound: BOUND_MS};
  Object.defineProperty(window, '__deskfleetSettle', {value: state, enumerable: false});
  const now = () => performance.now();
  const setT = window.setTimeout, clearT = window.clearTimeout;
  state.sleep = (resolve, ms) => setT.call(window, resolve, ms);
  window.setTimeout = function (fn, delay, ...rest) {
    const due = Number(delay) || 0;
    let id;
    const run = function () { state.timers.delete(id);
      return typeof fn === 'function' ? fn.apply(this, rest) : undefined; };
    id = setT.call(window, typeof fn === 'function' ? run : fn, delay, ...rest);
    if (typeof fn === 'function' && due <= state.bound) state.timers.add(id);
    return id;
  };
  window.clearTimeout = function (id) { state.timers.delete(id); return clearT.call(window, id); };
  const done = () => { state.inflight = Math.max(0, state.inflight - 1); };
  if (window.fetch) {
    const f = window.fetch;
    window.fetch = function (...args) {
      state.inflight++;
      try { const p = f.apply(this, args); p.then(done, done); return p; }
      catch (e) { done(); throw e; }
    };
  }
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    state.inflight++;
    this.addEventListener('loadend', done, {once: true});
    try { return send.apply(this, args); } catch (e) { done(); throw e; }
  };
  new MutationObserver(() => { if (state.loaded) state.last = now(); })
    .observe(document, {childList: true, subtree: true, characterData: true});
  window.addEventListener('load', () => { state.loaded = true; }, {once: true});
})();""".replace("BOUND_MS", str(BOUND_MS))


async def settle(page: Page) -> dict[str, Any]:
    """Wait for the page to settle (bounded); `settle_ms` is how long it waited."""
    started = time.monotonic()
    try:
        # Bounded here too: the page can reach the state the init script keeps.
        waited: dict[str, Any] = await asyncio.wait_for(
            page.evaluate(_SETTLE_JS, [QUIET_MS, BOUND_MS]), BOUND_MS / 1000 + 1
        )
    except (PlaywrightError, TimeoutError):  # navigated away, closed, or tampered with
        return {"settle_ms": round((time.monotonic() - started) * 1000), "settled": False}
    return waited


# The wait polls with the original setTimeout, kept by the init script for this purpose.
_SETTLE_JS = """async ([quiet, bound]) => {
  const state = window.__deskfleetSettle;
  const start = performance.now();
  if (!state) return {settle_ms: 0, settled: true};
  const sleep = ms => new Promise(r => state.sleep(r, ms));
  for (;;) {
    const now = performance.now();
    const busy = state.inflight > 0 || state.timers.size > 0;
    const calm = !state.last || now - state.last >= quiet;
    if (!busy && calm) return {settle_ms: Math.round(now - start), settled: true};
    if (now - start >= bound) return {settle_ms: Math.round(now - start), settled: false};
    await sleep(Math.min(50, quiet));
  }
}"""


class Skipper:
    """Refuses a page's images, media and fonts while on (a text read); off for screenshots."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.on = False
        self._session: CDPSession | None = None
        self._tasks: set[asyncio.Future[Any]] = set()
        self.skipped = 0

    async def set(self, on: bool) -> None:
        if on == self.on:
            return
        session = self._session
        if session is None:
            session = self._session = await self.page.context.new_cdp_session(self.page)
            session.on("Fetch.requestPaused", self._paused)
        if on:
            patterns = [{"resourceType": t, "requestStage": "Request"} for t in SKIPPED_TYPES]
            await session.send("Fetch.enable", {"patterns": patterns})
        else:
            await session.send("Fetch.disable")
        self.on = on

    def _paused(self, event: dict[str, Any]) -> None:
        assert self._session is not None
        self.skipped += 1
        task = asyncio.ensure_future(
            self._session.send(
                "Fetch.failRequest",
                {"requestId": event["requestId"], "errorReason": "BlockedByClient"},
            )
        )
        self._tasks.add(task)
        task.add_done_callback(_forget(self._tasks))


def _forget(tasks: set[asyncio.Future[Any]]) -> Any:
    def done(task: asyncio.Future[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            with contextlib.suppress(Exception):
                task.exception()  # the page closed meanwhile

    return done
