"""The benchmark suite: every SPEC §6 figure beside its baseline, in one run, one document.

    .venv/bin/python -m bench.suite            full mode (`make bench`): writes
                                               bench/results/latest.json, renders
                                               docs/BENCHMARKS.md
    .venv/bin/python -m bench.suite --quick    quick mode (`make bench-quick`): smaller sizes,
                                               writes bench/results/quick.json, no docs
    --only round_trip,recovery                 some groups only (names: bench/groups.py)

Each group runs in a process of its own (its own session, so that everything it started can
be stopped), under a time limit. A group that fails or overruns becomes an error entry and
the others still run; the exit status is then 1. The document (see bench/validate.py for its
shape) records the machine, the commit, the command, the mode, the duration and the load
average at the start and at the end: figures taken on a loaded machine are not comparable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import figures, machine
from bench.groups import GROUPS
from bench.stats import table_lines

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "BENCHMARKS.md"
SCHEMA = 1
# Per group; generous, as they only stop a hung group: the sizes set the durations.
TIME_LIMIT = {True: 150.0, False: 1200.0}
GRACE = 30.0  # after SIGTERM, for a group to stop what it started
MAX_ERROR = 240  # characters of a group's error: one line in the table


def run_group_here(name: str, quick: bool, result: Path) -> int:
    """The child side: run one group, write its entries (or its error) to `result`."""
    # SIGTERM unwinds like Ctrl-C, so the benchmarks' finally blocks stop their processes.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        entries = GROUPS[name](quick)
        status = 0
    except KeyboardInterrupt:
        entries, status = [figures.error(name, "stopped (time limit or interrupt)")], 1
    except BaseException as exc:  # any failure is this group's error entry, not the suite's
        entries, status = [figures.error(name, describe(exc))], 1
    result.write_text(json.dumps(entries))
    return status


def describe(exc: BaseException) -> str:
    """One line on why a group failed: a failed command by its name and its last words."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):  # a gRPC error: its status and what it said
        text = f"RPC failed: {getattr(code(), 'name', code())}: {details()}"
    elif isinstance(exc, subprocess.CalledProcessError):
        argv = [Path(str(a)).name for a in exc.cmd[:2]] if isinstance(exc.cmd, list) else [exc.cmd]
        said = (exc.stderr or exc.stdout or "").strip().splitlines()
        text = f"{' '.join(argv)} exited {exc.returncode}" + (f": {said[-1]}" if said else "")
    else:
        detail = str(exc).strip().splitlines()
        text = f"{type(exc).__name__}: {detail[0] if detail else ''}".strip()
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 3] + "..."


def run_group(name: str, quick: bool, log: Path, limit: float) -> list[dict[str, Any]]:
    """The parent side: one group in its own process and session, stopped at `limit`."""
    with tempfile.TemporaryDirectory(prefix="deskfleet-suite-") as tmp:
        result = Path(tmp) / "entries.json"
        argv = [sys.executable, "-m", "bench.suite", "--group", name, "--result", str(result)]
        with log.open("w") as out:
            proc = subprocess.Popen(
                [*argv, *(["--quick"] if quick else [])],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                proc.wait(limit)
            except subprocess.TimeoutExpired:
                _stop(proc)
                return [figures.error(name, f"did not finish in {limit:.0f} s (log: {log})")]
            except KeyboardInterrupt:
                _stop(proc)
                raise
        if not result.exists():
            return [figures.error(name, f"exited {proc.returncode} without figures (log: {log})")]
        entries: list[dict[str, Any]] = json.loads(result.read_text())
        return entries


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group's process, then SIGKILL to its whole session if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(GRACE)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the session start_new_session gave it
    proc.wait()


def command() -> str:
    python = (
        os.path.relpath(sys.executable, ROOT)
        if sys.executable.startswith(str(ROOT))
        else sys.executable
    )
    return shlex.join([python, "-m", "bench.suite", *sys.argv[1:]])


def run_suite(names: list[str], quick: bool) -> dict[str, Any]:
    started = time.perf_counter()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "mode": "quick" if quick else "full",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command(),
        "git": machine.git_commit(),
        "machine": machine.describe(),
        "load_average": {"start": machine.load_average()},
        "groups": {},
        "figures": [],
    }
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.perf_counter()
        print(f"[{time.perf_counter() - started:6.1f} s] {name} ...", flush=True)
        entries = run_group(name, quick, logs / f"{name}.log", TIME_LIMIT[quick])
        seconds = time.perf_counter() - t0
        failed = [e for e in entries if e.get("error") is not None]
        doc["groups"][name] = {"seconds": round(seconds, 1), "ok": not failed}
        doc["figures"] += entries
        said = f"FAILED: {failed[0]['error']}" if failed else f"{len(entries)} figures"
        print(f"[{time.perf_counter() - started:6.1f} s] {name}: {said} ({seconds:.1f} s)")
    doc["load_average"]["end"] = machine.load_average()
    doc["duration_s"] = round(time.perf_counter() - started, 1)
    return doc


def table(doc: dict[str, Any]) -> str:
    lines = table_lines(
        ("figure", "value", "baseline (same run)", "ratio"), figures.rows(doc["figures"])
    )
    load = doc["load_average"]
    lines.append(
        f"{doc['mode']} mode, {doc['duration_s']:.0f} s; load average (1 min) {load['start'][0]}"
        f" at the start, {load['end'][0]} at the end, on {doc['machine']['cores']} cores"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.suite",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, no docs")
    parser.add_argument("--only", default="", help=f"comma-separated: {', '.join(GROUPS)}")
    parser.add_argument("--out", type=Path, help="the JSON document (latest.json; quick.json)")
    parser.add_argument(
        "--doc", type=Path, help="the markdown page to render (full mode: docs/BENCHMARKS.md)"
    )
    parser.add_argument("--no-doc", action="store_true", help="render no markdown page")
    parser.add_argument("--group", help=argparse.SUPPRESS)  # the child side of run_group
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.group:
        if args.group not in GROUPS or args.result is None:
            parser.error(f"--group: one of {', '.join(GROUPS)}, with --result")
        return run_group_here(args.group, args.quick, args.result)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(GROUPS)
    if unknown := [n for n in names if n not in GROUPS]:
        parser.error(f"--only: no group {unknown[0]!r} (groups: {', '.join(GROUPS)})")
    out = args.out or RESULTS / ("quick.json" if args.quick else "latest.json")
    page = None if args.no_doc else args.doc or (None if args.quick else DOC)
    try:
        doc = run_suite(names, args.quick)
    except KeyboardInterrupt:
        print("bench suite: interrupted", file=sys.stderr)
        return 130
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print()
    print(table(doc))
    print(f"\nwritten to {os.path.relpath(out)}")
    if page is not None:
        from bench.report import render

        page.write_text(render(doc, os.path.relpath(out, ROOT), os.path.relpath(out, page.parent)))
        print(f"rendered {os.path.relpath(page)}")
    failed = [n for n, g in doc["groups"].items() if not g["ok"]]
    if failed:
        print(f"bench suite: {len(failed)} group(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
