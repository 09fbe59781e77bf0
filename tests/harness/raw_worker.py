"""A worker stream opened by hand: a real enrolled worker's credential on a real coordinator,
with every message chosen by the test (what a broken or hostile worker could send).

`deskfleet-worker` itself never sends these messages; this speaks `WorkerGateway.Connect`
directly, as `bench/simulated_workers.py` does, and keeps what the coordinator sends back.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from shared.advertisement import Advertisement, Capability
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc, worker_pb2, worker_pb2_grpc
from tests.harness.processes import CoordinatorProcess

_END = object()

HEADLESS = Advertisement(
    hostname="raw", capabilities=(Capability("headless", True), Capability("computer_use", False))
)


class RawWorker:
    """An enrolled worker whose stream the test drives: `connect`, `send`, `expect`."""

    def __init__(
        self, coordinator: CoordinatorProcess, name: str, *, capabilities: tuple[str, ...] = ()
    ) -> None:
        channel = coordinator.channel()
        assert channel is not None, "a raw worker needs the in-process channel (no TLS)"
        self._channel = channel
        token = admin_pb2_grpc.AdminServiceStub(channel).CreateEnrollmentToken(
            admin_pb2.CreateEnrollmentTokenRequest(
                ttl_seconds=600, uses=1, capabilities=list(capabilities)
            ),
            metadata=coordinator.admin_metadata(),
            timeout=30,
        )
        enrolled = worker_pb2_grpc.WorkerGatewayStub(channel).Enroll(
            worker_pb2.EnrollRequest(token=token.token, name=name), timeout=30
        )
        self.worker_id: str = enrolled.worker_id
        self.metadata = auth_metadata(enrolled.credential)
        self._out: queue.Queue[Any] = queue.Queue()
        self._in: queue.Queue[Any] = queue.Queue()
        self._kept: list[worker_pb2.CoordinatorMessage] = []
        self._call: Any = None
        self._reader: threading.Thread | None = None
        self.error: grpc.RpcError | None = None

    def _requests(self) -> Iterator[worker_pb2.WorkerMessage]:
        while True:
            item = self._out.get()
            if item is _END:
                return
            yield item

    def _read(self) -> None:
        try:
            for message in self._call:
                self._in.put(message)
        except grpc.RpcError as exc:
            self.error = exc
        self._in.put(_END)

    def open(self, hello: worker_pb2.Hello, *, read: bool = True) -> None:
        """Open the stream with this hello; the welcome (or the refusal) is read with `expect`.
        `read=False`: nothing the coordinator sends is ever read (a worker that stopped
        reading its stream), until `read_from_now`."""
        stub = worker_pb2_grpc.WorkerGatewayStub(self._channel)
        self._call = stub.Connect(self._requests(), metadata=self.metadata)
        self._out.put(worker_pb2.WorkerMessage(hello=hello))
        if read:
            self.read_from_now()

    def read_from_now(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def connect(self, advertisement: Advertisement = HEADLESS, **hello: Any) -> worker_pb2.Welcome:
        """Open the stream with a hello of this advertisement (stream liveness on, unless
        told otherwise), and wait for the welcome."""
        hello.setdefault("stream_liveness", True)
        self.open(worker_pb2.Hello(advertisement=advertisement.to_proto(), **hello))
        welcome: worker_pb2.Welcome = self.expect("welcome").welcome
        return welcome

    def reconnect(
        self, held: list[tuple[Any, str]], advertisement: Advertisement = HEADLESS
    ) -> worker_pb2.Welcome:
        """End this stream and open another, as a restarted worker would, its hello listing
        `held`: (a dispatch it holds, "running" or "interrupted") each."""
        self.close()
        self._out, self._in, self._kept, self.error = queue.Queue(), queue.Queue(), [], None
        return self.connect(
            advertisement,
            held=[
                worker_pb2.HeldAction(
                    action_id=d.action_id, attempt_id=d.attempt_id, epoch=d.epoch, state=state
                )
                for d, state in held
            ],
        )

    def send(self, **body: Any) -> None:
        self._out.put(worker_pb2.WorkerMessage(**body))

    def all_sent(self) -> bool:
        """Whether gRPC has taken every message sent so far (it takes them as the
        coordinator's flow control lets it)."""
        return self._out.empty()

    def expect(
        self, kind: str, timeout: float = 30, where: Any = None
    ) -> worker_pb2.CoordinatorMessage:
        """The next message of this kind (and matching `where`, if given); the others that
        arrive meanwhile are kept for later calls. Raises the stream's error if it ends."""
        deadline = time.monotonic() + timeout
        while True:
            for i, message in enumerate(self._kept):
                if message.WhichOneof("body") == kind and (where is None or where(message)):
                    return self._kept.pop(i)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} from the coordinator within {timeout} s")
            try:
                item = self._in.get(timeout=left)
            except queue.Empty:
                continue
            if item is _END:
                self._in.put(_END)
                if self.error is not None:
                    raise self.error
                raise EOFError(f"the stream ended before a {kind}")
            self._kept.append(item)

    def ended(self, timeout: float = 30) -> grpc.RpcError | None:
        """Wait for the stream to end; the error it ended with (None: it ended cleanly)."""
        assert self._reader is not None
        self._reader.join(timeout)
        assert not self._reader.is_alive(), f"the stream did not end within {timeout} s"
        return self.error

    def close(self) -> None:
        self._out.put(_END)
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            self._reader.join(10)
