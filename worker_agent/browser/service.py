"""One long-lived Chromium per worker, driven by Playwright's async API on its own thread.

Action handlers run on the executor's threads; they hand coroutines to this loop and wait,
so several pages load at once in one browser (bounded by `max_pages`). Each run gets a fresh
browser context (cookies and storage never cross runs), with downloads refused, service
workers blocked and pop-ups closed on sight.

A run's context is created once, however many of its units arrive at the same moment (the
first creates it, the others await the same future), and closed with its egress guard when it
has been idle for `context_idle` seconds (a run that has ended sends nothing more) or when more
than `MAX_CONTEXTS` are open (the least recently used idle one goes first), so a worker's
renderer processes and memory return to their level between runs.

A new context and its first pages cost about half a second of browser work, paid by the first
units of every run. A headless browser therefore keeps one spare: a context whose guard has no
policy yet (it refuses everything) with `SPARE_PAGES` blank pages, made while nothing else runs,
and handed to the next run that needs a context, which then gives its guard the run's policy.
The spare never loaded anything, so no cookie or storage crosses runs. A visible browser keeps
none (it would open windows on a person's desktop).

Every context's only way out is its own egress guard (`egress.py`), a proxy that applies the
run's network policy to each connection; the browser itself starts with a guard that refuses
everything, no proxy bypass (not even loopback), QUIC off, no UDP outside the proxy (WebRTC)
and a host resolver that resolves nothing, so a connection that would skip the proxy fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

from playwright.async_api import (
    Browser,
    BrowserContext,
    Error as PlaywrightError,
    Page,
    Playwright,
    async_playwright,
)

from worker_agent import sandbox as browser_sandbox
from worker_agent.actions import ActionCancelled, ActionContext, ActionFailed
from worker_agent.browser import CONTEXT_IDLE, DEFAULT_RENDERER_MEMORY
from worker_agent.browser.egress import EgressGuard, EgressSettings
from worker_agent.browser.memory import RendererWatch
from worker_agent.browser.navigation import Slot, new_slot
from worker_agent.browser.policy import BrowserPolicy
from worker_agent.browser.rendering import SETTLE_SCRIPT
from worker_agent.capabilities import CHROMIUM_ARGS
from worker_agent.sandbox import Sandbox

log = logging.getLogger("deskfleet.worker")

T = TypeVar("T")
MAX_CONTEXTS = 8
IDLE_PAGES = 4
SPARE_PAGES = 2  # blank pages kept ready in the spare context (each is a renderer at rest)
EGRESS_ARGS = [
    "--proxy-bypass-list=<-loopback>",
    "--disable-quic",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    # Names are resolved by the guard only; anything that tried to connect around the proxy
    # finds no address (the proxy itself is a literal 127.0.0.1).
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]


class Pages:
    """A run's browser context and the pages it keeps for reuse."""

    def __init__(
        self,
        context: BrowserContext,
        guard: EgressGuard,
        crash_outcome: Callable[[], tuple[str, str]],
    ) -> None:
        self.context = context
        self.guard = guard
        self.crash_outcome = crash_outcome
        self._idle: list[Slot] = []
        self.users = 0  # actions using the context now: it is never closed under them
        self.last_used = time.monotonic()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        while self._idle and self._idle[-1].crashed:  # its renderer went away while idle
            await _close_quietly(self._idle.pop().page)
        slot = (
            self._idle.pop()
            if self._idle
            else await new_slot(self.context, self.guard, self.crash_outcome)
        )
        try:
            yield slot
        finally:
            # A page that failed or is still loading is not reused. A kept page's later
            # requests still pass the guard; its refusals go to the run's next navigation.
            nav = slot.nav
            healthy = not slot.crashed and (nav is None or not nav.outcome)
            if nav is not None:
                self.guard.unlisten(nav)
            slot.nav = slot.policy = None
            if healthy and len(self._idle) < IDLE_PAGES:
                self._idle.append(slot)
            else:
                await _close_quietly(slot.page)

    def idle_slots(self, slots: list[Slot]) -> None:
        """Pages opened ahead of use, taken by the next units."""
        self._idle.extend(slots)

    async def close(self) -> None:
        try:
            await self.context.close()
        finally:
            await self.guard.close()


