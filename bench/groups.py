"""The suite's benchmarks: each SPEC §6 figure, from the script that measures it, beside its
baseline. A group runs one script (in quick or full mode) and turns its document into figure
entries (bench/figures.py); bench/suite.py runs each group in a process of its own.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bench.figures import error, figure

Group = Callable[[bool], list[dict[str, Any]]]

FLEET_FULL = (1000, 5000, 10000)
FLEET_QUICK = (300,)
# real + simulated; the goal is at 500 and it asks for a report at 1,000
KILL_SWITCH_WORKERS = {False: (500, 1000), True: (200,)}
KILL_SWITCH_CYCLES = {False: 10, True: 5}


def round_trip_and_ingest(quick: bool) -> list[dict[str, Any]]:
    from bench import runs

    doc = runs.run(argparse.Namespace(quick=quick))
    echo = doc["baselines"]["raw_two_hop_echo"]
    raw = doc["baselines"]["raw_batched_insert"]
    equal = doc["baselines"]["raw_equal_work"]
    out = []
    for key, who in (
        ("round_trip_real_worker", "real worker"),
        ("round_trip_simulated_worker", "simulated worker"),
    ):
        trip = doc["figures"][key]
        for stat in ("p50", "p99"):
            out.append(
                figure(
                    "round_trip",
                    f"no-op action round trip {stat}, {who}",
                    trip[f"{stat}_ms"],
                    "ms",
                    baseline=(f"raw grpc.aio two-hop echo {stat}", echo[f"{stat}_ms"]),
                    params={
                        "samples": trip["n"],
                        "path": "SubmitRun + WaitRun, durable receipt",
                        "coordinator_cpu_ms_per_round_trip": round(trip["coordinator_cpu_ms"], 2),
                    },
                )
            )
    library = doc["figures"]["round_trip_client_library"]
    out.append(
        figure(
            "round_trip",
            "no-op action round trip p50 through the client library, simulated worker",
            library["library"]["p50_ms"],
            "ms",
            baseline=("the same round trip on the bare gRPC stub p50", library["stub"]["p50_ms"]),
            params={
                "samples": library["library"]["n"],
                "path": "deskfleet.Client.submit_plan(wait=10), alternated with the stub's",
            },
        )
    )
    store = doc["baselines"]["raw_round_trip_store"]
    floor = echo["p50_ms"] + store["p50_ms"]
    out.append(
        figure(
            "round_trip",
            "durable round trip floor p50: echo + a round trip's rows as raw Core",
            floor,
            "ms",
            baseline=("raw grpc.aio two-hop echo p50", echo["p50_ms"]),
            params={
                "raw_core_round_trip_rows_p50_ms": round(store["p50_ms"], 3),
                "transactions": store["transactions"],
                "journal_events": store["journal_events"],
                "store": doc["store"],
            },
        )
    )
    trip = doc["figures"]["round_trip_simulated_worker"]
    out.append(_writer("round_trip", "round trip, simulated worker", trip, store["mean_ms"]))
    ingest = doc["figures"]["ingest_50_workers"]
    out.append(
        _writer("ingest", "receipt, 50 simulated workers", ingest, 1000 / equal["receipts_per_s"])
    )
    out.append(
        figure(
            "ingest",
            "receipts made durable per second, 50 simulated workers",
            ingest["receipts_per_s"],
            "/s",
            better="higher",
            baseline=(
                "raw SQLAlchemy Core transactions writing each receipt's rows, same durability",
                equal["receipts_per_s"],
            ),
            params={
                "receipts": ingest["receipts"],
                "runs": ingest["runs"],
                "coordinator_cpu_ms_per_receipt": round(
                    ingest["coordinator_cpu_ms_per_receipt"], 2
                ),
                "journal_events_per_receipt": round(ingest["journal_events_per_receipt"], 2),
                "baseline_batch": equal["batch"],
                "raw_receipt_rows_per_s": round(raw["rows_per_s"]),
                "store": doc["store"],
            },
        )
    )
    return out


def _writer(group: str, per: str, fig: dict[str, Any], raw_ms: float) -> dict[str, Any]:
    """The store writer's busy time per unit of a figure, beside raw Core writing its rows."""
    return figure(
        group,
        f"store writer busy per {per}",
        fig["store_write_unit_ms"] + fig["store_write_commit_ms"],
        "ms",
        baseline=("raw Core statements writing the same rows", raw_ms),
        params={
            "transactions": round(fig["store_write_transactions"], 2),
            "units_ms": round(fig["store_write_unit_ms"], 3),
            "commits_ms": round(fig["store_write_commit_ms"], 3),
            "cpu_ms": round(fig["store_write_cpu_ms"], 3),
            "writer_busy_share": round(fig["store_write_busy_share"], 3),
            "source": "the coordinator's /metrics: deskfleet_store_busy_seconds_total",
        },
    )


