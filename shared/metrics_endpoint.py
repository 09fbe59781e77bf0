"""The HTTP endpoint that serves a process's own Prometheus registry at /metrics (and nowhere
else: any other path is a 404)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, disable_created_metrics, make_wsgi_app

from shared.errors import DeskfleetError, InvalidArgumentError

PATH = "/metrics"
NOT_FOUND = b"not found: the metrics are at /metrics\n"

StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT (port 0: any free port), or a one-line error."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidArgumentError(f"--metrics-listen: expected HOST:PORT, not {value!r}")
    return host, int(port)


def metrics_only(app: App) -> App:
    """`app` at /metrics; 404 at every other path (prometheus_client answers on any)."""

    def route(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            start_response(
                "404 Not Found",
                [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", str(len(NOT_FOUND))),
                ],
            )
            return [NOT_FOUND]
        return app(environ, start_response)

    return route


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the process at exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not log lines
        pass


class MetricsEndpoint:
    """Serves one registry over HTTP in a daemon thread; closing is safe to repeat."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # `*_created` series (a counter's creation time) double every counter's series and say
        # nothing a restart's reset does not; the switch is process-wide, and every metric of
        # a deskfleet process is served here.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self._registry = registry
        self._server: WSGIServer | None = None
        self.port = 0

    def serve(self, listen: str) -> int:
        """Listen on HOST:PORT; returns the bound port. A taken port is a one-line error."""
        host, port = parse_listen(listen)
        app = metrics_only(make_wsgi_app(self._registry))
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

            class Server(_Server):
                address_family = family

            self._server = make_server(host, port, app, Server, handler_class=_QuietHandler)
        except OSError as exc:
            raise DeskfleetError(
                f"cannot serve metrics on {listen}: {exc.strerror or exc}"
            ) from exc
        threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True).start()
        self.port = int(self._server.server_address[1])
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
