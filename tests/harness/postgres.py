"""The local PostgreSQL server: whether it answers, scratch databases on it, and a relay to it
that a test can cut."""

from __future__ import annotations

import atexit
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PG_ADMIN_URL = "postgresql://root@127.0.0.1:5432/test"


def postgres_available(host: str = "127.0.0.1", port: int = 5432) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def scratch_database(admin_url: str = PG_ADMIN_URL) -> Iterator[str]:
    """A new, empty database on the server of `admin_url` (its URL), dropped afterwards."""
    import psycopg

    name = f"deskfleet_t_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_template_lock = threading.Lock()
_templates: dict[str, tuple[str, Path]] = {}


def _drop(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def initialised_database(
    init: Callable[[str, Path], None], admin_url: str = PG_ADMIN_URL
) -> Iterator[tuple[str, Path]]:
    """A new database holding an initialised store (its URL), and the directory with that
    store's `admin.token` and `secrets.key`; dropped afterwards.

    `init(url, directory)` initialises one database once per test process; each database
    after that is a server-side copy of it (CREATE DATABASE ... TEMPLATE), which takes a
    fraction of the migrations' time. The copies share its admin token and secrets key.
    """
    import psycopg

    with _template_lock:
        if admin_url not in _templates:
            name = f"deskfleet_tpl_{secrets.token_hex(4)}"
            where = Path(tempfile.mkdtemp(prefix="deskfleet-pg-template-"))
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            atexit.register(shutil.rmtree, where, True)
            atexit.register(_drop, admin_url, name)
            init(admin_url.rsplit("/", 1)[0] + f"/{name}", where)
            _templates[admin_url] = (name, where)
        template, where = _templates[admin_url]
    name = f"deskfleet_t_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}", where
    finally:
        _drop(admin_url, name)


class TcpProxy:
    """A loopback TCP relay to PostgreSQL that a test can cut, like a database going away."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.alive:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.alive:
                client.close()
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    continue
            src.close()

    def cut(self) -> None:
        self.alive = False
        # shutdown() first: close() alone leaves a listener that a thread blocks in accept() on.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
