"""Wiring: the gRPC server with its servicers, health, reflection and the guard interceptor."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.agent import providers
from coordinator.agent.advice import Discussions
from coordinator.agent.conversation import Model
from coordinator.agent.loop import GOAL_RUNS, Goals
from coordinator.agent.tools import FleetTools
from coordinator.fleet.service import Fleet
from coordinator.heart.context import RunKind
from coordinator.heart.dispatch import Dispatcher
from coordinator.model.settings import CoordinatorConfig
from coordinator.observe.metrics import CoordinatorMetrics
from coordinator.runs.desktop.peeks import Peeks
from coordinator.runs.desktop.recordings import Recorder
from coordinator.runs.desktop.runs import DESKTOP_RUNS, Desktop
from coordinator.runs.desktop.takeovers import Takeovers
from coordinator.runs.desktop.watches import Watches
from coordinator.runs.export import RunExports
from coordinator.runs.indexer import JournalIndexer
from coordinator.runs.killswitch import KillSwitches
from coordinator.runs.questions import Questions
from coordinator.runs.quota import OwnerLimits, Quotas
from coordinator.runs.recall import Recall
from coordinator.runs.research import routing
from coordinator.runs.research.runs import RESEARCH_RUNS
from coordinator.runs.service import Runs, stopped_view
from coordinator.security import secret_box
from coordinator.security.certificates import WorkerCertificates
from coordinator.security.principals import Authenticator
from coordinator.security.ratelimit import FailureLimiter
from coordinator.security.secret_box import SecretBox
from coordinator.security.tls import SERVER_CERT, SERVER_KEY, CertificateAuthority
from coordinator.servicers.admin import AdminServicer
from coordinator.servicers.desktop import ApprovalServicer, DesktopServicer, KillSwitchServicer
from coordinator.servicers.fleet import FleetServicer
from coordinator.servicers.guard import GuardInterceptor
from coordinator.servicers.names import UserNames
from coordinator.servicers.runs import JournalServicer, RunServicer
from coordinator.servicers.worker_gateway import (
    WorkerGatewayServicer,
    add_to_server as add_worker_gateway,
)
from coordinator.store import Database
from coordinator.store.schema import head_revision
from coordinator.streams.followers import OpenStreams
from coordinator.streams.journal_bus import JournalBus
from coordinator.streams.presence import Presence
from coordinator.streams.relay import Relay
from coordinator.streams.worker_index import IndexUpdates, WorkerIndex
from shared.errors import FailedPreconditionError
from shared.gen.deskfleet.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    desktop_pb2,
    desktop_pb2_grpc,
    fleet_pb2,
    fleet_pb2_grpc,
    runs_pb2,
    runs_pb2_grpc,
    worker_pb2,
)
from shared.transport import is_loopback

# What each kind of run adds to the ledger's rules (a plan run needs nothing more).
RUN_KINDS: dict[str, RunKind] = {
    "research": RESEARCH_RUNS,
    "desktop": DESKTOP_RUNS,
    "goal": GOAL_RUNS,
}

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
    fleet_pb2.DESCRIPTOR.services_by_name["FleetService"].full_name,
    worker_pb2.DESCRIPTOR.services_by_name["WorkerGateway"].full_name,
    runs_pb2.DESCRIPTOR.services_by_name["RunService"].full_name,
    runs_pb2.DESCRIPTOR.services_by_name["JournalService"].full_name,
    desktop_pb2.DESCRIPTOR.services_by_name["DesktopService"].full_name,
    desktop_pb2.DESCRIPTOR.services_by_name["ApprovalService"].full_name,
    desktop_pb2.DESCRIPTOR.services_by_name["KillSwitchService"].full_name,
)

# Workers keep one stream open for hours: keepalives find dead peers that never sent a FIN.
SERVER_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


IDLE_CONNECTION_MS = 10_000


def server_options(config: CoordinatorConfig) -> list[tuple[str, int]]:
    """The stream is the worker's presence: gRPC's core pings every worker each heartbeat
    interval and ends the stream of one that has not answered within the rest of the lease,
    at least 5 s (a stopped process, a host gone without a FIN), so a dead worker goes offline
    within `max(lease_ttl, heartbeat + 5 s)`, with no Python message per beat."""
    # At least 5 s: every client of this server gets these pings, and a CLI waiting in a long
    # call on a loaded machine (or a GC pause) must not be cut off for a late ack.
    timeout = max(5000, int((config.lease_ttl - config.heartbeat_interval) * 1000))
    keepalive = {
        "grpc.keepalive_time_ms": max(1000, int(config.heartbeat_interval * 1000)),
        "grpc.keepalive_timeout_ms": timeout,
        # The core waits this long for any ping's ack (60 s unless set), keepalive's included.
        "grpc.http2.ping_timeout_ms": timeout,
        # Keep pinging a stream that carries no data (the default stops after two pings).
        "grpc.http2.max_pings_without_data": 0,
    }
    # Sockets that never finish a handshake, and more of them than descriptors to spare
    # (app/descriptors.py).
    bounds = {
        "grpc.server_handshake_timeout_ms": int(config.handshake_timeout * 1000),
        # A connection with no call open for this long is sent away (GOAWAY; a client of ours
        # reconnects at its next call): one that only answers pings holds no slot for good.
        "grpc.max_connection_idle_ms": IDLE_CONNECTION_MS,
    }
    if config.max_connections:
        bounds["grpc.max_allowed_incoming_connections"] = config.max_connections
    fixed = [(k, v) for k, v in SERVER_OPTIONS if k not in keepalive]
    return fixed + list(keepalive.items()) + list(bounds.items())


@dataclass(frozen=True)
class Transport:
    """How the listeners speak: plaintext, TLS, or TLS plus a worker listener that requires
    client certificates from our CA (`ca` set)."""

    credentials: grpc.ServerCredentials | None
    ca: CertificateAuthority | None = None
    worker_credentials: grpc.ServerCredentials | None = None
    worker_address: str = ""


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FailedPreconditionError(f"cannot read the {what} {path}: {exc.strerror}") from exc


def worker_address(listen: str) -> str:
    """The default worker listener: the same host, the next port (any free port for port 0)."""
    host, _, port = listen.rpartition(":")
    return f"{host}:{int(port) + 1 if port.isdigit() and int(port) else 0}"


def transport(config: CoordinatorConfig) -> Transport:
    """The listeners' credentials, or a one-line refusal of plaintext beyond this machine."""
    cert_file, key_file = config.tls_cert, config.tls_key
    if cert_file is None and key_file is None and config.ca_dir is not None:
        cert_file, key_file = config.ca_dir / SERVER_CERT, config.ca_dir / SERVER_KEY
    if (cert_file is None) != (key_file is None):
        raise FailedPreconditionError("--tls-cert and --tls-key go together")
    if cert_file is None or key_file is None:
        if not is_loopback(config.listen):
            if not config.plaintext:
                raise FailedPreconditionError(
                    f"refusing to serve plaintext on {config.listen}, beyond this machine: pass"
                    " --tls-cert and --tls-key (make them with `deskfleet-coordinator ca init`),"
                    " or --plaintext to accept it"
                )
            log.warning(
                "serving PLAINTEXT on %s: credentials cross the network unencrypted",
                config.listen,
            )
        return Transport(None)
    pair = [(_read(key_file, "TLS key"), _read(cert_file, "TLS certificate"))]
    if config.ca_dir is None:
        return Transport(grpc.ssl_server_credentials(pair))
    ca = CertificateAuthority.load(config.ca_dir)
    return Transport(
        grpc.ssl_server_credentials(pair),
        ca,
        grpc.ssl_server_credentials(
            pair, root_certificates=ca.pem.encode(), require_client_auth=True
        ),
        config.worker_listen or worker_address(config.listen),
    )


