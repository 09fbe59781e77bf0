"""One long-lived Chromium per worker, driven by Playwright's async API on its own thread.

Action handlers run on the executor's threads; they hand coroutines to this loop and wait,
so several pages load at once in one browser (bounded by `max_pages`). Each run gets a fresh
browser context (cookies and storage never cross runs), with downloads refused and pop-ups
closed on sight.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future
from typing import TypeVar

from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright

from worker_agent.actions import ActionCancelled, ActionContext, ActionFailed
from worker_agent.browser.navigation import Slot, new_slot
from worker_agent.capabilities import CHROMIUM_ARGS

T = TypeVar("T")
MAX_CONTEXTS = 8
IDLE_PAGES = 4


class Pages:
    """A run's browser context and the pages it keeps for reuse."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self._idle: list[Slot] = []

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        slot = self._idle.pop() if self._idle else await new_slot(self.context)
        try:
            yield slot
        finally:
            # A page that failed or is still loading is not reused.
            healthy = slot.nav is None or not slot.nav.outcome
            slot.nav = slot.policy = None
            if healthy and len(self._idle) < IDLE_PAGES:
                self._idle.append(slot)
            else:
                await slot.page.close()


class BrowserService:
    def __init__(self, chromium: str, max_pages: int = 4, *, visible: bool = False) -> None:
        self.chromium = chromium
        self.max_pages = max_pages
        # A visible browser is the research fallback on a desktop: a window a person can watch
        # on the worker's display (--test-type keeps Chromium's infobar from shifting pages).
        self.visible = visible
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._contexts: OrderedDict[str, Pages] = OrderedDict()
        self._pages: asyncio.Semaphore | None = None

    def run(
        self,
        make: Callable[[Pages], Awaitable[T]],
        run_id: str,
        ctx: ActionContext,
        timeout: float,
    ) -> T:
        """Run `make(pages)` in the run's browser context; cancellable, bounded in time."""
        loop = self._ensure()
        future: Future[T] = asyncio.run_coroutine_threadsafe(self._guarded(make, run_id), loop)
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

    async def _guarded(self, make: Callable[[Pages], Awaitable[T]], run_id: str) -> T:
        assert self._pages is not None
        async with self._pages:
            return await make(await self._context(run_id))

    async def _context(self, run_id: str) -> Pages:
        pages = self._contexts.get(run_id)
        if pages is not None:
            self._contexts.move_to_end(run_id)
            return pages
        assert self._browser is not None
        context = await self._browser.new_context(accept_downloads=False, java_script_enabled=True)
        # A page opened by a page (window.open, target=_blank) is a pop-up: closed at once.
        context.on("page", _close_if_popup)
        pages = self._contexts[run_id] = Pages(context)
        while len(self._contexts) > MAX_CONTEXTS:
            _, oldest = self._contexts.popitem(last=False)
            await oldest.context.close()
        return pages

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
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.chromium,
                args=[*CHROMIUM_ARGS, "--test-type"] if self.visible else CHROMIUM_ARGS,
                headless=not self.visible,
            )
            self._pages = asyncio.Semaphore(self.max_pages)
            ready.set_result(None)
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
        for pages in self._contexts.values():
            await pages.context.close()
        self._contexts.clear()
        if self._browser is not None:
            await self._browser.close()
        if self._playwright is not None:
            await self._playwright.stop()


_POPUP_CHECKS: set[asyncio.Task[None]] = set()


def _close_if_popup(page: Page) -> None:
    async def check() -> None:
        if await page.opener() is not None:
            await page.close()

    task = asyncio.ensure_future(check())
    _POPUP_CHECKS.add(task)  # tasks are weakly held by the loop
    task.add_done_callback(_POPUP_CHECKS.discard)
