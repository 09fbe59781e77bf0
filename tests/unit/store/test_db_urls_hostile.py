"""`--db` as a careless or hostile operator types it, in process: a password in a URL that
does not parse is never echoed, a store in memory is refused in one line (it was a
traceback), a path holding an escape sequence or a line break is spelled out instead of run by
the terminal, a path too long for the file system names the path, and a PostgreSQL URL the
driver refuses before connecting (a port out of range, a bad sslmode) is named as such, where
it was reported as a store with no deskfleet schema."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.app import cli

SECRET = "S3cretPw"


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


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://bob:{SECRET}@127.0.0.1:notaport/fleet",
        f"postgresql://bob:{SECRET}@[::1/fleet",
        f"postgres ql://bob:{SECRET}@db.example/fleet",
        f"postgresql://bob@127.0.0.1:notaport/fleet?sslmode=prefer&password={SECRET}",
    ],
)
def test_a_url_that_does_not_parse_never_shows_its_password(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["serve", "--db", url], capsys)
    assert code == 1
    assert SECRET not in out + err
    assert err.startswith("deskfleet-coordinator: --db: not a database URL: ")
    assert "bob:***@" in err or "password=***" in err, err
    assert err.count("\n") == 1


@pytest.mark.parametrize("command", ["init", "serve"])
def test_a_store_in_memory_is_refused_in_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--admin-token-file", str(tmp_path / "admin.token")] if command == "init" else []
    code, _, err = run([command, "--db", "sqlite:///:memory:", *extra], capsys)
    assert code == 1
    assert err == (
        "deskfleet-coordinator: --db: 'sqlite:///:memory:' is a store in memory, which no other"
        " connection or process sees; give a file, like sqlite:////abs/path/fleet.db\n"
    )
    assert not (tmp_path / "admin.token").exists()


def test_escapes_and_line_breaks_in_a_path_are_spelled_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = f"{tmp_path}/a\x1b[2Jb\nc.db"
    code, _, err = run(["serve", "--db", f"sqlite:///{path}"], capsys)
    assert code == 1
    assert "\x1b" not in err and err.count("\n") == 1, repr(err)
    shown = f"{tmp_path}/a\\x1b[2Jb\\nc.db"
    assert err.startswith(f"deskfleet-coordinator: no database file at {shown};")
    assert not os.path.exists(path)
    # init prints where it puts the store the same way.
    code, out, _ = run(
        ["init", "--db", f"sqlite:///{path}", "--admin-token-file", str(tmp_path / "t")], capsys
    )
    assert code == 0
    assert out.splitlines()[0] == f"store: sqlite at {shown}"


def test_a_path_too_long_for_the_file_system_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["serve", "--db", "sqlite:////tmp/" + "a" * 5000 + ".db"], capsys)
    assert code == 1
    assert err.startswith("deskfleet-coordinator: --db: the SQLite path '/tmp/aaaa")
    assert err.endswith("cannot be used: File name too long\n"), err
    assert len(err) < 300


@pytest.mark.parametrize(
    ("query", "said"),
    [(":99999/fleet", 'invalid port number: "99999"'), ("/fleet?sslmode=bogus", "sslmode")],
)
def test_a_url_the_driver_refuses_is_not_called_a_missing_schema(
    query: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["serve", "--db", f"postgresql://bob:{SECRET}@127.0.0.1{query}"], capsys)
    assert code == 1
    assert SECRET not in out + err
    assert "no deskfleet schema" not in err, err
    # The last line (serve run twice in one process logs a tracing warning before it).
    line = err.splitlines()[-1]
    assert line.startswith("deskfleet-coordinator: cannot use the store (postgresql at 127.0.0.1:")
    assert said in line, err


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        ("db..example", "'db..example'"),
        ("127.0.0.1,db..example", "'db..example'"),
        ("h" * 3000, "'" + "h" * 79 + "…'"),
    ],
)
def test_a_host_no_resolver_takes_is_one_line(
    host: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo like `db..example` was a UnicodeError traceback from inside the pool."""
    code, _, err = run(["serve", "--db", f"postgresql://bob@{host}/fleet"], capsys)
    assert code == 1
    assert err == (
        f"deskfleet-coordinator: --db: {shown} is not a host name (an empty label, or one past"
        " 63 characters); check its spelling\n"
    )


def test_an_unsupported_database_of_any_length_is_one_short_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["serve", "--db", "mysql" + "x" * 5000 + "://u@h/db"], capsys)
    assert code == 1
    assert err == (
        "deskfleet-coordinator: --db: unsupported database 'mysql" + "x" * 34 + "…'; use"
        " sqlite:////abs/path/fleet.db or postgresql://user@host/db\n"
    )
