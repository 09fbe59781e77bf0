"""Recovery: the coordinator killed with SIGKILL mid-work, then everything running again.

  fleet     W real `deskfleet-worker run` processes and S simulated workers that reconnect as
            a real worker does (bench/simulated_workers.py --reconnect, in their own processes)
  work      R runs of A no-op actions each (diag.echo, idempotent), submitted before the kill;
            the coordinator is killed once a tenth of the actions have receipts
  restart   a new coordinator process at once, on the same store and the same port
  figures   seconds from the SIGKILL to:
              coordinator up          the new process listens
              workers reconnected     every worker holds a new lease (its lease_expires_at is
                                      later than any lease the killed process could have given)
              runs resumed            every run that was not finished has a new receipt (its
                                      count of succeeded actions above the first read after
                                      the restart)
              runs completed          every run SUCCEEDED
            then, from the store: every action has exactly one succeeded receipt (none lost,
            none duplicated), or the bench fails
              coordinator CPU         seconds of CPU the new process used by each of those marks
There is no baseline: the figures are absolute. They include the workers' reconnection
backoff (50-200 ms for the first retry, then up to 0.5 s doubling per failed attempt) and a
real worker measuring its capabilities again on connecting.

Usage: python -m bench.recovery [--quick] [--workers N] [--py-spy PATH --profile OUT]
  --workers N   N workers in all (the real ones included), instead of the mode's size
  --profile OUT records the new coordinator process with py-spy (PATH: its binary) from the
                restart until every run resumed, as a speedscope file
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.runs import Client
from bench.simulated_workers import SimulatedFleet
from shared.gen.deskfleet.v1 import fleet_pb2, runs_pb2
from tests.harness import CoordinatorProcess, WorkerProcess, tail, wait_until

HEARTBEAT, LEASE = 5.0, 15.0  # the coordinator's defaults
TIMEOUT = 300.0
POLL = 0.1


def sizes(quick: bool, workers: int | None = None) -> dict[str, int]:
    """The mode's sizes; `workers` (real ones included) replaces its fleet size."""
    if quick:
        size = {"real_workers": 1, "simulated_workers": 50, "runs": 6, "actions_per_run": 30}
    else:
        size = {"real_workers": 2, "simulated_workers": 500, "runs": 20, "actions_per_run": 30}
    if workers is not None:
        size["real_workers"] = min(size["real_workers"], workers)
        size["simulated_workers"] = workers - size["real_workers"]
    return size


def _cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _runs(client: Client, ids: set[str]) -> dict[str, runs_pb2.Run]:
    listed = client.runs.ListRuns(
        runs_pb2.ListRunsRequest(limit=1000), metadata=client.metadata, timeout=30
    )
    return {r.id: r for r in listed.runs if r.id in ids}


def _reconnected(client: Client) -> int:
    """Workers online again: a restarted replica clears the presence its previous process
    left before it serves, so every worker it counts online has opened a stream since."""
    # One row of the page: asked ten times a second, the default 100 rows would be
    # coordinator work of the bench's own.
    status = client.fleet.GetWorkerStatus(
        fleet_pb2.GetWorkerStatusRequest(limit=1), metadata=client.metadata, timeout=30
    )
    return int(status.online)


def _stuck(
    marks: dict[str, float],
    back: int,
    total: int,
    runs: dict[str, runs_pb2.Run],
    workers: list[WorkerProcess],
) -> str:
    """Why recovery did not finish: what came back, what did not, and any worker that died."""
    missing = [m for m in ("reconnected", "resumed", "completed") if m not in marks]
    states = Counter(r.status for r in runs.values())
    said = [
        f"no {', '.join(missing)} {TIMEOUT:.0f} s after the kill:",
        f"{back}/{total} workers reconnected,",
        "runs " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())),
    ]
    for w in workers:
        if w.proc is not None and w.proc.poll() is not None:
            said.append(f"; worker {w.name} exited {w.proc.returncode}: {tail(w.log, 1)}")
    return " ".join(said)


def _receipts(store: Path, run_ids: set[str]) -> dict[str, int]:
    """From the store itself: actions of these runs with no succeeded receipt (lost) and with
    more than one (duplicated)."""
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        marks = ",".join("?" * len(run_ids))
        counts = db.execute(
            f"SELECT a.id, (SELECT COUNT(*) FROM receipts r WHERE r.action_id = a.id"
            f" AND r.status = 'succeeded') FROM actions a WHERE a.run_id IN ({marks})",
            sorted(run_ids),
        ).fetchall()
    return {
        "actions": len(counts),
        "lost": sum(1 for _, n in counts if n == 0),
        "duplicated": sum(1 for _, n in counts if n > 1),
    }