def many_runs(quick: bool) -> list[dict[str, Any]]:
    from bench import many_runs as bench

    doc = bench.run(quick)
    params = {
        "runs": doc["runs"],
        "actions_per_run": doc["actions_per_run"],
        "workers": doc["workers"],
        "slots": doc["slots"],
        "store": doc["store"],
    }
    return [
        figure(
            "many_runs",
            f"actions/s, {doc['runs']} concurrent runs on {doc['slots']} worker slots",
            doc["concurrent"]["actions_per_s"],
            "/s",
            better="higher",
            baseline=("the same actions in one sequential run", doc["sequential"]["actions_per_s"]),
            params=params,
        ),
        figure(
            "many_runs",
            f"actions/s, {doc['runs']} concurrent runs while a client polls GetRun for each"
            f" every {doc['polled']['poll_every_s'] * 1000:.0f} ms",
            doc["polled"]["actions_per_s"],
            "/s",
            better="higher",
            baseline=(
                "the same runs awaited with WaitRun only",
                doc["concurrent"]["actions_per_s"],
            ),
            params=params | {"get_run_calls": doc["polled"]["get_run_calls"]},
        ),
        figure(
            "many_runs",
            f"one action inside a running plan, {doc['one_plan']['actions']} sequential no-ops",
            doc["one_plan"]["ms_per_action"],
            "ms",
            baseline=("two raw grpc.aio echo hops p50", doc["one_plan"]["two_echo_hops_ms"]),
            params=params | {"actions": doc["one_plan"]["actions"]},
        ),
        figure(
            "many_runs",
            "longest time a slot stood free while a run waited",
            doc["longest_idle_gap_s"],
            "s",
            params=params | {"goal": "< 1 s"},
        ),
        figure(
            "many_runs",
            "most actions one run got ahead of another (fairness)",
            doc["max_spread_actions"],
            "actions",
            params=params | {"rule": "oldest place in line first, one unit a turn"},
        ),
    ]


def ledger(quick: bool) -> list[dict[str, Any]]:
    """The ledger's transaction body alone, in process (no gRPC, worker or event loop)."""
    from bench import ledger_cost

    out = []
    for runs, workers, what in (
        (5, 20, "5 runs, batches of 5 receipts"),
        (40, 2, "40 runs on 8 worker slots, the line served each batch"),
    ):
        found = ledger_cost.measure(runs, 12 if quick else 40, workers, profile=False)
        out.append(
            figure(
                "ledger",
                f"ledger transaction per receipt in process, {what}",
                found["ms_per_receipt"],
                "ms",
                baseline=(
                    "raw Core writing the same rows in as many transactions",
                    found["raw_core_ms_per_receipt"],
                ),
                params={
                    k: found[k]
                    for k in (
                        "receipts",
                        "transactions",
                        "median_batch",
                        "cpu_ms_per_receipt",
                        "statements_per_receipt",
                        "journal_events_per_receipt",
                    )
                }
                | {"store": "SQLite WAL, synchronous=FULL", "source": "bench/ledger_cost.py"},
            )
        )
    return out


def fleet_scale(quick: bool) -> list[dict[str, Any]]:
    from bench import fleet_status

    doc = fleet_status.run(list(FLEET_QUICK if quick else FLEET_FULL), quick)
    out = []
    settings = doc["settings"]
    for s in doc["steps"]:
        k = s["k"]
        params = {
            "simulated_workers": k,
            "simulator_processes": s["simulator_processes"],
            "heartbeat_s": settings["heartbeat_s"],
            "lease_s": settings["lease_s"],
            "store": settings["store"],
            "grow_s": round(s["grow_s"], 2),
        }
        out += [
            figure(
                "fleet_scale",
                f"connected simulated workers, K={k}",
                s["headless_online"],
                "workers",
                better="higher",
                params=params,
            ),
            figure(
                "fleet_scale",
                f"GetWorkerStatus p99, K={k}",
                s["status"]["p99_ms"],
                "ms",
                baseline=("gRPC health Check p99, same K", s["health"]["p99_ms"]),
                params={**params, "p50_ms": s["status"]["p50_ms"], "samples": s["status"]["n"]},
            ),
            figure(
                "fleet_scale",
                f"coordinator RSS, K={k}",
                s["rss_mib"],
                "MiB",
                params={**params, "rss_with_no_workers_mib": round(doc["idle"]["rss_mib"], 1)},
            ),
            figure(
                "fleet_scale",
                f"coordinator CPU holding K={k} (heartbeats only)",
                s["cpu_percent_of_one_core"],
                "% of a core",
                params={**params, "window_s": round(s["hold_s"], 1)},
            ),
        ]
    if failed := doc["failed"]:  # the steps before it stand
        out.append(error("fleet_scale", f"K={failed['k']}: {failed['error']}"))
    return out


