"""The benchmark suite's own machinery on small documents: figures, the validator, the page.

No benchmark runs here; `make bench-quick` runs them (and validates what they wrote).
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest

from bench import figures, groups, suite
from bench.report import render
from bench.validate import problems


def _doc() -> dict[str, Any]:
    """A small well-formed suite document: a figure with a baseline, one without, an error."""
    return {
        "schema": 1,
        "mode": "quick",
        "date": "2026-12-01T07:00:00+00:00",
        "command": ".venv/bin/python -m bench.suite --quick",
        "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False},
        "machine": {
            "cpu_model": "Test CPU @ 2.0GHz",
            "cores": 2,
            "ram_gib": 7.7,
            "kernel": "6.1.0",
            "python": "3.12.1",
        },
        "load_average": {"start": [0.5, 0.4, 0.3], "end": [1.5, 0.9, 0.5]},
        "duration_s": 101.5,
        "groups": {"round_trip": {"seconds": 30.0, "ok": True}},
        "figures": [
            figures.figure(
                "round_trip",
                "no-op action round trip p50, real worker",
                30.0,
                "ms",
                baseline=("raw grpc.aio two-hop echo p50", 1.5),
                params={"samples": 50},
            ),
            figures.figure(
                "recovery", "coordinator SIGKILL -> all 101 workers reconnected", 12.5, "s"
            ),
            figures.error("screenshot", "TimeoutError: no chromium window\nsecond line"),
        ],
    }


def test_a_figure_carries_its_ratio_to_the_baseline_and_none_without_one() -> None:
    with_base, without, _ = _doc()["figures"]
    assert with_base["ratio"] == pytest.approx(20.0)
    assert with_base["baseline_value"] == 1.5
    assert without["ratio"] is None and without["baseline_name"] is None
    with pytest.raises(ValueError, match="better"):
        figures.figure("g", "n", 1.0, "ms", better="faster")


def test_a_failed_rpc_is_described_by_its_status_and_details_on_one_line() -> None:
    class Refused(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.INVALID_ARGUMENT

        def details(self) -> str:
            return "actions: at most 1000 per plan"

        def __str__(self) -> str:
            return "<AioRpcError of RPC that terminated with:\n\tstatus = ..."

    assert suite.describe(Refused()) == (
        "RPC failed: INVALID_ARGUMENT: actions: at most 1000 per plan"
    )


def test_the_many_runs_baseline_splits_its_actions_into_plans_a_plan_may_hold() -> None:
    from bench.many_runs import plan_sizes

    assert plan_sizes(200) == [200]
    assert plan_sizes(2000) == [1000, 1000]
    assert plan_sizes(2500) == [1000, 1000, 500]


def test_a_well_formed_document_has_no_problems() -> None:
    assert problems(_doc()) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.pop("command"), "command: missing"),
        (lambda d: d.pop("machine"), "machine: missing"),
        (lambda d: d["machine"].pop("cores"), "machine.cores"),
        (lambda d: d.update(date="yesterday"), "date: expected a UTC ISO 8601 time"),
        (lambda d: d.update(date="2026-12-01T07:00:00+02:00"), "date: expected a UTC"),
        (lambda d: d.update(mode="fast"), "mode: expected 'quick' or 'full'"),
        (lambda d: d["load_average"].pop("end"), "load_average.end"),
        (lambda d: d.update(figures=[]), "figures: expected a non-empty list"),
        (lambda d: d["figures"][0].update(value=None), "value: expected a number or an error"),
        (lambda d: d["figures"][0].update(value=float("nan")), "expected a number or an error"),
        (lambda d: d["figures"][0].update(value="30"), "expected a number or an error"),
        (lambda d: d["figures"][0].update(ratio=2.0), "is not value / baseline_value"),
        (lambda d: d["figures"][0].update(baseline_value=None), "needs both a name and a number"),
        (lambda d: d["figures"][1].update(ratio=1.0), "a ratio without a baseline"),
        (lambda d: d["figures"][1].update(better="faster"), "better: expected"),
        (lambda d: d["figures"][2].update(value=1.0), "both a value and an error"),
        (lambda d: d["figures"][2].update(error=""), "an empty error"),
        (lambda d: d["figures"][1].update(name=d["figures"][0]["name"]), "appears twice"),
    ],
)
def test_each_missing_or_wrong_part_is_named(change: Any, expected: str) -> None:
    doc = copy.deepcopy(_doc())
    change(doc)
    found = problems(doc)
    assert any(expected in p for p in found), found


def test_a_document_that_is_not_an_object_is_refused() -> None:
    assert problems([1, 2]) == ["the document is not a JSON object"]


def test_the_page_escapes_table_characters_and_says_when_the_tree_was_dirty() -> None:
    doc = _doc()
    doc["git"]["dirty"] = True
    doc["figures"][2]["error"] = "ValueError: a|b"
    page = render(doc)
    assert "ERROR: ValueError: a\\|b" in page
    assert "(with uncommitted changes)" in page


def test_an_error_entry_keeps_the_first_line_and_no_value() -> None:
    entry = figures.error("screenshot", "TimeoutError: no chromium window\nsecond line")
    assert entry == {
        "name": "screenshot (failed)",
        "group": "screenshot",
        "value": None,
        "error": "TimeoutError: no chromium window",
    }


def test_the_page_shows_the_machine_date_command_and_every_figure() -> None:
    page = render(_doc())
    assert page.startswith("# Benchmarks\n")
    assert "- date: 2026-12-01T07:00:00+00:00" in page
    assert "`.venv/bin/python -m bench.suite --quick` (quick mode, 102 s)" in page
    assert "Test CPU @ 2.0GHz, 2 cores, 7.7 GiB RAM" in page
    assert "0.5, 0.4, 0.3 at the start, 1.5, 0.9, 0.5 at the end" in page
    assert "`0123456789ab`" in page and "uncommitted" not in page
    rows = [line for line in page.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [
        "| no-op action round trip p50, real worker | 30.0 ms"
        " | 1.50 ms (raw grpc.aio two-hop echo p50) | 20x | lower |",
        "| coordinator SIGKILL -> all 101 workers reconnected | 12.5 s | - | - | lower |",
        "| screenshot (failed) | ERROR: TimeoutError: no chromium window | - | - |  |",
    ]
    assert "- **round_trip**: samples=50" in page
    assert "[`bench/results/latest.json`](../bench/results/latest.json)" in page
    assert "## How to read this" in page


def test_a_failing_group_becomes_an_error_entry_in_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(quick: bool) -> list[dict[str, Any]]:
        raise TimeoutError("timed out after 30 s waiting for the chromium window\nmore")

    monkeypatch.setitem(groups.GROUPS, "screenshot", broken)
    monkeypatch.setattr(suite, "GROUPS", groups.GROUPS)
    result = tmp_path / "entries.json"
    assert suite.run_group_here("screenshot", True, result) == 1
    assert json.loads(result.read_text()) == [
        figures.error(
            "screenshot", "TimeoutError: timed out after 30 s waiting for the chromium window"
        )
    ]


def test_a_failed_command_is_described_by_its_name_and_last_words() -> None:
    exc = subprocess.CalledProcessError(
        1,
        [Path("/x/.venv/bin/deskfleet-coordinator"), "init", "--db", "sqlite:///f"],
        stderr="Traceback...\nsqlite3.OperationalError: disk full\n",
    )
    assert suite.describe(exc) == "deskfleet-coordinator init exited 1: " + (
        "sqlite3.OperationalError: disk full"
    )