class BrowserService:
    def __init__(
        self,
        chromium: str,
        max_pages: int = 4,
        *,
        visible: bool = False,
        egress: EgressSettings | None = None,
        context_idle: float = CONTEXT_IDLE,
        sandbox: str = "auto",
        renderer_memory: int = DEFAULT_RENDERER_MEMORY,
    ) -> None:
        self.chromium = chromium
        # Bounds what a page may make its renderer hold (memory.py).
        self.memory = RendererWatch(renderer_memory)
        self.sandbox_setting = sandbox
        # The mode the running browser launched in (None until it has).
        self.sandbox: Sandbox | None = None
        self.context_idle = context_idle
        self.egress = egress or EgressSettings()
        self.max_pages = max_pages
        # A visible browser is the research fallback on a desktop: a window a person can watch
        # on the worker's display (--test-type keeps Chromium's infobar from shifting pages).
        self.visible = visible
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._contexts: OrderedDict[tuple[object, ...], Pages] = OrderedDict()
        self._opening: dict[tuple[object, ...], asyncio.Future[Pages]] = {}
        self._reaper: asyncio.Task[None] | None = None
        self.contexts_opened = 0  # since the browser started (for tests and metrics)
        self._pages: asyncio.Semaphore | None = None
        self._closed_guard: EgressGuard | None = None
        self.keep_spare = not visible
        self._spare: Pages | None = None
        self._making_spare: asyncio.Task[None] | None = None

    def run(
        self,
        make: Callable[[Pages], Awaitable[T]],
        run_id: str,
        ctx: ActionContext,
        timeout: float,
        policy: BrowserPolicy | None = None,
    ) -> T:
        """Run `make(pages)` in the run's browser context; cancellable, bounded in time."""
        loop = self._ensure()
        future: Future[T] = asyncio.run_coroutine_threadsafe(
            self._guarded(make, run_id, policy or BrowserPolicy()), loop
        )
        waited = 0.0
        while True:
            try:
                return future.result(timeout=0.05)
            except TimeoutError:
                waited += 0.05
                if ctx.cancelled.is_set():
                    future.cancel()
                    raise ActionCancelled("cancelled") from None
                if waited > timeout:
                    future.cancel()
                    raise ActionFailed(
                        f"the browser action took longer than {timeout:g} s"
                    ) from None

    async def _guarded(
        self, make: Callable[[Pages], Awaitable[T]], run_id: str, policy: BrowserPolicy
    ) -> T:
        assert self._pages is not None
        async with self._pages:
            pages = await self._context(run_id, policy)
            pages.users += 1
            try:
                return await make(pages)
            finally:
                pages.users -= 1
                pages.last_used = time.monotonic()
                self._want_spare()

    @property
    def spare_ready(self) -> bool:
        """Whether a spare context waits for the next run (for tests and metrics)."""
        return self._spare is not None

    @property
    def open_contexts(self) -> int:
        """How many browser contexts are open now (for tests and metrics)."""
        return len(self._contexts)

    async def _context(self, run_id: str, policy: BrowserPolicy) -> Pages:
        # One context per run and network policy: the context's proxy is its policy.
        key = (run_id, *policy.network)
        pages = self._contexts.get(key)
        if pages is None:
            # Units of one run arrive together: the first opens the context, the others
            # wait for the same one (opening awaits, so a plain lookup would race).
            opening = self._opening.get(key)
            if opening is None:
                opening = self._opening[key] = asyncio.ensure_future(self._open(key, policy))
                opening.add_done_callback(lambda _: self._opening.pop(key, None))
            pages = await asyncio.shield(opening)
        if self._contexts.get(key) is pages:
            self._contexts.move_to_end(key)
        pages.last_used = time.monotonic()
        return pages

    async def _new_pages(self, policy: BrowserPolicy | None, blank: int = 0) -> Pages:
        """A new context behind its own guard (no policy: the guard refuses everything), with
        `blank` pages opened ahead of use."""
        assert self._browser is not None
        guard = await EgressGuard(policy, self.egress).start()
        try:
            context = await self._browser.new_context(
                accept_downloads=False,
                java_script_enabled=True,
                service_workers="block",
                proxy={"server": guard.server},
            )
            await context.add_init_script(SETTLE_SCRIPT)
        except BaseException:
            await guard.close()
            raise
        # A page opened by a page (window.open, target=_blank) is a pop-up: closed at once.
        context.on("page", _close_if_popup)
        pages = Pages(context, guard, self.memory.crash_outcome)
        try:
            slots = await asyncio.gather(
                *(new_slot(context, guard, pages.crash_outcome) for _ in range(blank))
            )
        except BaseException:
            await pages.close()
            raise
        pages.idle_slots(slots)
        return pages

    async def _make_spare(self) -> None:
        try:
            spare = await self._new_pages(None, SPARE_PAGES)
        except Exception:  # a browser going away; the next run opens its own context
            return
        if self._spare is None and self._browser is not None:
            self._spare = spare
        else:
            await spare.close()

    def _want_spare(self) -> None:
        """Make the spare in the background if there is none and the browser is idle."""
        busy = any(p.users for p in self._contexts.values()) or self._opening
        making = self._making_spare is not None and not self._making_spare.done()
        if self.keep_spare and self._spare is None and not making and not busy:
            self._making_spare = asyncio.ensure_future(self._make_spare())

    async def _open(self, key: tuple[object, ...], policy: BrowserPolicy) -> Pages:
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.guard.policy = policy  # it refused everything until now; nothing loaded yet
            pages = spare
        else:
            pages = await self._new_pages(policy)
        self._contexts[key] = pages
        self.contexts_opened += 1
        # Past the cap, the least recently used contexts that nothing is using are closed.
        over = len(self._contexts) - MAX_CONTEXTS
        for old_key, old in list(self._contexts.items()):
            if over <= 0:
                break
            if old is not pages and old.users == 0:
                del self._contexts[old_key]
                await old.close()
                over -= 1
        return pages

    async def _reap(self) -> None:
        """Close the contexts of runs that have gone quiet (their run has most likely ended)."""
        while True:
            await asyncio.sleep(max(0.05, min(self.context_idle / 4, 5.0)))
            now = time.monotonic()
            for key, pages in list(self._contexts.items()):
                if pages.users == 0 and now - pages.last_used >= self.context_idle:
                    if self._contexts.get(key) is pages:
                        del self._contexts[key]
                    with contextlib.suppress(Exception):  # a browser that went away
                        await pages.close()
            self._want_spare()

    def version(self) -> str:
        """Start the browser if it is not running (it then serves the actions) and say which
        it is; raises ActionFailed if it does not start."""
        self._ensure()
        assert self._browser is not None
        return self._browser.version

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None:
                return self._loop
            ready: Future[None] = Future()
            loop = asyncio.new_event_loop()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.run_until_complete(self._start(ready))
                loop.run_forever()
                loop.close()

            self._thread = threading.Thread(target=serve, name="browser", daemon=True)
            self._thread.start()
            try:
                ready.result(timeout=60)
            except Exception as exc:
                loop.call_soon_threadsafe(loop.stop)
                raise ActionFailed(f"chromium at {self.chromium} did not start: {exc}") from exc
            self._loop = loop
            return loop

    async def _start(self, ready: Future[None]) -> None:
        try:
            self._playwright = await async_playwright().start()
            # The browser's own default: a guard with no policy, which refuses everything.
            self._closed_guard = await EgressGuard(None, self.egress).start()
            mode = browser_sandbox.decide(self.sandbox_setting)
            while True:
                args = [*CHROMIUM_ARGS, *mode.args, *EGRESS_ARGS, *self.memory.args]
                try:
                    self._browser = await self._playwright.chromium.launch(
                        executable_path=self.chromium,
                        args=[*args, "--test-type"] if self.visible else args,
                        chromium_sandbox=mode.on,
                        headless=not self.visible,
                        proxy={"server": self._closed_guard.server, "bypass": "<-loopback>"},
                    )
                    break
                except Exception as exc:
                    retry = browser_sandbox.fallback(mode, self.sandbox_setting, exc)
                    if retry is None:
                        raise
                    mode = retry
            self.sandbox = mode
            # A run's context holds the pages that load anything (the spare has blank ones).
            self.memory.start(lambda: bool(self._contexts))
            if mode.on:
                log.info("Chromium's sandbox: %s", mode)
            else:
                log.warning("Chromium's sandbox: %s (%s)", mode, browser_sandbox.FIX)
            self._pages = asyncio.Semaphore(self.max_pages)
            self._reaper = asyncio.ensure_future(self._reap())
            ready.set_result(None)
            self._want_spare()
        except Exception as exc:  # reported to the action that asked for the browser
            ready.set_exception(exc)

    def close(self) -> None:
        """Close the browser and its thread; safe to call twice."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._stop(), loop).result(timeout=15)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=15)

    async def _stop(self) -> None:
        self.memory.stop()
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        if self._making_spare is not None:
            self._making_spare.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._making_spare
        spare, self._spare = self._spare, None
        for pages in [*self._contexts.values(), *([spare] if spare else [])]:
            await pages.close()
        self._contexts.clear()
        if self._closed_guard is not None:
            await self._closed_guard.close()
        if self._browser is not None:
            await self._browser.close()
        if self._playwright is not None:
            await self._playwright.stop()


async def _close_quietly(page: Page) -> None:
    with contextlib.suppress(PlaywrightError):  # a crashed page may refuse to close
        await page.close()


_POPUP_CHECKS: set[asyncio.Task[None]] = set()


def _close_if_popup(page: Page) -> None:
    async def check() -> None:
        if await page.opener() is not None:
            await page.close()

    task = asyncio.ensure_future(check())
    _POPUP_CHECKS.add(task)  # tasks are weakly held by the loop
    task.add_done_callback(_POPUP_CHECKS.discard)
