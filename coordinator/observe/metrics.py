"""Prometheus metrics of one coordinator replica, served at /metrics by `--metrics-listen`.

Counters count what this process made durable: ledger transactions collect `Notes` while they
run and the notes are applied only after the commit, so a rolled-back or re-run transaction
counts once. Gauges (workers online, runs by state, approvals waiting, kill switches) are read
from the store when scraped, so every replica reports the same fleet-wide state, except
`deskfleet_workers_online`, which counts the streams of this replica (sum it over replicas).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session

from coordinator.model import capabilities
from coordinator.model.notes import (
    Finished,
    Notes,
    Recovered,
    ReportRefused,
    Retried,
    StateChange,
)
from coordinator.model.workers import view_of
from coordinator.store import counts, workers as worker_queries
from shared.metrics_endpoint import MetricsEndpoint
from shared.states import RUN_KINDS, RUN_STATES

if TYPE_CHECKING:
    from coordinator.store import Database
    from coordinator.streams.presence import Presence

log = logging.getLogger(__name__)

KILL_SCOPES = ("fleet", "worker", "run")
SCRAPE_TIMEOUT = 5.0
# Dispatch waits span milliseconds (a warm worker) to hours (a run waiting for one).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)

# ---------------------------------------------------------------------------- the metrics


class CoordinatorMetrics:
    """The replica's registry (its own, never prometheus_client's global one) and its metrics."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.actions = Counter(
            "deskfleet_actions",
            "Action attempts finished with a durable receipt, by kind and receipt status"
            " (each attempt of a retried action counts; per replica)",
            ["kind", "status"],
            registry=r,
        )
        self.receipts = Counter(
            "deskfleet_receipts",
            "Receipts ingested from workers, by verdict: accepted, duplicate (already"
            " recorded), refused (stale epoch, unknown action); per replica",
            ["verdict"],
            registry=r,
        )
        self.refused_reports = Counter(
            "deskfleet_refused_reports",
            "Receipts and starts refused from workers, by report and reason: bounds (refused"
            " as they arrived), stale_epoch, not_claimant, not_in_flight, unknown_action,"
            " bad_result, unrecordable; the journal holds only the first of each action,"
            " sender and reason; per replica",
            ["report", "reason"],
            registry=r,
        )
        self.streams_ended = Counter(
            "deskfleet_worker_streams_ended",
            "Worker streams this replica ended, by reason (refused_reports: past"
            " --max-refused-reports)",
            ["reason"],
            registry=r,
        )
        self.dispatch_latency = Histogram(
            "deskfleet_dispatch_latency_seconds",
            "From an action being ready (run submitted, previous stage done, failed attempt"
            " received) to its Dispatch handed to the worker's stream on this replica",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.action_duration = Histogram(
            "deskfleet_action_duration_seconds",
            "From an attempt's dispatch to its durable receipt, by kind",
            ["kind"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.state_seconds = Counter(
            "deskfleet_run_state_seconds",
            "Seconds runs spent in each state, added when they leave it (per replica: the"
            " replica that made the transition counts it)",
            ["kind", "state"],
            registry=r,
        )
        self.retries = Counter(
            "deskfleet_retries",
            "Attempts put back in line for another try, by kind and cause; per replica",
            ["kind", "cause"],
            registry=r,
        )
        self.recovery_attempts = Counter(
            "deskfleet_recovery_attempts",
            "In-flight attempts examined by recovery: the sweep (lapsed lease, overdue) or a"
            " worker's reconnect reconciliation; per replica",
            ["path"],
            registry=r,
        )
        self.recovery_successes = Counter(
            "deskfleet_recovery_successes",
            "Recovery attempts after which the work goes on without a person (kept, sent"
            " again, resumed or retried); per replica",
            ["path"],
            registry=r,
        )
        self.handbacks = Counter(
            "deskfleet_handbacks",
            "Runs that stopped or began waiting for a person, an authority or a capability,"
            " by the state entered and the reason; per replica",
            ["kind", "state", "reason"],
            registry=r,
        )
        self.store_errors = Counter(
            "deskfleet_store_errors",
            "Store errors: conflict (a deadlock or serialization failure, run again) or"
            " unavailable (given up); per replica",
            ["kind"],
            registry=r,
        )
        self._state = _StateCollector(replica)
        r.register(self._state)
        self._endpoint = MetricsEndpoint(self.registry)

    def observe(self, notes: Notes) -> None:
        """Count what a committed transaction did."""
        for note in notes.events:
            if isinstance(note, StateChange):
                self.state_seconds.labels(note.kind, note.old).inc(note.seconds)
                if note.handback:
                    self.handbacks.labels(note.kind, note.new, note.handback).inc()
            elif isinstance(note, Finished):
                self.actions.labels(note.kind, note.status).inc()
                if note.seconds is not None:
                    self.action_duration.labels(note.kind).observe(note.seconds)
            elif isinstance(note, Retried):
                self.retries.labels(note.kind, note.cause).inc()
            elif isinstance(note, Recovered):
                self.recovery_attempts.labels(note.path).inc()
                if note.ok:
                    self.recovery_successes.labels(note.path).inc()
            elif isinstance(note, ReportRefused):
                self.refused_reports.labels(note.report, note.reason).inc()
            else:
                self.receipts.labels(note.verdict).inc()

    def dispatched(self, ready_at: float) -> None:
        if ready_at > 0:
            self.dispatch_latency.observe(max(time.time() - ready_at, 0.0))

    def store_error(self, kind: str) -> None:
        self.store_errors.labels(kind).inc()

    def watch(self, db: Database, presence: Presence) -> None:
        """Read gauges from this store and these streams at scrape time (on the running loop)."""
        self._state.source = (db, presence, asyncio.get_running_loop())

    @property
    def port(self) -> int:
        return self._endpoint.port

    def serve(self, listen: str) -> int:
        """Serve /metrics on HOST:PORT in a daemon thread; returns the bound port."""
        return self._endpoint.serve(listen)

    def close(self) -> None:
        """Stop serving; safe to call twice."""
        self._state.source = None
        self._endpoint.close()


@dataclass(frozen=True)
class _Snapshot:
    online: dict[str, int]
    runs: dict[str, int]
    approvals: int
    kills: dict[str, int]
    units: dict[tuple[str, str], int]


def _busy(db: Database) -> Iterator[Metric]:
    """How busy the store's threads were: on SQLite, the write figures are the one writer
    every receipt and dispatch waits for (`store.engine.Busy`)."""
    transactions = CounterMetricFamily(
        "deskfleet_store_transactions",
        "Store transactions this replica ran, by access (write, read), committed or not",
        labels=["access"],
    )
    busy = CounterMetricFamily(
        "deskfleet_store_busy_seconds",
        "Seconds store threads spent in transactions, by access and phase: unit (from BEGIN to"
        " the unit's return) or commit (owner limits, the last flush, COMMIT and its fsync)",
        labels=["access", "phase"],
    )
    cpu = CounterMetricFamily(
        "deskfleet_store_cpu_seconds",
        "CPU seconds of store threads in transactions, by access (the rest of the busy"
        " seconds waited on the database or the disk)",
        labels=["access"],
    )
    for access, spent in sorted(db.busy.items()):
        transactions.add_metric([access], spent.transactions)
        busy.add_metric([access, "unit"], spent.unit_seconds)
        busy.add_metric([access, "commit"], spent.commit_seconds)
        cpu.add_metric([access], spent.cpu_seconds)
    yield from (transactions, busy, cpu)


class _StateCollector(Collector):
    """Gauges computed when scraped: one read of the store, made on the coordinator's loop."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.source: tuple[Database, Presence, asyncio.AbstractEventLoop] | None = None

    def collect(self) -> Iterator[Metric]:
        source = self.source
        up = GaugeMetricFamily(
            "deskfleet_store_up", "1 when the store answered this scrape's reads, else 0"
        )
        if source is None:
            return
        db, presence, loop = source
        streams = GaugeMetricFamily(
            "deskfleet_worker_streams", "Worker streams open on this replica", labels=["replica"]
        )
        streams.add_metric([self.replica], presence.connected)
        yield streams
        yield from _busy(db)
        try:
            read = asyncio.run_coroutine_threadsafe(db.read(self._read), loop)
            snap = read.result(SCRAPE_TIMEOUT)
        except Exception as exc:  # a scrape reports the failure as a gauge, never a 500
            log.warning("metrics: cannot read the store: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        online = GaugeMetricFamily(
            "deskfleet_workers_online",
            "Workers streaming to this replica that may take new work needing the capability",
            labels=["capability", "replica"],
        )
        for name, count in snap.online.items():
            online.add_metric([name, self.replica], count)
        yield online
        runs = GaugeMetricFamily("deskfleet_runs", "Runs in each state", labels=["state"])
        # Every state, at zero when no run is in it: a series that appears only once a run
        # enters the state cannot be alerted on or graphed before then.
        for state in (*RUN_STATES, *sorted(set(snap.runs) - set(RUN_STATES))):
            runs.add_metric([state], snap.runs.get(state, 0))
        yield runs
        units = GaugeMetricFamily(
            "deskfleet_work_units",
            "Work units of active runs by run kind and state: ready (waits only for its turn),"
            " running (in flight) or blocked (waits for a person, the environment or a child)",
            labels=["kind", "state"],
        )
        for kind in sorted({*RUN_KINDS, *(k for k, _ in snap.units)}):
            for state in counts.WORK_UNIT_STATES:
                units.add_metric([kind, state], snap.units.get((kind, state), 0))
        yield units
        yield GaugeMetricFamily(
            "deskfleet_approvals_waiting", "Approvals requested and not answered", snap.approvals
        )
        kills = GaugeMetricFamily(
            "deskfleet_kill_switches_engaged",
            "Kill switches engaged, by scope (fleet, worker, run)",
            labels=["scope"],
        )
        for scope in sorted({*KILL_SCOPES, *snap.kills}):
            kills.add_metric([scope], snap.kills.get(scope, 0))
        yield kills

    def _read(self, s: Session) -> _Snapshot:

        now = time.time()
        views = [
            view_of(w, p, now)
            for w, p in worker_queries.workers_with_presence(s, include_revoked=False)
        ]
        mine = [v for v in views if v.replica == self.replica]
        return _Snapshot(
            online={name: sum(v.offers(name) for v in mine) for name in capabilities.ALL},
            runs=counts.runs_by_status(s),
            approvals=counts.approvals_pending(s),
            kills=counts.kill_switches_engaged(s),
            units=counts.work_units(s),
        )
