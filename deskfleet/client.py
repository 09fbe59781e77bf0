"""`AsyncClient`: research, plans and desktops of a deskfleet coordinator, for asyncio code.

    async with await AsyncClient.connect("127.0.0.1:50051", token_file="owner.token") as fleet:
        report = await fleet.research("when was the lighthouse built", urls=[...])
        handle = await fleet.submit_plan({"actions": [...]})
        async for event in handle.watch():
            ...
        run = await handle.result()

`Client` (deskfleet.sync) is the same API for code without an event loop.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from deskfleet._connection import CALL_TIMEOUT, Connection, log, resolve
from deskfleet.desktop import DesktopSession, scope_message
from deskfleet.errors import WatchLostError
from deskfleet.types import Event, FleetStatus, GuidanceReceipt, ResearchReport, Run
from shared.config import ClientConfig
from shared.errors import InvalidArgumentError, StoreUnavailableError, UnavailableError
from shared.gen.deskfleet.v1 import desktop_pb2, fleet_pb2, runs_pb2
from shared.plans import submit_request
from shared.tracing import TraceParent

# WaitRun holds a call open at most this long; a longer wait is several calls.
WAIT_SLICE = 30.0
# A watch that loses the coordinator tries again this long (a restart, a replica taking
# over), after these pauses, the last repeated.
RECONNECT_FOR = 60.0
RECONNECT_PAUSES = (0.25, 0.5, 1.0, 2.0)


class RunHandle:
    """A run that was started: its id, and ways to follow, steer and stop it."""

    def __init__(self, connection: Connection, run_id: str, run: Run | None = None) -> None:
        self._c = connection
        self.id = run_id
        self.started = run  # the run as the call that started it answered, if it did

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"

    async def get(self) -> Run:
        """The run as it stands now, with its actions."""
        reply = await self._c.unary(self._c.runs.GetRun, runs_pb2.RunRef(id=self.id))
        return Run.from_proto(reply)

    async def result(self, timeout: float | None = None) -> Run:  # noqa: ASYNC109
        """The run once it has stopped (SUCCEEDED, FAILED, CANCELLED, HAND_BACK_TO_HUMAN...);
        read its `status` and `stop_reason`. TimeoutError if it is still active after
        `timeout` seconds (None: wait as long as it runs)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"run {self.id} is still active after {timeout:g} s")
            try:
                run = await self.wait(left)
            except StoreUnavailableError:
                raise
            except UnavailableError as exc:
                # A coordinator restarting, or another replica taking over: the run is
                # durable, so waiting goes on once one answers.
                log.warning("%s; waiting for run %s goes on", exc, self.id)
                await asyncio.sleep(1.0)
                continue
            if not run.active:
                return run

    async def wait(self, seconds: float) -> Run:
        """The run once it stops or after `seconds` (at most 3600), whichever is first: one
        call, for a caller that shows progress between waits."""
        seconds = min(max(seconds, 0.05), 3600.0)
        reply = await self._c.unary(
            self._c.runs.WaitRun,
            runs_pb2.WaitRunRequest(id=self.id, timeout_seconds=seconds),
            timeout=seconds + 15,
        )
        return Run.from_proto(reply)

    async def watch(
        self, after_seq: int = 0, *, follow: bool = True, reconnect_for: float = RECONNECT_FOR
    ) -> AsyncIterator[Event]:
        """The run's journal events after `after_seq`, in order; with `follow`, live ones
        too until the run stops. A lost connection is tried again for up to `reconnect_for`
        seconds and resumes after the last event yielded, so nothing is missed and nothing
        is seen twice; past that, WatchLostError says where to resume (its `last_seq`)."""
        if not math.isfinite(reconnect_for):
            # NaN compares false with every deadline: the watch would reconnect forever.
            raise ValueError(f"reconnect_for: a finite number of seconds, not {reconnect_for!r}")
        seen = after_seq
        lost_at: float | None = None  # when the coordinator stopped answering this watch
        tries = 0
        while True:
            request = runs_pb2.WatchRunRequest(id=self.id, after_seq=seen, follow=follow)
            started = time.monotonic()
            try:
                async for message in self._c.stream(self._c.runs.WatchRun, request):
                    if message.seq <= seen:
                        # Not progress: a stream that repeats old events and drops must not
                        # restart the window each time (it would reconnect forever).
                        continue
                    if lost_at is not None:
                        log.warning("watching run %s again, after #%d", self.id, seen)
                        lost_at, tries = None, 0
                    seen = message.seq
                    yield Event.from_proto(message)
                return
            except StoreUnavailableError:
                raise
            except UnavailableError as exc:
                now = time.monotonic()
                if lost_at is not None and now - started > max(reconnect_for, 5.0):
                    # The stream stood longer than any connection attempt takes: it was
                    # connected (a quiet run sends nothing), so this is a new loss with a
                    # whole window of its own.
                    lost_at, tries = None, 0
                if lost_at is None:
                    lost_at = now
                    log.warning(
                        "%s; reconnecting for up to %g s to watch run %s after #%d",
                        exc.message,
                        reconnect_for,
                        self.id,
                        seen,
                    )
                left = lost_at + reconnect_for - now
                if left <= 0:
                    raise WatchLostError(
                        f"{exc.message} (for {reconnect_for:g} s, watching run {self.id})",
                        run_id=self.id,
                        last_seq=seen,
                    ) from exc
                await asyncio.sleep(
                    min(RECONNECT_PAUSES[min(tries, len(RECONNECT_PAUSES) - 1)], left)
                )
                tries += 1

    async def cancel(self) -> Run:
        """Stop it (and the runs it started): CANCELLED with its results saved."""
        reply = await self._c.unary(self._c.runs.CancelRun, runs_pb2.RunRef(id=self.id))
        return Run.from_proto(reply)

    async def guide(
        self, text: str, message_id: str | None = None, *, expected_execution: int = 0
    ) -> GuidanceReceipt:
        """Queue a person's message for the run's next safe boundary. `message_id` names the
        message (one is made when none is given): a send repeated after a lost answer is
        the same message, never a second one. `expected_execution`: refuse it if the run
        has been retried or revised since (0: any)."""
        request = runs_pb2.GuideRunRequest(
            id=self.id,
            text=text,
            message_id=message_id or f"client-{uuid.uuid4().hex}",
            expected_execution=expected_execution,
        )
        reply = await self._c.repeatable(self._c.runs.GuideRun, request)
        return GuidanceReceipt.from_proto(reply)


