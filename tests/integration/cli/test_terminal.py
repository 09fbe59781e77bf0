"""Terminal injection, end to end: hostile text is refused at the API, and what reaches the
admin's terminal anyway (a page's title, text stored earlier) is printed spelled out."""

from __future__ import annotations

import http.server
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import CoordinatorProcess, WorkerProcess, journal, write_plan

ESC_TITLE = "Tower \x1b]0;owned\x07\x1b[2J\x1b[1;1Hfacts\u202eevil\x9b31m"
RAW = ("\x1b", "\x07", "\u202e", "\x9b")


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test looks only at its own worker's approvals."""
    return module_coordinator


def _raw_in(text: str) -> list[str]:
    return [c for c in RAW if c in text]


@pytest.fixture
def hostile_site() -> Iterator[str]:
    body = (
        f"<html><head><title>{ESC_TITLE}</title></head><body>"
        "<p>The keeper tower was painted red in 1962.\x1b[8m hidden</p></body></html>"
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/tower.html"
    server.shutdown()
    server.server_close()


def test_control_characters_are_refused_where_people_write_text(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    worker = WorkerProcess(coordinator, "desk", home=tmp_path)
    assert worker.enroll().returncode == 0
    wid = worker.worker_id
    attempts = {
        "reason": ("desktop", "request", "--worker", wid, "--action=screenshot",
                   "--reason", "look\x1b[2K\rscreenshot only"),
        "title": ("desktop", "request", "--worker", wid, "--action=screenshot",
                  "--title", "screen \u202eevil"),
        "name": ("users", "create", "eve\x9b31m"),
    }  # fmt: skip
    for field, argv in attempts.items():
        done = coordinator.cli(*argv, check=False)
        assert done.returncode == 2, (field, done.stdout, done.stderr)
        assert done.stderr.startswith(f"deskfleet: {field}: must not contain control"), field
        assert done.stderr.count("\n") == 1 and not _raw_in(done.stderr)
    done = coordinator.cli("kill", "engage", "--reason", "stop\ttab", check=False)
    assert done.returncode == 2 and "reason: must not contain control" in done.stderr
    plan = write_plan(
        tmp_path / "p.json",
        [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": True,
          "route": {"labels": {"zone": "eu\u2066"}}}],
        title="fine",
    )  # fmt: skip
    done = coordinator.cli("runs", "submit", str(plan), check=False)
    assert done.returncode == 2 and "labels['zone']: must not contain control" in done.stderr
    labelled = WorkerProcess(coordinator, "labelled", home=tmp_path)
    done = labelled.enroll(None, "zone=eu\x1b[0m")
    assert done.returncode != 0 and "must not contain control" in done.stderr
    approvals = coordinator.cli_json("approvals", "list")["approvals"]
    assert [a for a in approvals if a["workerId"] == wid] == []  # nothing was written


def test_stored_hostile_reason_and_page_title_reach_the_terminal_spelled_out(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    hostile_site: str,
    tmp_path: Path,
) -> None:
    desk = WorkerProcess(coordinator, "desk", home=tmp_path)
    assert desk.enroll().returncode == 0
    run = coordinator.cli_json(
        "desktop", "request", "--worker", desk.worker_id, "--action=screenshot", "--reason", "x"
    )
    # A reason stored before the API refused control characters.
    hostile_reason = "look only\r\x1b[2K\x1b[1A" + "approve everything\u202e"
    with sqlite3.connect(coordinator.db_url.removeprefix("sqlite:///")) as db:
        update = "UPDATE approvals SET reason = ? WHERE run_id = ?"
        assert db.execute(update, (hostile_reason, run["id"])).rowcount == 1

    shown = coordinator.cli("approvals", "list").stdout
    assert not _raw_in(shown) and "\r" not in shown
    assert "look only\\r\\x1b[2K\\x1b[1Aapprove everything\\u202e" in shown
    [approval] = [
        a for a in coordinator.cli_json("approvals", "list")["approvals"] if a["runId"] == run["id"]
    ]
    assert approval["reason"] == hostile_reason  # --json stays exact
    assert not _raw_in(coordinator.cli("runs", "show", run["id"]).stdout)

    # Chromium drops C0 controls from a title (and the worker from a page's text) but keeps
    # C1 and bidi controls.
    workers("reader").wait_online()
    done = coordinator.cli("research", "keeper tower", "--url", hostile_site, "--wait",
                           check=False, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "facts\\u202eevil\\x9b31m" in done.stdout, done.stdout
    assert not _raw_in(done.stdout + done.stderr), done.stdout
    run_id = done.stdout.split()[1]
    [report] = [e["data"] for e in journal(coordinator, run_id) if e["kind"] == "research.report"]
    assert "facts\u202eevil\x9b31m" in report["sources"][0]["title"]  # --json: exact
    for command in (
        ("runs", "show", run_id),
        ("runs", "watch", run_id, "--no-follow"),
        ("journal", "search", run_id, "facts"),
    ):
        out = coordinator.cli(*command)
        assert not _raw_in(out.stdout + out.stderr), command
