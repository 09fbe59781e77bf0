"""Prometheus metrics of one worker, served at /metrics by `run --metrics-listen`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.metrics_endpoint import MetricsEndpoint

if TYPE_CHECKING:
    from worker_agent.connection import WorkerConnection

BROWSER_PREFIX = "browser."


class WorkerMetrics:
    """The worker's own registry: attempts it ran, bytes it captured, its stream."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.actions = Counter(
            "deskfleet_worker_actions",
            "Attempts this worker finished or refused, by kind and receipt status",
            ["kind", "status"],
            registry=r,
        )
        self.screenshot_bytes = Counter(
            "deskfleet_worker_screenshot_bytes",
            "Bytes of screenshots sent as receipt artifacts (desktop screenshots), by action"
            " kind; browser.screenshot images travel inside the result and are not counted",
            ["kind"],
            registry=r,
        )
        self.pages = Counter(
            "deskfleet_worker_browser_pages",
            "Pages the worker's browser loaded for browser actions (one per attempt), by status",
            ["status"],
            registry=r,
        )
        self._stream = _StreamCollector()
        r.register(self._stream)
        self._endpoint = MetricsEndpoint(r)

    @property
    def port(self) -> int:
        return self._endpoint.port

    def finished(self, kind: str, status: str, artifact_bytes: int) -> None:
        """An attempt is over (on the loop thread, once its receipt is recorded)."""
        self.actions.labels(kind, status).inc()
        if artifact_bytes:
            self.screenshot_bytes.labels(kind).inc(artifact_bytes)
        if kind.startswith(BROWSER_PREFIX):
            self.pages.labels(status).inc()

    def watch(self, connection: WorkerConnection) -> None:
        self._stream.connection = connection

    def serve(self, listen: str) -> int:
        return self._endpoint.serve(listen)

    def close(self) -> None:
        self._endpoint.close()


class _StreamCollector(Collector):
    """The stream's state, read from the connection when scraped."""

    def __init__(self) -> None:
        self.connection: WorkerConnection | None = None

    def collect(self) -> Iterator[Metric]:
        connection = self.connection
        if connection is None:
            return
        yield GaugeMetricFamily(
            "deskfleet_worker_connected",
            "1 while the stream to a coordinator is up (welcomed), else 0",
            int(connection.connected.is_set()),
        )
        yield CounterMetricFamily(
            "deskfleet_worker_reconnects",
            "Streams opened after the first one since the worker started",
            max(connection.sessions - 1, 0),
        )