def _bind(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None) -> int:
    try:
        port = (
            server.add_insecure_port(address)
            if credentials is None
            else server.add_secure_port(address, credentials)
        )
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}") from exc
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return port


def create_server(
    address: str,
    db: Database,
    presence: Presence,
    dispatcher: Dispatcher,
    bus: JournalBus,
    config: CoordinatorConfig,
    kills: KillSwitches,
    relay: Relay,
    index: IndexUpdates,
    listeners: Transport | None = None,
    box: SecretBox | None = None,
) -> tuple[grpc.aio.Server, tuple[int, int], health.aio.HealthServicer, Goals, Recorder]:
    """Build (not start) the server; returns it, the bound ports (the worker listener's is 0
    without one), its health, and the parts with tasks of their own (goals, the recorder)."""
    listeners = listeners or Transport(None)
    auth = Authenticator(db)
    guard = GuardInterceptor(auth, FailureLimiter(config.auth_failures_per_minute))
    server = grpc.aio.server(interceptors=[guard], options=server_options(config))
    port = _bind(server, address, listeners.credentials)
    worker_port = (
        _bind(server, listeners.worker_address, listeners.worker_credentials)
        if listeners.ca is not None
        else 0
    )
    certificates = (
        WorkerCertificates(db, listeners.ca, config.worker_cert_days)
        if listeners.ca is not None
        else None
    )
    peeks = Peeks(db, presence, config.replica)
    watches = Watches(
        db,
        presence,
        config.replica,
        per_client=config.live_viewers_per_session,
        per_worker=config.live_viewers_per_worker,
    )
    takeovers = Takeovers(db, dispatcher, presence, config.replica)
    recorder = Recorder(
        db,
        dispatcher,
        watches,
        config.replica,
        fps=config.recording_fps,
        retention=config.recording_retention,
        max_bytes=config.recording_max_bytes,
    )
    quotas = Quotas(
        db,
        OwnerLimits(config.owner_max_active_runs, config.owner_max_stored_bytes),
        config.owner_max_secrets,
    )
    admin_pb2_grpc.add_AdminServiceServicer_to_server(
        AdminServicer(db, config, auth, quotas), server
    )
    fleet_pb2_grpc.add_FleetServiceServicer_to_server(
        FleetServicer(Fleet(db, presence, auth, dispatcher, index)), server
    )
    add_worker_gateway(
        WorkerGatewayServicer(
            db,
            presence,
            dispatcher,
            config,
            kills,
            peeks,
            certificates,
            worker_port,
            watches=watches,
            takeovers=takeovers,
        ),
        server,
    )
    runs = Runs(db, dispatcher, bus, config.allow_private_networks)
    bus.stop_view = stopped_view  # waiters are handed the view read as their run stops
    policy = routing.load(config.policy_file)
    desktop = Desktop(db, dispatcher, bus, box)
    recall = Recall(db)
    names = UserNames(db)
    goals = Goals(
        db,
        dispatcher,
        FleetTools(db, runs, desktop, recall, policy),
        _model_opener(config),
        context_budget=config.goal_context_budget,
        model_timeout=config.goal_model_timeout,
        question_wait=config.goal_question_wait,
        replica=config.replica,
        live_replicas=relay.live_replicas,
    )
    runs_pb2_grpc.add_RunServiceServicer_to_server(
        RunServicer(
            runs,
            policy,
            goals,
            OpenStreams(config.max_watch_streams),
            Questions(db, dispatcher),
            names=names,
            exports=RunExports(db, config.evidence_key_file, config.replica),
        ),
        server,
    )
    runs_pb2_grpc.add_JournalServiceServicer_to_server(JournalServicer(runs, recall), server)
    desktop_pb2_grpc.add_DesktopServiceServicer_to_server(
        DesktopServicer(desktop, names, watches, takeovers), server
    )
    discussions = Discussions(
        db,
        dispatcher,
        _model_opener(config),
        config.advice_model,
    )
    desktop_pb2_grpc.add_ApprovalServiceServicer_to_server(
        ApprovalServicer(desktop, peeks, discussions, names=names), server
    )
    desktop_pb2_grpc.add_KillSwitchServiceServicer_to_server(
        KillSwitchServicer(kills, names), server
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return server, (port, worker_port), health_servicer, goals, recorder


class Coordinator:
    """One running coordinator replica: store, presence and server, closed in reverse order."""

    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.port = 0
        self.worker_port = 0  # the listener that requires client certificates, if any
        self.metrics = CoordinatorMetrics(config.replica)
        self._db: Database | None = None
        self._presence: Presence | None = None
        self._dispatcher: Dispatcher | None = None
        self._kills: KillSwitches | None = None
        self._relay: Relay | None = None
        self._index: IndexUpdates | None = None
        self._goals: Goals | None = None
        self._indexer: JournalIndexer | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._recording: asyncio.Task[None] | None = None

    async def start(self) -> int:
        listeners = transport(self.config)  # first: a refused configuration opens nothing
        if self.config.metrics_listen:  # a taken port, too, stops the start before anything
            self.metrics.serve(self.config.metrics_listen)
        self._db = Database(self.config.db_url)
        self._db.on_error = self.metrics.store_error
        await self._db.check_schema(head_revision())
        box = await self._secret_box(self._db)
        self._index = IndexUpdates(self._db, WorkerIndex())
        await self._index.__aenter__()
        self._presence = Presence(self._db, self.config, self._index)
        await self._presence.__aenter__()
        bus = JournalBus()
        self._relay = Relay(self._db, self._presence, bus, self.config, self._index)
        self._dispatcher = Dispatcher(
            self._db,
            self._presence,
            bus,
            self.config,
            self._relay,
            self._index.index,
            self.metrics,
            kinds=RUN_KINDS,
        )
        self.metrics.watch(self._db, self._presence)
        self._kills = KillSwitches(self._db, self._dispatcher, self._presence, self.config.replica)
        await self._kills.__aenter__()
        (
            self._server,
            (self.port, self.worker_port),
            self._health,
            self._goals,
            recorder,
        ) = create_server(
            self.config.listen,
            self._db,
            self._presence,
            self._dispatcher,
            bus,
            self.config,
            self._kills,
            self._relay,
            self._index,
            listeners,
            box,
        )
        await self._relay.__aenter__()  # first: it refuses a second replica of the same name
        await self._server.start()
        await self._dispatcher.__aenter__()
        await self._goals.__aenter__()
        self._indexer = await JournalIndexer(self._db).__aenter__()
        if recorder.enabled:
            self._recording = asyncio.create_task(recorder.run(), name="recordings")
        for name in ("", *SERVICE_NAMES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        return self.port

    async def _secret_box(self, db: Database) -> SecretBox | None:
        """The key that seals secrets; stored plaintext values are sealed with it now."""
        path = self.config.secrets_key_file
        if path is None or not path.exists():
            plaintext = await db.read(secret_box.count_plaintext)
            log.warning(
                "no secrets key%s: secrets cannot be stored or typed%s",
                f" at {path}" if path else "",
                f"; {plaintext} stored value(s) are still plaintext" if plaintext else "",
            )
            return None
        box = SecretBox.load(path)
        sealed = await db.write(secret_box.seal_all, box, plaintext_only=True)
        if sealed:
            await db.checkpoint()
            log.info("sealed %d stored secret value(s) with the secrets key", sealed)
        return box

    async def wait(self) -> None:
        assert self._server is not None
        await self._server.wait_for_termination()

    async def stop(self, grace: float = 2.0) -> None:
        """Stop serving; safe to call twice."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self._recording is not None:
            self._recording.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._recording
            self._recording = None
        if self._indexer is not None:
            await self._indexer.__aexit__()
            self._indexer = None
        if self._goals is not None:
            await self._goals.__aexit__()
            self._goals = None
        if self._kills is not None:
            await self._kills.__aexit__()
            self._kills = None
        if self._dispatcher is not None:
            await self._dispatcher.aclose()
            self._dispatcher = None
        if self._relay is not None:
            await self._relay.aclose()
            self._relay = None
        self.metrics.close()
        if self._presence is not None:
            await self._presence.aclose()
            self._presence = None
        if self._index is not None:
            await self._index.aclose()
            self._index = None
        if self._db is not None:
            await self._db.close()
            self._db = None


def _model_opener(config: CoordinatorConfig) -> Callable[[str], Model]:
    """`open_model` with the operator's model settings: the scripts directory and the
    computer tool each provider is sent."""
    return functools.partial(
        providers.open_model,
        scripts_dir=config.scripted_models_dir,
        anthropic_computer_tool=config.anthropic_computer_tool,
        openai_computer_tool=config.openai_computer_tool,
    )