def kill_switch(quick: bool) -> list[dict[str, Any]]:
    from bench import kill_switch as bench

    out = []
    for total in KILL_SWITCH_WORKERS[quick]:
        doc = bench.run(
            argparse.Namespace(
                quick=quick,
                simulated=total - 1,
                cycles=KILL_SWITCH_CYCLES[quick],
                poll_ms=bench.POLL_MS,
            )
        )
        f, floor, s = doc["figures"], doc["floor"], doc["settings"]
        acked = f["engage_coordinator_got_all_acks"]
        params = {
            "workers": total,
            "real_workers": 1,
            "cycles": s["cycles"],
            "from": "Engage returning, to the coordinator reading the last worker's ack",
            "push_reached_all_p99_ms": f["engage_push_all"]["p99_ms"],
            "status_shows_all_acked_p99_ms": f["engage_status_all"]["p99_ms"],
            "whoami_round_trip_p50_ms": doc["baseline"]["p50_ms"],
        }
        out += [
            figure(
                "kill_switch",
                f"kill switch engage -> all {total} acknowledged {stat}",
                acked[f"{stat}_ms"],
                "ms",
                # The floor: a bare grpc.aio server pushing to as many streams and reading as
                # many acks, in the same run (bench/raw_fanout.py).
                baseline=(
                    f"bare grpc.aio push to {total} streams, acks read {stat}",
                    floor[f"{stat}_ms"],
                ),
                params=params,
            )
            for stat in ("p50", "p99")
        ]
    return out


def screenshot(quick: bool) -> list[dict[str, Any]]:
    from bench import screenshot as bench

    doc = bench.run(argparse.Namespace(quick=quick))
    e2e, raw, s = doc["figure"], doc["baseline"], doc["settings"]
    params = {
        "frames": s["frames"],
        "resolution": s["resolution"],
        "encoding": s["encoding"],
        "screen": s["screen"],
        "path": "DesktopService.Act(screenshot) + GetArtifact, one at a time",
    }
    return [
        figure(
            "screenshot",
            "screenshot action end to end, frames/s",
            e2e["fps"],
            "frames/s",
            better="higher",
            baseline=("raw mss grab + the same encode, one process", raw["fps"]),
            params=params,
        ),
        figure(
            "screenshot",
            "screenshot action end to end p50",
            e2e["p50_ms"],
            "ms",
            baseline=("raw mss grab + the same encode p50", raw["p50_ms"]),
            params=params,
        ),
    ]


def research(quick: bool) -> list[dict[str, Any]]:
    from bench import research as bench

    doc = bench.run(argparse.Namespace(quick=quick, workers=2))
    out = []
    for name, goal, what in (
        ("latency", 4.0, "150-300 ms per document, subresources delayed"),
        ("zero", 0.8, "no latency: the overhead"),
    ):
        fig = doc["sites"][name]
        out.append(
            figure(
                f"research_{name}",
                f"research pages fetched and extracted per second, 2 workers ({what})",
                fig["research"]["pages_per_s"],
                "pages/s",
                better="higher",
                baseline=(
                    "naive sequential Playwright goto + innerText, same site, same run",
                    fig["naive"]["pages_per_s"],
                ),
                params={"pages": doc["pages"], "workers": doc["workers"], "goal_ratio": goal},
            )
        )
    return out


def research_answers(quick: bool) -> list[dict[str, Any]]:
    from bench import research_answers as bench

    doc = bench.run(quick)
    new, old = doc["methods"]["passages"], doc["methods"]["lines"]
    params = {
        "questions": new["questions"],
        "pages": doc["pages"],
        "corpus": doc["corpus"]["package"],
        "served": "loopback HTTP",
    }
    return [
        figure(
            "research_answers",
            "questions answered in the top 3 excerpts, ranked passages",
            new["top3"] * 100,
            "%",
            better="higher",
            baseline=("line excerpts (the earlier method)", old["top3"] * 100),
            params=params,
        ),
        figure(
            "research_answers",
            "MRR of the answer among the excerpts, ranked passages",
            new["mrr"],
            "",
            better="higher",
            baseline=("line excerpts (the earlier method)", old["mrr"]),
            params=params,
        ),
    ]


