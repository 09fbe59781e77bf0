"""Prometheus metrics: a scripted scenario against a real coordinator and worker, scraped over
HTTP and parsed as the text format, with the exact counts the scenario must produce."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.heart import ledger
from coordinator.observe.metrics import CoordinatorMetrics
from shared.states import RUN_KINDS, RUN_STATES
from tests.harness import (
    BIN,
    CoordinatorProcess,
    WorkerProcess,
    Xvfb,
    base_env,
    run_together,
    submit,
    tail,
    wait_run,
    wait_until,
    write_plan,
)
from worker_agent.metrics import WorkerMetrics

METRICS = ("--metrics-listen", "127.0.0.1:0")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when absent (a counter nobody incremented has no child yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def labelled(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name and v}


def coordinator_metrics_port(coordinator: CoordinatorProcess) -> int:
    # Printed right after the "listening on" line the harness reads.
    assert coordinator.proc is not None and coordinator.proc.stdout is not None
    line = coordinator.proc.stdout.readline().strip()
    assert " metrics on " in line, line
    return int(line.rsplit(":", 1)[1])


def worker_metrics_port(worker: WorkerProcess) -> int:
    def logged() -> int | None:
        found = re.findall(r"metrics on 127\.0\.0\.1:(\d+)", worker.log.read_text())
        return int(found[-1]) if found else None

    port: int = wait_until(logged, 30, 0.1, "the worker's metrics line")
    return port


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    proc = CoordinatorProcess(tmp_path / "coord", serve_args=METRICS).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CoordinatorProcess, int]]:
    """One metered coordinator, and its metrics port, for the tests that submit no run: they
    read its exposition or enroll a worker, which leaves every run gauge at zero. (A start is
    seconds of the two cores; the tests that run work or restart it have their own.)"""
    proc = CoordinatorProcess(tmp_path_factory.mktemp("untouched"), serve_args=METRICS).start()
    port = coordinator_metrics_port(proc)
    yield proc, port
    proc.stop()


@pytest.fixture
def coordinator(untouched: tuple[CoordinatorProcess, int]) -> CoordinatorProcess:
    return untouched[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.slow
def test_a_scripted_scenario_gives_exact_counts_on_both_endpoints(
    metered: CoordinatorProcess, tmp_path: Path
) -> None:
    coordinator = metered
    c_port = coordinator_metrics_port(coordinator)
    worker = WorkerProcess(coordinator, "w", extra_args=(*METRICS, "--no-computer-use")).start()
    try:
        worker.wait_online()
        w_port = worker_metrics_port(worker)
        _scenario(coordinator, worker, c_port, w_port, tmp_path)
    finally:
        worker.stop()


def _scenario(
    coordinator: CoordinatorProcess,
    worker: WorkerProcess,
    c_port: int,
    w_port: int,
    tmp_path: Path,
) -> None:
    # Two echoes, then an action that fails once and succeeds on its retry.
    ok = submit(
        coordinator,
        write_plan(
            tmp_path / "ok.json",
            [
                {"kind": "diag.echo", "args": {"value": 1}, "idempotent": True},
                {"kind": "diag.echo", "args": {"value": 2}, "idempotent": True},
                {"kind": "diag.fail", "args": {"fail_attempts": 1}, "idempotent": True},
            ],
        ),
        wait=True,
    )
    assert ok["status"] == "SUCCEEDED"
    # An action that always fails: three attempts (two retries), then the run stops.
    failed = submit(
        coordinator,
        write_plan(
            tmp_path / "fail.json",
            [{"kind": "diag.fail", "args": {"message": "no"}, "idempotent": True}],
        ),
        wait=True,
    )
    assert failed["status"] == "FAILED"
    coordinator.cli_json("kill", "engage", "--worker", worker.worker_id, "--reason", "metrics")
    # A desktop run left waiting for its approval (the desktop need not be online to ask).
    desk = WorkerProcess(coordinator, "desk")
    assert desk.enroll().returncode == 0
    coordinator.cli_json("desktop", "request", "--worker", desk.worker_id, "--action=screenshot")

    c = scrape(c_port)
    assert labelled(c, "deskfleet_actions_total") == {
        frozenset({("kind", "diag.echo"), ("status", "succeeded")}): 2,
        frozenset({("kind", "diag.fail"), ("status", "failed")}): 4,
        frozenset({("kind", "diag.fail"), ("status", "succeeded")}): 1,
    }
    assert labelled(c, "deskfleet_receipts_total") == {frozenset({("verdict", "accepted")}): 7}
    assert labelled(c, "deskfleet_retries_total") == {
        frozenset({("kind", "diag.fail"), ("cause", "action_failed")}): 3
    }
    assert labelled(c, "deskfleet_handbacks_total") == {
        frozenset({("kind", "plan"), ("state", "FAILED"), ("reason", "action_failed")}): 1,
        frozenset(
            {("kind", "desktop"), ("state", "WAITING_FOR_AUTHORITY"), ("reason", "needs_approval")}
        ): 1,
    }
    assert value(c, "deskfleet_dispatch_latency_seconds_count") == 7
    assert value(c, "deskfleet_action_duration_seconds_count", kind="diag.echo") == 2
    assert value(c, "deskfleet_action_duration_seconds_count", kind="diag.fail") == 5
    # Both plans spent their whole life RUNNING, counted when they left it; nothing has left
    # a final state.
    seconds = labelled(c, "deskfleet_run_state_seconds_total")
    assert seconds[frozenset({("kind", "plan"), ("state", "RUNNING")})] > 0
    assert not {state for labels in seconds for key, state in labels if key == "state"} & {
        "SUCCEEDED",
        "FAILED",
    }
    assert labelled(c, "deskfleet_runs") == {
        frozenset({("state", "SUCCEEDED")}): 1,
        frozenset({("state", "FAILED")}): 1,
        frozenset({("state", "WAITING_FOR_AUTHORITY")}): 1,
    }
    # The finished plans left no work; the desktop run waiting for its approval is blocked.
    assert labelled(c, "deskfleet_work_units") == {
        frozenset({("kind", "desktop"), ("state", "blocked")}): 1
    }
    assert value(c, "deskfleet_workers_online", capability="headless", replica="r1") == 1
    assert value(c, "deskfleet_workers_online", capability="computer_use", replica="r1") == 0
    assert value(c, "deskfleet_worker_streams", replica="r1") == 1
    assert value(c, "deskfleet_kill_switches_engaged", scope="worker") == 1
    assert value(c, "deskfleet_kill_switches_engaged", scope="fleet") == 0
    assert value(c, "deskfleet_approvals_waiting") == 1
    assert value(c, "deskfleet_store_up") == 1
    assert labelled(c, "deskfleet_recovery_attempts_total") == {}
    assert labelled(c, "deskfleet_store_errors_total") == {}
    # Every receipt, dispatch and submission above was a write transaction with a commit.
    writes = value(c, "deskfleet_store_transactions_total", access="write")
    assert writes >= 7
    committing = value(c, "deskfleet_store_busy_seconds_total", access="write", phase="commit")
    running = value(c, "deskfleet_store_busy_seconds_total", access="write", phase="unit")
    assert committing > 0 and running > 0
    assert (
        0
        < value(c, "deskfleet_store_cpu_seconds_total", access="write")
        <= (committing + running) * 1.05
    )  # thread CPU clock and wall clock tick apart
    assert value(c, "deskfleet_store_transactions_total", access="read") >= 1

    w = scrape(w_port)
    assert labelled(w, "deskfleet_worker_actions_total") == {
        frozenset({("kind", "diag.echo"), ("status", "succeeded")}): 2,
        frozenset({("kind", "diag.fail"), ("status", "failed")}): 4,
        frozenset({("kind", "diag.fail"), ("status", "succeeded")}): 1,
    }
    assert value(w, "deskfleet_worker_connected") == 1
    assert value(w, "deskfleet_worker_reconnects_total") == 0
    assert labelled(w, "deskfleet_worker_screenshot_bytes_total") == {}
    assert labelled(w, "deskfleet_worker_browser_pages_total") == {}

    # The coordinator dies under a running attempt. The new process recovers it once: the
    # worker's reconnect reconciliation keeps it (the usual case), or, when the worker comes
    # back after the sweep's grace on a loaded machine, the sweep expires and retries it.
    coordinator.cli("kill", "release", "--worker", worker.worker_id, "--reason", "done")
    slow = submit(
        coordinator,
        write_plan(
            tmp_path / "slow.json",
            [{"kind": "diag.sleep", "args": {"seconds": 5}, "idempotent": True}],
        ),
    )
    wait_run(coordinator, slow["id"], lambda r: r["actions"][0]["status"] == "STARTED")
    port = coordinator.port
    coordinator.kill()  # not stop: a graceful stop could still take the receipt
    coordinator.start(port=port)
    c_port = coordinator_metrics_port(coordinator)
    run = wait_run(coordinator, slow["id"], lambda r: r["status"] == "SUCCEEDED")
    c = scrape(c_port)
    recoveries = labelled(c, "deskfleet_recovery_attempts_total")
    assert labelled(c, "deskfleet_recovery_successes_total") == recoveries
    [(path, count)] = [(dict(labels)["path"], n) for labels, n in recoveries.items()]
    assert count == 1
    retries = labelled(c, "deskfleet_retries_total")
    if path == "reconnect":
        assert [a["attempts"] for a in run["actions"]] == [1]
        assert retries == {}
    else:
        assert path == "sweep"
        assert retries == {frozenset({("kind", "diag.sleep"), ("cause", "lease_expired")}): 1}
    assert labelled(c, "deskfleet_actions_total") == {
        frozenset({("kind", "diag.sleep"), ("status", "succeeded")}): 1
    }
    # The new process found in the store when the run entered its state, before the sleep.
    seconds = labelled(c, "deskfleet_run_state_seconds_total")
    assert sum(seconds.values()) >= 4.9
    w = scrape(w_port)
    assert value(w, "deskfleet_worker_reconnects_total") == 1
    assert value(w, "deskfleet_worker_connected") == 1


def _serve(workdir: Path, db_url: str, *listens: str) -> list[subprocess.CompletedProcess[str]]:
    """`serve --metrics-listen LISTEN` for each of `listens`, side by side: each stops at
    its metrics address."""
    argvs = [
        [
            str(BIN / "deskfleet-coordinator"),
            "serve",
            "--db",
            db_url,
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            listen,
        ]
        for listen in listens
    ]
    return run_together(*argvs, env=base_env(workdir))


def test_a_taken_or_malformed_metrics_address_stops_the_coordinator_with_one_line(
    tmp_path: Path, taken_port: int
) -> None:
    proc = CoordinatorProcess(tmp_path / "coord")
    proc.init()
    bad = ("nonsense", "127.0.0.1:http", "127.0.0.1:70000")
    taken, *malformed = _serve(proc.workdir, proc.db_url, f"127.0.0.1:{taken_port}", *bad)
    assert taken.returncode == 1
    assert taken.stderr.strip().splitlines()[-1] == (
        f"deskfleet-coordinator: cannot serve metrics on 127.0.0.1:{taken_port}:"
        " Address already in use"
    )
    assert "listening on" not in taken.stdout
    for value, done in zip(bad, malformed, strict=True):
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == (
            f"deskfleet-coordinator: --metrics-listen: expected HOST:PORT, not {value!r}"
        )
        assert "Traceback" not in done.stderr


def test_a_taken_metrics_port_stops_the_worker_with_one_line(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], taken_port: int
) -> None:
    worker = workers("w", start=False)
    assert worker.enroll().returncode == 0
    done = subprocess.run(
        [
            BIN / "deskfleet-worker",
            "run",
            "--state-dir",
            str(worker.state_dir),
            "--metrics-listen",
            f"127.0.0.1:{taken_port}",
        ],
        capture_output=True,
        text=True,
        env=worker.env(),
        timeout=60,
    )
    assert done.returncode == 1, tail(worker.log)
    assert done.stderr.strip().splitlines()[-1] == (
        f"deskfleet-worker: cannot serve metrics on 127.0.0.1:{taken_port}: Address already in use"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.postgres
@pytest.mark.slow
def test_replicas_on_one_store_each_count_their_own_streams_and_work(
    tmp_path: Path, pg_url: str
) -> None:
    a = CoordinatorProcess(tmp_path / "a", pg_url, replica="a", serve_args=METRICS)
    a.init()
    b = CoordinatorProcess(tmp_path / "b", pg_url, replica="b", serve_args=METRICS)
    b.workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(a.admin_token_file, b.admin_token_file)  # one store, one admin
    worker = WorkerProcess(a, "w", extra_args=("--no-computer-use",))
    try:
        a_port = coordinator_metrics_port(a.start())
        b_port = coordinator_metrics_port(b.start())
        worker.start().wait_online()
        # Submitted through b, run by a's worker: b decides, a sends and records the receipt.
        run = submit(
            b,
            write_plan(
                tmp_path / "one.json",
                [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": True}],
            ),
            wait=True,
        )
        assert run["status"] == "SUCCEEDED"
        on_a, on_b = scrape(a_port), scrape(b_port)
    finally:
        worker.stop()
        a.stop()
        b.stop()
    assert value(on_a, "deskfleet_workers_online", capability="headless", replica="a") == 1
    assert value(on_b, "deskfleet_workers_online", capability="headless", replica="b") == 0
    assert value(on_a, "deskfleet_worker_streams", replica="a") == 1
    assert value(on_b, "deskfleet_worker_streams", replica="b") == 0
    # The store's state is the same from either replica.
    for samples in (on_a, on_b):
        assert labelled(samples, "deskfleet_runs") == {frozenset({("state", "SUCCEEDED")}): 1}
    assert labelled(on_a, "deskfleet_actions_total") == {
        frozenset({("kind", "diag.echo"), ("status", "succeeded")}): 1
    }
    assert labelled(on_b, "deskfleet_actions_total") == {}
    assert value(on_a, "deskfleet_dispatch_latency_seconds_count") == 1
    assert value(on_b, "deskfleet_dispatch_latency_seconds_count") == 0


@pytest.mark.slow
@pytest.mark.display
def test_the_worker_counts_desktop_screenshot_bytes_and_browser_pages(
    metered: CoordinatorProcess, xvfb: Xvfb, site: str, tmp_path: Path
) -> None:
    coordinator = metered
    worker = WorkerProcess(coordinator, "desk", display_env=xvfb.env, extra_args=METRICS).start()
    try:
        worker.wait_online()
        w_port = worker_metrics_port(worker)
        fetches = [
            {
                "kind": "browser.fetch",
                "args": {"url": f"{site}{path}"},
                "idempotent": True,
                "route": {"capability": "headless"},
            }
            for path in ("/varn/north-light.html", "/varn/lens.html")
        ]
        run = submit(coordinator, write_plan(tmp_path / "fetch.json", fetches), wait=True)
        assert run["status"] == "SUCCEEDED", run["stopReason"]
        desktop = coordinator.cli_json(
            "desktop", "request", "--worker", worker.worker_id, "--action=screenshot"
        )
        [approval] = coordinator.cli_json("approvals", "list")["approvals"]
        assert approval["runId"] == desktop["id"]
        coordinator.cli("approvals", "approve", approval["id"])
        shot = tmp_path / "shot.png"
        coordinator.cli("desktop", "act", desktop["id"], "screenshot", "--out", str(shot))
        w = scrape(w_port)
    finally:
        worker.stop()
    assert labelled(w, "deskfleet_worker_actions_total") == {
        frozenset({("kind", "browser.fetch"), ("status", "succeeded")}): 2,
        frozenset({("kind", "desktop.screenshot"), ("status", "succeeded")}): 1,
    }
    assert labelled(w, "deskfleet_worker_browser_pages_total") == {
        frozenset({("status", "succeeded")}): 2
    }
    # Exactly the bytes the coordinator stored for the screenshot and handed back.
    assert labelled(w, "deskfleet_worker_screenshot_bytes_total") == {
        frozenset({("kind", "desktop.screenshot")}): shot.stat().st_size
    }


def _connections(db: str, allowed: bool) -> None:
    import psycopg

    from tests.harness import PG_ADMIN_URL

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{db}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,)
            )


@pytest.mark.postgres
def test_a_store_outage_is_counted_and_scrapes_say_the_store_is_down(
    tmp_path: Path, pg_url: str
) -> None:
    coordinator = CoordinatorProcess(tmp_path / "coord", pg_url, serve_args=METRICS).start()
    db = pg_url.rsplit("/", 1)[1]
    try:
        port = coordinator_metrics_port(coordinator)
        before = scrape(port)
        assert value(before, "deskfleet_store_up") == 1
        assert labelled(before, "deskfleet_store_errors_total") == {}
        _connections(db, allowed=False)
        try:

            def without_store() -> Samples | None:
                samples = scrape(port)
                return samples if value(samples, "deskfleet_store_up") == 0 else None

            wait_until(without_store, 30, 0.5, "a scrape without the store")
            # That scrape's own read failed (counted after its counters were read), and the
            # sweep's writes fail too: the count shows on the next scrape, never a conflict.
            down = scrape(port)
            assert value(down, "deskfleet_store_errors_total", kind="unavailable") >= 1
            assert value(down, "deskfleet_store_errors_total", kind="conflict") == 0
        finally:
            _connections(db, allowed=True)
        wait_until(
            lambda: value(scrape(port), "deskfleet_store_up") == 1, 30, 0.5, "the store back"
        )
    finally:
        coordinator.stop()


# --- the exposition: one path, no `*_created` series, every state, promtool's lint --------


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def exposition(port: int) -> str:
    status, text = get(port, "/metrics")
    assert status == 200
    return text


@pytest.fixture
def endpoints() -> Iterator[tuple[CoordinatorMetrics, WorkerMetrics]]:
    """Both processes' registries in this process, each counter and histogram with a child."""
    c, w = CoordinatorMetrics("r1"), WorkerMetrics()
    c.actions.labels("browser.fetch", "succeeded").inc()
    c.action_duration.labels("browser.fetch").observe(0.2)
    c.dispatched(1.0)
    w.finished("browser.fetch", "succeeded", 0)
    w.finished("desktop.screenshot", "succeeded", 1000)
    c.serve("127.0.0.1:0")
    w.serve("127.0.0.1:0")
    yield c, w
    c.close()
    w.close()


