"""The worker's one stream to the coordinator: hello, heartbeats, actions, and reconnection."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeAlias

import grpc

from shared.advertisement import Advertisement, refused_limit
from shared.credentials import auth_metadata
from shared.errors import AuthenticationError, FailedPreconditionError, PermissionDeniedError
from shared.gen.deskfleet.v1 import worker_pb2, worker_pb2_grpc
from shared.gen.deskfleet.v1.worker_pb2 import CoordinatorMessage, WorkerMessage
from shared.local_kill import LocalKill
from worker_agent.backoff import Backoff
from worker_agent.certificates import WorkerTransport
from worker_agent.desktop.human import NO_DESKTOP as NO_DESKTOP_INPUT
from worker_agent.desktop.peek import no_desktop
from worker_agent.desktop.watch import ScreenWatcher
from worker_agent.executor import ActionExecutor
from worker_agent.input_guard import InputGuard, Kill
from worker_agent.state import WorkerIdentity

log = logging.getLogger("deskfleet.worker")

CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    # The core waits this long for any ping's ack (60 s unless set), keepalive's included:
    # a coordinator that stopped answering is given up within 15 s.
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
WELCOME_TIMEOUT = 10.0
# How often the local kill switch's file is looked at while connected: it can be engaged from
# outside the process (`deskfleet-worker kill engage`, a person's file), so it is watched.
LOCAL_KILL_POLL = 0.25

# Generic only in the type stubs, hence the string.
Call: TypeAlias = "grpc.aio.StreamStreamCall[WorkerMessage, CoordinatorMessage]"


class ConnectionLost(Exception):
    """The stream ended or stalled; the worker reconnects."""


class HelloRefusedError(FailedPreconditionError):
    """The coordinator refused this worker's hello for one of its limits: every reconnect
    would send the same hello and be refused the same way, so the worker stops."""

    def __init__(self, details: str, limit: str) -> None:
        super().__init__(
            f"the coordinator refused this worker's hello: {details}; fix what the worker"
            " advertises (its labels are given at enrollment: deskfleet-worker enroll --label)"
            " or ask the coordinator's operator to raise the limit (deskfleet-coordinator serve"
            f" --hello-limit {limit}=N)"
        )


class WorkerConnection:
    """Keeps the worker connected to one of its coordinators until it is revoked or stopped."""

    def __init__(
        self,
        identity: WorkerIdentity,
        credential: str,
        measure: Callable[[], Advertisement],
        backoff: Backoff | None = None,
        *,
        actions: ActionExecutor,
        guard: InputGuard | None = None,
        transport: WorkerTransport | None = None,
        save_credential: Callable[[str], None] | None = None,
        peek: Callable[[worker_pb2.PeekScreenNow], worker_pb2.PeekResult] = no_desktop,
        watcher: ScreenWatcher | None = None,
        human_input: HumanInputHandler | None = None,
    ) -> None:
        self._peek = peek
        self._watcher = watcher or ScreenWatcher(None, guard)  # without one: no_display
        self._human_input = human_input or _no_human_input
        self._peeking: set[asyncio.Task[None]] = set()
        self._save_credential = save_credential
        self._transport = transport
        self._guard = guard
        self._identity = identity
        self._metadata = auth_metadata(credential)
        self._measure = measure
        self._backoff = backoff or Backoff()
        self._actions = actions
        self.connected = asyncio.Event()
        self.sessions = 0  # streams welcomed so far: the metrics count reconnects

    async def run_forever(self) -> None:
        """Connect, serve, reconnect. Returns never; raises when the credential is refused,
        or the hello for one of the coordinator's limits (`HelloRefusedError`)."""
        attempt = 0
        while True:
            if self._transport is not None:
                await self._transport.renew_if_due()  # at each connect, before the handshake
                address, credentials = self._transport.stream_target(attempt)
            else:
                address = self._identity.coordinators[attempt % len(self._identity.coordinators)]
                credentials = None
            attempt += 1
            try:
                await self._session(address, credentials)
                reason = "the coordinator closed the stream"
            except (AuthenticationError, PermissionDeniedError):
                raise
            except ConnectionLost as exc:
                reason = str(exc)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    raise AuthenticationError(exc.details() or "credential refused") from exc
                if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
                    raise PermissionDeniedError(exc.details() or "access denied") from exc
                refused = refused_limit(exc.details() or "")
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT and refused is not None:
                    raise HelloRefusedError(_first_line(exc.details()), refused[0]) from exc
                reason = f"{exc.code().name.lower()}: {_first_line(exc.details())}"
                if credentials is not None and "handshake" in (exc.details() or "").lower():
                    # The raw TLS error names neither side's certificate: say which to check.
                    reason = (
                        "TLS handshake refused: the coordinator did not accept this worker's"
                        " certificate (client.pem: expired, another CA?) or its own is not"
                        " signed by the CA in ca.pem"
                    )
            self.connected.clear()
            delay = self._backoff.next_delay()
            log.warning("connection to %s lost (%s); retrying in %.1f s", address, reason, delay)
            await asyncio.sleep(delay)

    async def _session(self, address: str, credentials: grpc.ChannelCredentials | None) -> None:
        advertisement = await asyncio.to_thread(self._measure)
        channel = (
            grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
            if credentials is None
            else grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
        )
        async with channel:
            stub = worker_pb2_grpc.WorkerGatewayStub(channel)
            call = stub.Connect(metadata=self._metadata)
            local = self._guard.local_state() if self._guard is not None else LocalKill()
            hello = worker_pb2.Hello(
                advertisement=advertisement.to_proto(),
                held=self._actions.held(),
                stream_liveness=True,
                local_kill=local.to_proto(),
            )
            await call.write(worker_pb2.WorkerMessage(hello=hello))
            first = await asyncio.wait_for(call.read(), WELCOME_TIMEOUT)
            if first is grpc.aio.EOF:
                await _raise_status(call)
                raise ConnectionLost("the stream ended before the welcome")
            welcome = first.welcome
            if welcome.rotate_credential:
                await self._rotate(stub)  # reconnects with the new credential
            self._backoff.reset()
            self.connected.set()
            self.sessions += 1
            caps = ", ".join(
                f"{c.name}: {'yes' if c.available else 'no (' + c.reason + ')'}"
                for c in advertisement.capabilities
            )
            log.info(
                "connected to %s (replica %s) as %s; %s",
                address,
                welcome.replica,
                welcome.worker_id,
                caps,
            )
            # One writer per stream: grpc.aio allows one write in flight, and receipts come
            # from action threads at any time. No await between reading the outbox and
            # attaching the queue, so no receipt falls between the two.
            outgoing: asyncio.Queue[WorkerMessage] = asyncio.Queue()
            if self._guard is not None:
                self._guard.replace([_kill(k) for k in welcome.kills])
                self._guard.set_connected(True)
            for k in welcome.kills:
                outgoing.put_nowait(_kill_ack(k))
            for message in self._actions.pending():
                outgoing.put_nowait(message)
            self._actions.attach(outgoing.put_nowait)
            tasks = [asyncio.create_task(self._write(call, outgoing))]
            if not welcome.stream_liveness:  # an older coordinator: presence by heartbeats
                tasks.append(asyncio.create_task(self._heartbeats(outgoing, welcome)))
            if self._transport is not None:
                tasks.append(asyncio.create_task(self._transport.keep_renewed()))
            if self._guard is not None and welcome.local_kill_reports:
                tasks.append(asyncio.create_task(self._report_local_kill(outgoing, local)))
            try:
                await self._receive(call, welcome, outgoing, stub)
            finally:
                if self._guard is not None:
                    self._guard.set_connected(False)  # input fails closed without a coordinator
                self._watcher.stop_all()  # its viewers were on this stream
                self._actions.attach(None)
                for task in tasks:
                    task.cancel()
                # wait(), not `await task` under suppress(CancelledError): that would also
                # swallow a cancellation of this task (the worker stopping) that arrives
                # meanwhile, and the worker would go on reconnecting.
                await asyncio.wait(tasks)
                call.cancel()

    async def _write(self, call: Call, outgoing: asyncio.Queue[WorkerMessage]) -> None:
        while True:
            message = await outgoing.get()
            try:
                await call.write(message)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                # The stream is gone; reading notices and reconnects. What was not sent is
                # in the outbox (receipts) or the next Hello (running attempts).
                log.debug("stream write failed: %s", exc)
                return

    async def _report_local_kill(
        self, outgoing: asyncio.Queue[WorkerMessage], reported: LocalKill
    ) -> None:
        """Tell the coordinator each change of the local kill switch (its hello had the state
        at connect), so that admins see what stops input here."""
        assert self._guard is not None
        while True:
            await asyncio.sleep(LOCAL_KILL_POLL)
            state = self._guard.local_state()
            if state == reported:
                continue
            reported = state
            outgoing.put_nowait(WorkerMessage(local_kill=state.to_proto()))
            if state.engaged:
                log.warning(
                    "local kill switch engaged by %s: %s (reported to the coordinator)",
                    state.means,
                    state.reason,
                )
            else:
                log.warning("local kill switch released (reported to the coordinator)")

    async def _heartbeats(
        self, outgoing: asyncio.Queue[WorkerMessage], welcome: worker_pb2.Welcome
    ) -> None:
        seq = 0
        while True:
            await asyncio.sleep(welcome.heartbeat_interval_seconds)
            seq += 1
            outgoing.put_nowait(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(seq=seq)))

    async def _rotate(self, stub: worker_pb2_grpc.WorkerGatewayStub) -> None:
        """Take a new credential, save it, then reconnect with it (which retires the old one).

        Saved before it is used: the coordinator keeps the old credential valid until the new
        one is first used, so a crash at any point leaves a credential that works."""
        reply = await stub.RotateCredential(
            worker_pb2.RotateCredentialRequest(), metadata=self._metadata, timeout=30
        )
        if self._save_credential is not None:
            await asyncio.to_thread(self._save_credential, reply.credential)
        self._metadata = auth_metadata(reply.credential)
        if self._transport is not None:
            self._transport.use_credential(reply.credential)
        log.info("credential rotated at the coordinator's request; reconnecting with it")
        raise ConnectionLost("credential rotated")

    async def _receive(
        self,
        call: Call,
        welcome: worker_pb2.Welcome,
        outgoing: asyncio.Queue[WorkerMessage],
        stub: worker_pb2_grpc.WorkerGatewayStub,
    ) -> None:
        # With stream liveness, the channel's keepalive pings (CHANNEL_OPTIONS) end a stream
        # whose coordinator stopped answering. An older coordinator acks heartbeats instead:
        # there, no message for a whole lease means it no longer sees us as online, so give
        # the stream up and reconnect rather than wait on a half-dead connection.
        silence = (
            None
            if welcome.stream_liveness
            else max(welcome.lease_ttl_seconds, 2 * welcome.heartbeat_interval_seconds)
        )
        while True:
            try:
                message = await asyncio.wait_for(call.read(), silence)
            except TimeoutError as exc:
                raise ConnectionLost(
                    f"no answer from the coordinator for {silence or 0:.0f} s"
                ) from exc
            if not isinstance(message, CoordinatorMessage):  # grpc.aio.EOF
                await _raise_status(call)
                return
            # Any message resets the silence; heartbeat acks carry nothing else.
            kind = message.WhichOneof("body")
            if kind == "dispatch":
                self._actions.dispatch(message.dispatch)
            elif kind == "cancel":
                self._actions.cancel(message.cancel)
            elif kind == "receipt_ack":
                self._actions.acknowledge(message.receipt_ack)
            elif kind == "peek":
                task = asyncio.create_task(self._answer_peek(message.peek, outgoing))
                self._peeking.add(task)
                task.add_done_callback(self._peeking.discard)
            elif kind == "watch":
                self._watcher.order(message.watch, outgoing.put_nowait)
            elif kind == "human_input":
                task = asyncio.create_task(self._answer_input(message.human_input, outgoing))
                self._peeking.add(task)
                task.add_done_callback(self._peeking.discard)
            elif kind == "rotate_credential":
                await self._rotate(stub)
            elif kind == "kill":
                if self._guard is not None:
                    self._guard.apply(_kill(message.kill), message.kill.engaged)
                log.warning(
                    "kill switch %s %s (%s): %s",
                    message.kill.kill_id,
                    "engaged" if message.kill.engaged else "released",
                    message.kill.scope,
                    message.kill.reason,
                )
                outgoing.put_nowait(_kill_ack(message.kill))

    async def _answer_peek(
        self, order: worker_pb2.PeekScreenNow, outgoing: asyncio.Queue[WorkerMessage]
    ) -> None:
        # Off the loop: a capture and encode of a large screen takes a while.
        result = await asyncio.to_thread(self._peek, order)
        log.info(
            "screen peek %s of display %d: %s",
            order.peek_id,
            order.display,
            result.error or f"{result.width}x{result.height} {result.media_type}",
        )
        outgoing.put_nowait(WorkerMessage(peek_result=result))

    async def _answer_input(
        self, order: worker_pb2.HumanInputNow, outgoing: asyncio.Queue[WorkerMessage]
    ) -> None:
        result = await self._human_input(order)
        # A person typing sends many small inputs: only the refused ones are worth a line.
        log.log(
            logging.INFO if result.code else logging.DEBUG,
            "takeover %s input %s: %d of %d events ran%s",
            order.takeover_id,
            order.input_id,
            result.applied,
            len(order.events),
            f" ({result.code}: {result.error})" if result.code else "",
        )
        outgoing.put_nowait(WorkerMessage(input_result=result))


HumanInputHandler: TypeAlias = Callable[
    [worker_pb2.HumanInputNow], Awaitable[worker_pb2.HumanInputResult]
]


async def _no_human_input(order: worker_pb2.HumanInputNow) -> worker_pb2.HumanInputResult:
    return worker_pb2.HumanInputResult(
        input_id=order.input_id,
        error=NO_DESKTOP_INPUT,
        code="no_display",
    )


def _kill(state: worker_pb2.KillState) -> Kill:
    return Kill(state.kill_id, state.scope, state.target, state.reason)


def _kill_ack(state: worker_pb2.KillState) -> WorkerMessage:
    # Acknowledged once applied: the guard is updated before this is queued.
    return WorkerMessage(kill_ack=worker_pb2.KillAck(kill_id=state.kill_id, engaged=state.engaged))


async def _raise_status(call: Call) -> None:
    """Raise the stream's final status as AioRpcError when it is an error."""
    code = await call.code()
    if code != grpc.StatusCode.OK:
        raise grpc.aio.AioRpcError(
            code,
            await call.initial_metadata(),
            await call.trailing_metadata(),
            details=await call.details(),
        )


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else "no details"
