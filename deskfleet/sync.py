"""`Client`: the `AsyncClient` API for code without an event loop.

Each `Client` runs one event loop on a thread of its own and hands every call to it, so the
async and the sync API are one implementation: a program gets the same errors, retries and
resumed watches from either. Close the client (or use `with`) to stop the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from deskfleet._connection import CALL_TIMEOUT
from deskfleet.client import RECONNECT_FOR, AsyncClient, RunHandle as AsyncRunHandle
from deskfleet.desktop import DesktopSession as AsyncDesktopSession
from deskfleet.types import (
    ActResult,
    DesktopGrant,
    Event,
    FleetStatus,
    GuidanceReceipt,
    ResearchReport,
    Run,
)
from shared.config import ClientConfig
from shared.gen.deskfleet.v1 import runs_pb2
from shared.tracing import TraceParent

T = TypeVar("T")


async def _coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _made(
    config: ClientConfig, token: str | None, deadline: float, traceparent: TraceParent | None
) -> AsyncClient:
    # On the client's loop: grpc.aio binds a channel to the loop it is made on.
    return AsyncClient.from_config(config, token=token, timeout=deadline, traceparent=traceparent)


class _Loop:
    """An event loop on a daemon thread; `run` waits for a coroutine's result on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="deskfleet-client", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
        future = asyncio.run_coroutine_threadsafe(_coroutine(coro), self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C in the caller: stop the call too
            raise

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self.run(items.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            close = getattr(items, "aclose", None)
            if close is not None and self.loop.is_running():
                self.run(close())

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


class RunHandle:
    """`deskfleet.client.RunHandle`, blocking."""

    def __init__(self, loop: _Loop, handle: AsyncRunHandle) -> None:
        self._loop = loop
        self._handle = handle
        self.id = handle.id
        self.started = handle.started

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"

    def get(self) -> Run:
        return self._loop.run(self._handle.get())

    def result(self, timeout: float | None = None) -> Run:
        return self._loop.run(self._handle.result(timeout))

    def wait(self, seconds: float) -> Run:
        return self._loop.run(self._handle.wait(seconds))

    def watch(
        self, after_seq: int = 0, *, follow: bool = True, reconnect_for: float = RECONNECT_FOR
    ) -> Iterator[Event]:
        return self._loop.iterate(
            self._handle.watch(after_seq, follow=follow, reconnect_for=reconnect_for)
        )

    def cancel(self) -> Run:
        return self._loop.run(self._handle.cancel())

    def guide(
        self, text: str, message_id: str | None = None, *, expected_execution: int = 0
    ) -> GuidanceReceipt:
        return self._loop.run(
            self._handle.guide(text, message_id, expected_execution=expected_execution)
        )


class DesktopSession:
    """`deskfleet.desktop.DesktopSession`, blocking."""

    def __init__(self, loop: _Loop, session: AsyncDesktopSession) -> None:
        self._loop = loop
        self._session = session
        self.run_id = session.run_id
        self.worker_id = session.worker_id

    def __repr__(self) -> str:
        return f"DesktopSession(run={self.run_id!r}, worker={self.worker_id!r})"

    def __enter__(self) -> DesktopSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def run(self) -> Run:
        return self._session.run

    @property
    def space(self) -> tuple[int, int] | None:
        return self._session.space

    @property
    def grant(self) -> DesktopGrant | None:
        return self._session.grant

    @property
    def approved_actions(self) -> tuple[str, ...]:
        return self._session.approved_actions

    def wait_approved(self, timeout: float | None = None) -> Run:
        return self._loop.run(self._session.wait_approved(timeout))

    def close(self) -> Run:
        return self._loop.run(self._session.close())

    def act(self, action: str, *, timeout: float = 60.0, **args: Any) -> ActResult:
        return self._loop.run(self._session.act(action, timeout=timeout, **args))

    def artifact(self, sha256: str) -> bytes:
        return self._loop.run(self._session.artifact(sha256))

    def screenshot(self, *, display: int | None = None, format: str = "png") -> bytes:
        return self._loop.run(self._session.screenshot(display=display, format=format))

    def zoom(self, region: tuple[int, int, int, int], *, display: int | None = None) -> bytes:
        return self._loop.run(self._session.zoom(region, display=display))

    def cursor_position(self) -> tuple[int, int]:
        return self._loop.run(self._session.cursor_position())

    def mouse_move(self, x: int, y: int) -> ActResult:
        return self._loop.run(self._session.mouse_move(x, y))

    def left_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return self._loop.run(self._session.left_click(x, y))

    def right_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return self._loop.run(self._session.right_click(x, y))

    def middle_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return self._loop.run(self._session.middle_click(x, y))

    def double_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return self._loop.run(self._session.double_click(x, y))

    def triple_click(self, x: int | None = None, y: int | None = None) -> ActResult:
        return self._loop.run(self._session.triple_click(x, y))

    def left_click_drag(self, x: int, y: int, to_x: int, to_y: int) -> ActResult:
        return self._loop.run(self._session.left_click_drag(x, y, to_x, to_y))

    def left_mouse_down(self, x: int | None = None, y: int | None = None) -> ActResult:
        return self._loop.run(self._session.left_mouse_down(x, y))

    def left_mouse_up(self, x: int | None = None, y: int | None = None) -> ActResult:
        return self._loop.run(self._session.left_mouse_up(x, y))

    def scroll(
        self, x: int | None = None, y: int | None = None, *, dx: int = 0, dy: int = 0
    ) -> ActResult:
        return self._loop.run(self._session.scroll(x, y, dx=dx, dy=dy))

    def type(self, text: str) -> ActResult:
        return self._loop.run(self._session.type(text))

    def key(self, combo: str) -> ActResult:
        return self._loop.run(self._session.key(combo))

    def hold_key(self, combo: str, seconds: float) -> ActResult:
        return self._loop.run(self._session.hold_key(combo, seconds))

    def wait(self, seconds: float) -> ActResult:
        return self._loop.run(self._session.wait(seconds))


class Client:
    """A blocking connection to one coordinator: `Client.connect(...)`, then the methods of
    `AsyncClient` without `await`. Use it in a `with` block, or call `close()`."""

    def __init__(self, loop: _Loop, client: AsyncClient) -> None:
        self._loop = loop
        self._client = client

    @classmethod
    def connect(
        cls,
        address: str | None = None,
        *,
        token: str | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
    ) -> Client:
        """As `AsyncClient.connect`."""
        loop = _Loop()
        try:
            client = loop.run(
                AsyncClient.connect(address, token=token, token_file=token_file, ca_file=ca_file)
            )
        except BaseException:
            loop.stop()
            raise
        return cls(loop, client)

    @classmethod
    def from_config(
        cls,
        config: ClientConfig,
        *,
        token: str | None = None,
        timeout: float = CALL_TIMEOUT,
        traceparent: TraceParent | None = None,
    ) -> Client:
        """As `AsyncClient.from_config`."""
        loop = _Loop()
        try:
            client = loop.run(_made(config, token, timeout, traceparent))
        except BaseException:
            loop.stop()
            raise
        return cls(loop, client)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel and stop the client's thread; safe to call twice."""
        if self._loop.loop.is_running():
            self._loop.run(self._client.close())
        self._loop.stop()

    @property
    def address(self) -> str:
        return self._client.address

    def status(self, *, limit: int = 100, page_token: str = "") -> FleetStatus:
        return self._loop.run(self._client.status(limit=limit, page_token=page_token))

    def start_research_request(self, request: runs_pb2.ResearchRequest) -> RunHandle:
        return RunHandle(self._loop, self._loop.run(self._client.start_research_request(request)))

    def research_report(self, run: Run | str) -> ResearchReport:
        return self._loop.run(self._client.research_report(run))

    def start_research(
        self,
        query: str,
        *,
        urls: Sequence[str] = (),
        search_url: str | None = None,
        max_sources: int | None = None,
        thorough: bool = False,
    ) -> RunHandle:
        handle = self._loop.run(
            self._client.start_research(
                query,
                urls=urls,
                search_url=search_url,
                max_sources=max_sources,
                thorough=thorough,
            )
        )
        return RunHandle(self._loop, handle)

    def research(
        self,
        query: str,
        *,
        urls: Sequence[str] = (),
        search_url: str | None = None,
        max_sources: int | None = None,
        thorough: bool = False,
        timeout: float | None = None,
    ) -> ResearchReport:
        return self._loop.run(
            self._client.research(
                query,
                urls=urls,
                search_url=search_url,
                max_sources=max_sources,
                thorough=thorough,
                timeout=timeout,
            )
        )

    def submit_plan(self, plan: Mapping[str, Any], *, wait: float = 0) -> RunHandle:
        return RunHandle(self._loop, self._loop.run(self._client.submit_plan(plan, wait=wait)))

    def get_run(self, run_id: str) -> Run:
        return self._loop.run(self._client.get_run(run_id))

    def run(self, run_id: str) -> RunHandle:
        return RunHandle(self._loop, self._client.run(run_id))

    def request_desktop(
        self,
        worker: str,
        *,
        actions: Sequence[str],
        ttl: float = 600,
        max_actions: int | None = None,
        displays: Sequence[int] = (0,),
        region: tuple[int, int, int, int] | None = None,
        reason: str = "",
        title: str = "",
        space: tuple[int, int] | None = None,
    ) -> DesktopSession:
        session = self._loop.run(
            self._client.request_desktop(
                worker,
                actions=actions,
                ttl=ttl,
                max_actions=max_actions,
                displays=displays,
                region=region,
                reason=reason,
                title=title,
                space=space,
            )
        )
        return DesktopSession(self._loop, session)

    def desktop(self, run_id: str, *, space: tuple[int, int] | None = None) -> DesktopSession:
        return DesktopSession(self._loop, self._loop.run(self._client.desktop(run_id, space=space)))
