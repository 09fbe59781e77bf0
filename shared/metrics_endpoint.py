"""The HTTP endpoint that serves a process's own Prometheus registry at /metrics."""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from shared.errors import DeskfleetError, InvalidArgumentError


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT (port 0: any free port), or a one-line error."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidArgumentError(f"--metrics-listen: expected HOST:PORT, not {value!r}")
    return host, int(port)


class MetricsEndpoint:
    """Serves one registry over HTTP in a daemon thread; closing is safe to repeat."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._server: WSGIServer | None = None
        self.port = 0

    def serve(self, listen: str) -> int:
        """Listen on HOST:PORT; returns the bound port. A taken port is a one-line error."""
        host, port = parse_listen(listen)
        try:
            self._server, _ = start_http_server(port, host, registry=self._registry)
        except OSError as exc:
            raise DeskfleetError(
                f"cannot serve metrics on {listen}: {exc.strerror or exc}"
            ) from exc
        self.port = int(self._server.server_address[1])
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