class AsyncClient:
    """A connection to one coordinator under one credential. Use `await AsyncClient.connect()`
    (an async context manager) and close it when done."""

    def __init__(self, connection: Connection) -> None:
        self._c = connection
        self._closed = False

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        *,
        token: str | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
    ) -> AsyncClient:
        """Connect to the coordinator at `address` (HOST:PORT) with a credential.

        What is not given is found as the CLI finds it: DESKFLEET_COORDINATOR,
        DESKFLEET_TOKEN_FILE, DESKFLEET_CA_FILE, then `~/.config/deskfleet/config.json`. With
        a CA file the channel is TLS verified against it. UnavailableError when nothing
        answers at the address within 10 s."""
        config, secret = resolve(address, token, token_file, ca_file)
        connection = Connection(config, secret)
        try:
            await connection.ready()
        except BaseException:
            await connection.close()
            raise
        return cls(connection)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; safe to call twice."""
        if not self._closed:
            self._closed = True
            await self._c.close()

    @classmethod
    def from_config(
        cls,
        config: ClientConfig,
        *,
        token: str | None = None,
        timeout: float = CALL_TIMEOUT,
        traceparent: TraceParent | None = None,
    ) -> AsyncClient:
        """A client of a resolved configuration (`shared.config.ClientConfig`), without the
        connection check of `connect`: the first call reports an unreachable coordinator.
        `timeout` is each call's deadline; `traceparent` the trace its calls carry."""
        secret = token if token is not None else config.read_token()
        return cls(Connection(config, secret, timeout=timeout, traceparent=traceparent))

    @property
    def address(self) -> str:
        return self._c.target

    # ------------------------------------------------------------------------- the fleet

    async def status(self, *, limit: int = 100, page_token: str = "") -> FleetStatus:
        """Online counts of the whole fleet (every replica's workers) and up to `limit` rows
        (the next ones with `page_token=status.next_page_token`)."""
        reply = await self._c.unary(
            self._c.fleet.GetWorkerStatus,
            fleet_pb2.GetWorkerStatusRequest(limit=limit, page_token=page_token),
        )
        return FleetStatus.from_proto(reply)

    # -------------------------------------------------------------------------- research

    async def start_research(
        self,
        query: str,
        *,
        urls: Sequence[str] = (),
        search_url: str | None = None,
        max_sources: int | None = None,
        thorough: bool = False,
    ) -> RunHandle:
        """Start a research run and return at once (`research` waits for its report)."""
        request = runs_pb2.ResearchRequest(
            query=query,
            urls=list(urls),
            search_url=search_url or "",
            max_sources=max_sources or 0,
            thorough=thorough,
        )
        return await self.start_research_request(request)

    async def start_research_request(self, request: runs_pb2.ResearchRequest) -> RunHandle:
        """`start_research` with every option of the RPC (selectors, profiles, page and
        byte budgets), for callers that build the message themselves (the CLI)."""
        reply = await self._c.unary(self._c.runs.StartResearch, request)
        return RunHandle(self._c, reply.id, Run.from_proto(reply))

    async def research(
        self,
        query: str,
        *,
        urls: Sequence[str] = (),
        search_url: str | None = None,
        max_sources: int | None = None,
        thorough: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> ResearchReport:
        """Research `query` on the fleet's browsers (the pages `urls`, or a search) and
        return the evidence once the run stops. A run that found none returns an empty
        report whose `run.stop_reason` says why."""
        handle = await self.start_research(
            query, urls=urls, search_url=search_url, max_sources=max_sources, thorough=thorough
        )
        run = await handle.result(timeout)
        return await self.research_report(run)

    async def research_report(self, run: Run | str) -> ResearchReport:
        """The evidence report of a research run (empty while it has none)."""
        if isinstance(run, str):
            run = await self.get_run(run)
        found: dict[str, Any] | None = None
        async for event in RunHandle(self._c, run.id).watch(follow=False):
            if event.kind == "research.report":
                found = event.data
        return ResearchReport.from_report(run, found, "")

    # ----------------------------------------------------------------------------- plans

    async def submit_plan(self, plan: Mapping[str, Any], *, wait: float = 0) -> RunHandle:
        """Submit a plan document (`{"actions": [...], "limits": {...}, "title": ...}`, the
        `runs submit` file format, read as strictly) and return its handle. `wait`: let the
        submission itself wait up to that many seconds (at most 60) for a short run to stop,
        so that `handle.started` is often already its end."""
        if not isinstance(plan, Mapping):
            raise InvalidArgumentError("plan: a JSON object with an actions list")
        request = submit_request(dict(plan))
        request.wait_seconds = wait
        reply = await self._c.unary(self._c.runs.SubmitRun, request, timeout=wait + 30)
        return RunHandle(self._c, reply.id, Run.from_proto(reply))

    async def get_run(self, run_id: str) -> Run:
        """Any run the credential may see, as it stands now."""
        return await RunHandle(self._c, run_id).get()

    def run(self, run_id: str) -> RunHandle:
        """A handle on an existing run (nothing is called until it is used)."""
        return RunHandle(self._c, run_id)

    # --------------------------------------------------------------------------- desktops

    async def request_desktop(
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
        """Ask a person for control of `worker`'s desktop (an id, or a worker's unique name):
        the `actions` allowed, for `ttl` seconds, at most `max_actions` of them (None: the
        scope contract's default), on `displays`, within `region` (x, y, width, height).

        Nothing may act until a person approves: `await session.wait_approved()`. `space`
        (width, height) is the coordinate space the session's points are given in; the
        worker maps them to the real screen."""
        # The coordinator resolves a name (a worker id, or the name one worker has), as it
        # does for every call that takes a worker: the session holds the id it answers with.
        reply = await self._c.unary(
            self._c.desktop.RequestDesktop,
            desktop_pb2.RequestDesktopRequest(
                worker=worker,
                scope=scope_message(actions, displays, region, ttl, max_actions),
                title=title,
                reason=reason,
            ),
        )
        return DesktopSession(self._c, Run.from_proto(reply), reply.worker_id, space=space)

    async def desktop(self, run_id: str, *, space: tuple[int, int] | None = None) -> DesktopSession:
        """A session on an existing desktop run (one requested earlier, or elsewhere)."""
        run = await self.get_run(run_id)
        if run.kind != "desktop":
            raise InvalidArgumentError(f"run {run_id} is a {run.kind} run, not a desktop run")
        return DesktopSession(self._c, run, str(run.to_dict().get("workerId", "")), space=space)