def recovery(quick: bool) -> list[dict[str, Any]]:
    from bench import recovery as bench

    doc = bench.run(quick)
    marks, s = doc["seconds_after_kill"], doc["settings"]
    params = {
        **s,
        "coordinator_up_s": round(marks["coordinator_up"], 2),
        "runs_interrupted": doc["runs_interrupted"],
    }
    workers = s["real_workers"] + s["simulated_workers"]
    return [
        figure(
            "recovery",
            f"coordinator SIGKILL -> all {workers} workers reconnected",
            marks["reconnected"],
            "s",
            params=params,
        ),
        figure(
            "recovery",
            f"coordinator SIGKILL -> all {doc['runs_interrupted']} interrupted runs resumed",
            marks["resumed"],
            "s",
            params=params,
        ),
        figure(
            "recovery",
            f"coordinator SIGKILL -> all {s['runs']} runs completed",
            marks["completed"],
            "s",
            params=params,
        ),
    ]


def journal_search(quick: bool) -> list[dict[str, Any]]:
    from bench import journal_search as bench

    doc = bench.run(quick)
    entries = doc["store"]["entries"]
    params = {
        **doc["settings"],
        "entries": entries,
        "entries_per_run": doc["store"]["entries_per_run"],
        "fill_s": round(doc["store"]["seconds"], 1),
        "index_catch_up_s": round(doc["store"]["index_catch_up_s"], 1),
        "database_mib": doc["store"]["database_mib"],
    }
    return [
        figure(
            "journal_search",
            f"journal search p99 over {entries:,} entries, {label} word",
            result["p99_ms"],
            "ms",
            params={
                **params,
                "word": result["word"],
                "p50_ms": result["p50_ms"],
                "matches_mean": result["matches_mean"],
            },
        )
        for label, result in doc["searches"].items()
    ]


def worker_log(quick: bool) -> list[dict[str, Any]]:
    from bench import worker_log as bench

    doc = bench.run(quick)
    out = []
    for key, what, raw in (
        ("idempotent", "no-op action harmless to rerun", "raw_one_sync"),
        ("not_idempotent", "no-op action not idempotent (started record)", "raw_two_syncs"),
        ("idempotent_slots", f"no-op action harmless to rerun, {doc['slots']} at a time", None),
    ):
        r = doc[key]
        base = doc[raw or "raw_one_sync"]
        params = {"actions": r["actions"], "concurrent": r["concurrent"], "path": "in-process"}
        out.append(
            figure(
                "worker_log",
                f"worker action log: syncs per {what}",
                r["syncs_per_action"],
                "",
                baseline=("one append + fdatasync per durable record", base["syncs_per_action"]),
                params={**params, "previous_layout": "4 fsyncs (file + directory, twice)"},
            )
        )
        if raw is not None:
            out.append(
                figure(
                    "worker_log",
                    f"worker action log: time per {what}",
                    r["us_per_action"],
                    "us",
                    baseline=(
                        f"raw append + fdatasync, {base['syncs_per_action']} per action",
                        base["us_per_action"],
                    ),
                    params=params,
                )
            )
    return out


def fleet_page(quick: bool) -> list[dict[str, Any]]:
    from bench import fleet_page as bench

    doc = bench.run(bench.QUICK_WORKERS if quick else bench.FULL_WORKERS, quick)
    f, s = doc["figures"], doc["settings"]
    params = {
        "simulated_workers": s["workers"],
        "online": doc["online"],
        "page_size": s["page_size"],
        "rows_on_page": doc["rows_on_page"],
        "samples": s["samples"],
        "store": s["store"],
        "path": "HTTP GET through the console: session, chrome, counts, one page, activity",
    }
    out = [
        figure(
            "fleet_page",
            f"console fleet page, first page {stat}, {s['workers']} workers",
            f["page"][f"{stat}_ms"],
            "ms",
            baseline=(
                f"GetWorkerStatus page RPC {stat}, same fleet",
                f["status_rpc"][f"{stat}_ms"],
            ),
            params=params,
        )
        for stat in ("p50", "p99")
    ]
    out.append(
        figure(
            "fleet_page",
            f"console fleet page filtered by text p99, {s['workers']} workers",
            f["filtered"]["p99_ms"],
            "ms",
            baseline=("GetWorkerStatus page RPC p99, same fleet", f["status_rpc"]["p99_ms"]),
            params=params | {"filter": s["filter"], "matches": doc["filter_matches"]},
        )
    )
    return out