def test_every_run_state_is_a_series_at_zero_before_any_run(
    untouched: tuple[CoordinatorProcess, int],
) -> None:
    port = untouched[1]
    runs = labelled_all(scrape(port), "deskfleet_runs")
    assert runs == {state: 0.0 for state in RUN_STATES}
    units = {
        tuple(sorted(labels)): v
        for (n, labels), v in scrape(port).items()
        if n == "deskfleet_work_units"
    }
    assert units == {
        (("kind", kind), ("state", state)): 0.0
        for kind in RUN_KINDS
        for state in ("ready", "running", "blocked")
    }
    # The states the ledger writes are among them.
    assert {ledger.RUNNING, ledger.FAILED, ledger.HAND_BACK_TO_HUMAN} <= set(RUN_STATES)


def labelled_all(samples: Samples, name: str) -> dict[str, float]:
    return {dict(labels)["state"]: v for (n, labels), v in samples.items() if n == name}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian's prometheus package provides it)")
    return found


def test_promtool_finds_nothing_to_lint_on_either_endpoint(
    untouched: tuple[CoordinatorProcess, int], endpoints: tuple[CoordinatorMetrics, WorkerMetrics]
) -> None:
    tool = promtool()
    texts = {
        "coordinator (a process, with its store's gauges)": exposition(untouched[1]),
        "coordinator (counters with children)": exposition(endpoints[0].port),
        "worker": exposition(endpoints[1].port),
    }
    for name, text in texts.items():
        done = subprocess.run(
            [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        assert (done.returncode, done.stdout + done.stderr) == (0, ""), name


def series(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_both_endpoints_answer_at_metrics_only(
    endpoints: tuple[CoordinatorMetrics, WorkerMetrics],
) -> None:
    for metrics in endpoints:
        assert "deskfleet_" in exposition(metrics.port)
        for path in ("/", "/metrics/", "/metric", "/favicon.ico", "/metrics/x", "/other?x=1"):
            assert get(metrics.port, path) == (404, "not found: the metrics are at /metrics\n")


def test_no_created_series(endpoints: tuple[CoordinatorMetrics, WorkerMetrics]) -> None:
    c_port, w_port = (m.port for m in endpoints)
    on_c, on_w = series(exposition(c_port)), series(exposition(w_port))
    # The children exist (so a `_created` series would have appeared beside them) ...
    assert {"deskfleet_actions_total", "deskfleet_dispatch_latency_seconds_count"} <= on_c
    assert "deskfleet_worker_screenshot_bytes_total" in on_w
    # ... and none did.
    assert [n for n in on_c | on_w if n.endswith("_created")] == []
