"""`--db` taken literally, in process: a plain path, a relative SQLite URL, a missing or
mistaken file and a PostgreSQL server that is not there are each one line naming the fix,
and nothing is left behind. PostgreSQL's roles and databases are
tests/integration/store/test_db_urls.py."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.app import cli


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`main` sets the umask and configures logging, as a program does: put both back."""
    monkeypatch.chdir(tmp_path)
    umask = os.umask(0o022)
    os.umask(umask)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        os.umask(umask)
        root.handlers[:] = handlers
        root.setLevel(level)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("command", ["serve", "init", "rotate-secrets-key"])
def test_a_plain_path_is_offered_back_as_its_url(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--admin-token-file", "t"] if command == "init" else []
    code, out, err = run([command, "--db", "fleet.db", *extra], capsys)
    assert code == 1
    assert out == ""
    assert one_line(err) == (
        f"deskfleet-coordinator: --db: 'fleet.db' is not a database URL; for that file give"
        f" sqlite:///{tmp_path}/fleet.db (or postgresql://user@host/db)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "sqlite://fleet.db",
            "--db: 'sqlite://fleet.db' names no file; give one like sqlite:////abs/path/fleet.db"
            " (three slashes and a relative path: relative to the current directory)",
        ),
        (
            "mysql://root@localhost/x",
            "--db: unsupported database 'mysql'; use sqlite:////abs/path/fleet.db or"
            " postgresql://user@host/db",
        ),
        (
            "postgresql://me@db:port/x",
            "--db: not a database URL: 'postgresql://me@db:port/x'; give one like"
            " sqlite:////abs/path/fleet.db or postgresql://user@host/db",
        ),
    ],
)
def test_a_bad_url_names_a_good_one(
    url: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["serve", "--db", url], capsys)
    assert code == 1
    assert one_line(err) == f"deskfleet-coordinator: {said}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["serve", "rotate-secrets-key"])
def test_a_missing_file_is_named_and_not_created(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run([command, "--db", "sqlite:///flet.db"], capsys)
    assert code == 1
    assert one_line(err) == (
        f"deskfleet-coordinator: no database file at {tmp_path}/flet.db; run"
        f" `deskfleet-coordinator init --db sqlite:///{tmp_path}/flet.db` first"
    )
    assert list(tmp_path.iterdir()) == []  # no empty database, no -wal, no secrets key


def test_init_says_where_a_relative_url_put_the_store_and_serve_finds_the_slip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README's mistake: three slashes before var/lib/... is a path under the current
    # directory. Here the "absolute" store is tmp_path/store/fleet.db, written as it would be
    # with one slash too few, from a directory where the relative reading finds nothing.
    absolute = tmp_path / "store" / "fleet.db"
    code, out, err = run(
        ["init", "--db", f"sqlite:///{absolute}", "--admin-token-file", str(tmp_path / "t")],
        capsys,
    )
    assert code == 0, err
    assert out.splitlines()[0] == f"store: sqlite at {absolute}"

    relative = str(absolute).lstrip("/")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chdir(elsewhere)
    code, out, err = run(
        ["init", "--db", "sqlite:///sub/fleet.db", "--admin-token-file", "t2"], capsys
    )
    assert code == 0, err
    assert out.splitlines()[0] == (
        f"store: sqlite at {elsewhere}/sub/fleet.db (a path relative to the current directory;"
        f" sqlite:///{elsewhere}/sub/fleet.db names it from anywhere)"
    )

    code, _, err = run(["serve", "--db", f"sqlite:///{relative}"], capsys)
    assert code == 1
    assert one_line(err) == (
        f"deskfleet-coordinator: no database file at {elsewhere}/{relative};"
        f" sqlite:///{relative} is relative to the current directory: did you mean"
        f" sqlite:///{absolute}?"
    )
    assert sorted(p.name for p in elsewhere.iterdir()) == ["sub", "t2"]


def test_a_directory_is_not_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "store").mkdir()
    code, _, err = run(["init", "--db", "sqlite:///store", "--admin-token-file", "t"], capsys)
    assert code == 1
    assert one_line(err) == (
        f"deskfleet-coordinator: {tmp_path}/store is a directory; --db names the SQLite file,"
        f" e.g. {tmp_path}/store/fleet.db"
    )


def test_nothing_listening_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    url = f"postgresql://deskfleet@127.0.0.1:{port}/deskfleet"
    code, out, err = run(["init", "--db", url, "--admin-token-file", "t"], capsys)
    assert code == 1
    assert out == f"store: postgresql at 127.0.0.1:{port}/deskfleet as deskfleet\n"
    assert one_line(err) == (
        f"deskfleet-coordinator: nothing listening at 127.0.0.1:{port} (is PostgreSQL running?)"
    )