def run(
    quick: bool, workers: int | None = None, profile: tuple[str, Path] | None = None
) -> dict[str, Any]:
    """`profile`: (py-spy binary, output file) to record the restarted coordinator."""
    size = sizes(quick, workers)
    total_workers = size["real_workers"] + size["simulated_workers"]
    with (
        tempfile.TemporaryDirectory(prefix="deskfleet-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        coordinator = CoordinatorProcess(
            Path(tmp) / "coord", heartbeat=HEARTBEAT, lease=LEASE, sweep=1.0
        )
        stack.callback(coordinator.stop)
        coordinator.start()
        client = Client(coordinator)
        stack.callback(client.channel.close)
        workers = [WorkerProcess(coordinator, f"real-{i}") for i in range(size["real_workers"])]
        for w in workers:
            stack.callback(w.stop)
            w.start()
        for w in workers:
            w.wait_online(90)
        fleet = SimulatedFleet(
            coordinator.address, coordinator.admin_token_file, Path(tmp) / "sims", reconnect=True
        )
        stack.callback(fleet.stop)
        fleet.grow(size["simulated_workers"], timeout=180)
        wait_until(
            lambda: client.online() >= total_workers, 60, 0.2, f"{total_workers} workers online"
        )

        ids = {client.submit(size["actions_per_run"]) for _ in range(size["runs"])}
        actions = size["runs"] * size["actions_per_run"]
        wait_until(
            lambda: sum(r.actions_succeeded for r in _runs(client, ids).values()) >= actions // 10,
            120,
            0.05,
            "a tenth of the actions to succeed",
        )
        killed = time.time()
        assert coordinator.proc is not None
        coordinator.kill()
        coordinator.start(port=coordinator.port)
        marks: dict[str, float] = {"coordinator_up": time.time() - killed}
        assert coordinator.proc is not None
        pid = coordinator.proc.pid
        cpu: dict[str, float] = {"coordinator_up": _cpu_seconds(pid)}  # its start (imports)
        if profile is not None:
            spy = subprocess.Popen(
                [
                    profile[0],
                    "record",
                    "--pid",
                    str(pid),
                    "--format",
                    "speedscope",
                    "--rate",
                    "200",
                    "--output",
                    str(profile[1]),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            stack.callback(spy.wait, 30)
            stack.callback(spy.send_signal, 2)
        # A new channel: the old one may sit in its reconnection backoff after the kill.
        client = Client(coordinator)
        stack.callback(client.channel.close)
        first = _runs(client, ids)
        done_at_kill = sum(1 for r in first.values() if r.status == "SUCCEEDED")
        waiting = {i: r.actions_succeeded for i, r in first.items() if r.status != "SUCCEEDED"}
        deadline = time.monotonic() + TIMEOUT
        while len(marks) < 4:
            now = time.time()
            back = _reconnected(client)
            if "reconnected" not in marks and back >= total_workers:
                marks["reconnected"] = now - killed
                cpu["reconnected"] = _cpu_seconds(pid)
            current = _runs(client, ids)
            if time.monotonic() > deadline:
                raise TimeoutError(_stuck(marks, back, total_workers, current, workers))
            bad = [r for r in current.values() if r.status in ("FAILED", "CANCELLED")]
            if bad:
                raise RuntimeError(f"run {bad[0].id} ended {bad[0].status}: {bad[0].stop_reason}")
            if "resumed" not in marks and all(
                current[i].actions_succeeded > n or current[i].status == "SUCCEEDED"
                for i, n in waiting.items()
            ):
                marks["resumed"] = now - killed
                cpu["resumed"] = _cpu_seconds(pid)
                if profile is not None:
                    spy.send_signal(2)  # SIGINT: py-spy writes its file and exits
            if "completed" not in marks and all(r.status == "SUCCEEDED" for r in current.values()):
                marks["completed"] = now - killed
                cpu["completed"] = _cpu_seconds(pid)
            time.sleep(POLL)
        for w in workers:
            if w.proc is not None and w.proc.poll() is not None:
                raise RuntimeError(f"worker {w.name} exited: {tail(w.log, 3)}")
        fleet.check()
        receipts = _receipts(Path(tmp) / "coord" / "fleet.db", ids)
    if receipts["lost"] or receipts["duplicated"]:
        raise RuntimeError(f"receipts after the restart: {receipts}")
    return {
        "settings": {
            **size,
            "heartbeat_s": HEARTBEAT,
            "lease_s": LEASE,
            "store": "sqlite",
            "kill": "SIGKILL once a tenth of the actions had receipts",
        },
        "runs_finished_before_the_kill": done_at_kill,
        "runs_interrupted": len(waiting),
        "seconds_after_kill": marks,
        "receipts": receipts,
        "coordinator_cpu_seconds": {k: round(v, 2) for k, v in cpu.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="51 workers, 6 runs")
    parser.add_argument("--workers", type=int, help="workers in all (real ones included)")
    parser.add_argument("--py-spy", default="", help="py-spy binary, for --profile")
    parser.add_argument("--profile", type=Path, help="speedscope file of the restarted process")
    args = parser.parse_args()
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.profile is not None and not args.py_spy:
        parser.error("--profile needs --py-spy PATH")
    doc = run(args.quick, args.workers, (args.py_spy, args.profile) if args.profile else None)
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