def live_view(quick: bool) -> list[dict[str, Any]]:
    from bench import live_view as bench

    doc = bench.run(argparse.Namespace(quick=quick))
    lat, raw, cpu, s = doc["latency"], doc["baseline"], doc["cpu"], doc["settings"]
    params = {
        "resolution": s["resolution"],
        "max_fps": s["max_fps"],
        "quality": s["quality"],
        "viewer": s["viewer"],
    }
    out = [
        figure(
            "live_view",
            f"live view: screen change -> frame showing it at a viewer {stat}",
            lat[f"{stat}_ms"],
            "ms",
            baseline=(f"raw mss grab + JPEG encode of the same screen {stat}", raw[f"{stat}_ms"]),
            params=params
            | {
                "changes": lat["n"],
                "change": s["change"],
                "goal": "< 150 ms p50",
                "change_to_grab_p50_ms": round(lat["change_to_grab_p50_ms"], 1),
                "grab_to_viewer_p50_ms": round(lat["grab_to_viewer_p50_ms"], 1),
            },
        )
        for stat in ("p50", "p99")
    ]
    none, one = cpu["no_viewer"], cpu["viewers_1"]
    for who in ("worker", "coordinator"):
        for count in (1, 4):
            got = cpu[f"viewers_{count}"]
            out.append(
                figure(
                    "live_view",
                    f"{who} CPU, busy screen at {s['max_fps']:.0f} frames/s,"
                    f" {count} viewer{'s' if count > 1 else ''}",
                    got[f"{who}_cpu_percent"],
                    "% of a core",
                    baseline=(f"{who} CPU, no viewer, same window", none[f"{who}_cpu_percent"]),
                    params=params
                    | {
                        "window_s": round(got["window_s"], 1),
                        "viewer_fps_min": round(got["viewer_fps_min"], 1),
                        "screen": "page counter every 50 ms",
                    }
                    | (
                        {
                            "per_viewer_after_the_first": round(
                                (got[f"{who}_cpu_percent"] - one[f"{who}_cpu_percent"]) / 3, 2
                            )
                        }
                        if count == 4
                        else {}
                    ),
                )
            )
    calm, busy = doc["still"], doc["changing"]
    for key, what, unit in (
        ("bytes_per_s", "bytes/s", "B/s"),
        ("frames_per_s", "frames/s", "frames/s"),
    ):
        out.append(
            figure(
                "live_view",
                f"live view of a still screen: {what} to a viewer",
                calm[key],
                unit,
                baseline=(f"{what} of a busy screen, same viewer settings", busy[key]),
                params=params
                | {
                    "window_s": round(calm["window_s"], 1),
                    "keepalives": calm["keepalives"],
                    "goal": "about 0, keepalives aside",
                },
            )
        )
    return out


ROUTING_FULL = (50, 1000, 5000)
ROUTING_QUICK = (50, 1000)


def routing(quick: bool) -> list[dict[str, Any]]:
    from bench import routing as routing_bench

    samples = 50 if quick else 200
    doc = routing_bench.run(list(ROUTING_QUICK if quick else ROUTING_FULL), samples)
    out = []
    for size in doc["sizes"]:
        n, submit, raw = size["workers"], size["submit"], size["write_only_baseline"]
        for stat in ("p50", "p99"):
            out.append(
                figure(
                    "routing",
                    f"submit transaction {stat} (write, route, claim), {n} workers online",
                    submit[f"{stat}_ms"],
                    "ms",
                    baseline=(f"the same writes without routing {stat}", raw[f"{stat}_ms"]),
                    params={"workers": n, "samples": size["samples"], "store": doc["store"]},
                )
            )
    return out


# In the order they run: SPEC §6's.
GROUPS: dict[str, Group] = {
    "round_trip": round_trip_and_ingest,
    "many_runs": many_runs,
    "ledger": ledger,
    "fleet_scale": fleet_scale,
    "fleet_page": fleet_page,
    "kill_switch": kill_switch,
    "screenshot": screenshot,
    "research": research,
    "research_answers": research_answers,
    "recovery": recovery,
    "journal_search": journal_search,
    "live_view": live_view,
    "worker_log": worker_log,
    "routing": routing,
}
