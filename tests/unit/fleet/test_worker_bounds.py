"""The bounds of what a worker sends, as pure rules (30.5): its hello (`HelloLimits`, a serve
setting), and the ids, status and texts of its other messages
(`coordinator/streams/worker_bounds.py`).
The coordinator applies them to real streams in tests/integration/fleet/test_hostile_worker.py."""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest

from coordinator.model.orders import Held, IncomingArtifact, IncomingReceipt
from coordinator.streams import worker_bounds
from shared.advertisement import Advertisement, Capability, Display, HelloLimits
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import worker_pb2

LIMITS = HelloLimits()
REAL = Advertisement(
    hostname="desk-7.example.org",
    labels={"zone": "eu", "room": "4.12"},
    displays=(Display(0, 0, 0, 2560, 1440), Display(1, -1920, 0, 1920, 1080)),
    capabilities=(
        Capability("headless", False, "chromium at /usr/bin/chromium did not launch: " + "x" * 300),
        Capability("computer_use", True),
    ),
    os="Linux 6.1.0-18-amd64",
    versions={"deskfleet": "0.30.0", "python": "3.11.2", "chromium": "120.0.6099.224"},
    research_apps=("notes", "wiki.local"),
)


def test_a_real_workers_hello_is_far_inside_the_limits() -> None:
    assert LIMITS.refusal(REAL) == ""
    hello = worker_pb2.Hello(advertisement=REAL.to_proto(), held=[worker_pb2.HeldAction()])
    assert hello.ByteSize() < LIMITS.max_bytes // 32
    held = [Held("act_" + "a" * 26, "att_" + "b" * 26, 3, "finished")] * 40
    assert worker_bounds.hello_refusal(hello.ByteSize(), REAL, held, LIMITS) == ""


def _with(**changes: object) -> Advertisement:
    return dataclasses.replace(REAL, **changes)


@pytest.mark.parametrize(
    ("advertisement", "refusal"),
    [
        (
            _with(versions={f"v{i}": "x" * 1000 for i in range(8000)}),
            "hello limit max_entries=64: advertisement.versions has 8000 entries",
        ),
        (
            _with(labels={f"k{i}": "v" for i in range(65)}),
            "hello limit max_entries=64: advertisement.labels has 65 entries",
        ),
        (
            _with(research_apps=tuple(f"app{i}" for i in range(65))),
            "hello limit max_entries=64: advertisement.research_apps has 65 entries",
        ),
        (
            _with(capabilities=tuple(Capability(f"c{i}", True) for i in range(65))),
            "hello limit max_entries=64: advertisement.capabilities has 65 entries",
        ),
        (
            _with(versions={"deskfleet": "x" * 257}),
            "hello limit max_text=256: advertisement.versions['deskfleet'] is 257 bytes",
        ),
        (
            # Bytes, not characters: 86 three-byte characters are 258 bytes.
            _with(labels={"zone": "€" * 86}),
            "hello limit max_text=256: advertisement.labels['zone'] is 258 bytes",
        ),
        (
            _with(labels={"k" * 300: "v"}),
            f"hello limit max_text=256: advertisement.labels key {'k' * 40!r} is 300 bytes",
        ),
        (
            _with(hostname="h" * 300),
            "hello limit max_text=256: advertisement.hostname is 300 bytes",
        ),
        (_with(os="o" * 300), "hello limit max_text=256: advertisement.os is 300 bytes"),
        (
            _with(research_apps=("a" * 257,)),
            "hello limit max_text=256: advertisement.research_apps[0] is 257 bytes",
        ),
        (
            _with(capabilities=(Capability("headless", False, "r" * 1025),)),
            "hello limit max_reason=1024: advertisement.capabilities[0].reason is 1025 bytes",
        ),
        (
            _with(displays=tuple(Display(i, 0, 0, 10, 10) for i in range(17))),
            "hello limit max_displays=16: advertisement.displays has 17 entries",
        ),
        (
            _with(displays=(Display(0, 0, 0, 16_000_000, 16_000_000),)),
            "hello limit max_display_px=32768: advertisement.displays[0] is 16000000x16000000"
            " (1 to 32768 a side)",
        ),
        (
            _with(displays=(Display(0, 0, 0, 0, 800),)),
            "hello limit max_display_px=32768: advertisement.displays[0] is 0x800"
            " (1 to 32768 a side)",
        ),
        (
            _with(displays=(Display(0, -(2**31), 0, 800, 600),)),
            "hello limit max_display_px=32768: advertisement.displays[0] is placed at"
            " -2147483648,0 (within 524288 px of the origin)",
        ),
        (
            _with(displays=(Display(0, 0, 0, 80, 60), Display(0, 80, 0, 80, 60))),
            "hello limit max_displays=16: advertisement.displays[1].index is 0 (one index per"
            " display, 0 to 15)",
        ),
        (
            _with(displays=(Display(16, 0, 0, 80, 60),)),
            "hello limit max_displays=16: advertisement.displays[0].index is 16 (one index per"
            " display, 0 to 15)",
        ),
    ],
    ids=lambda v: "" if isinstance(v, Advertisement) else v.split(":")[0],
)
def test_an_advertisement_past_a_limit_is_refused_naming_it(
    advertisement: Advertisement, refusal: str
) -> None:
    assert LIMITS.refusal(advertisement) == refusal


def test_at_the_limits_an_advertisement_is_taken() -> None:
    full = _with(
        labels={f"{i:0>256}": "v" * 256 for i in range(64)},
        displays=tuple(Display(i, 32_768 * i, 0, 32_768, 32_768) for i in range(16)),
        capabilities=(Capability("headless", False, "r" * 1024),),
    )
    assert LIMITS.refusal(full) == ""


@pytest.mark.parametrize("limits", [LIMITS, HelloLimits(max_text=512, max_entries=4)])
def test_enrollment_and_the_hello_apply_one_rule_to_labels(limits: HelloLimits) -> None:
    """A worker's labels are given at enrollment and sent in every hello: what one refuses,
    the other refuses, counted in UTF-8 bytes (B11: enrollment counted 200 characters, so
    100 three-byte characters enrolled and every hello was refused)."""
    from coordinator.fleet.enrollment import _check_labels

    cases: list[dict[str, str]] = [
        {"zone": char * n}
        for char in ("a", "é", "€", "😀")  # 1 to 4 bytes each
        for n in (64, 65, 85, 86, 100, 128, 129, 170, 171, 256, 257)
    ]
    cases += [{"€" * 86: "v"}, {"k" * 512: "v"}] + [
        {f"k{i}": "v" for i in range(n)} for n in (4, 5, 64, 65)
    ]
    refused = 0
    for labels in cases:
        hello = limits.refusal(dataclasses.replace(REAL, labels=labels))
        try:
            _check_labels(labels, limits)
            enrolled = ""
        except InvalidArgumentError as exc:
            enrolled = exc.message
        assert bool(hello) == bool(enrolled), (labels, hello, enrolled)
        if hello:
            refused += 1
            assert enrolled.startswith(hello.replace("advertisement.", "", 1)), enrolled
            assert "serve --hello-limit" in enrolled
    assert 0 < refused < len(cases)


def test_the_hello_as_a_whole_and_its_held_attempts_are_bounded() -> None:
    ok = [Held("act_1", "att_1", 1, "running")]
    assert worker_bounds.hello_refusal(65_537, REAL, ok, LIMITS) == (
        "hello limit max_bytes=65536: the hello is 65537 bytes"
    )
    many = ok * 513
    assert worker_bounds.hello_refusal(100, REAL, many, LIMITS) == (
        "hello limit max_held=512: held lists 513 attempts"
    )
    for held, refusal in [
        (Held("a" * 65, "att", 1, "running"), "held[0].action_id: 1 to 64 characters (got 65)"),
        (Held("", "att", 1, "running"), "held[0].action_id: 1 to 64 characters (got 0)"),
        (Held("act", "t" * 65, 1, "running"), "held[0].attempt_id: at most 64 characters (got 65)"),
        (Held("act", "att", 1, "x" * 999), "held[0].state: one of finished, interrupted, running"),
    ]:
        assert worker_bounds.hello_refusal(100, REAL, [held], LIMITS) == refusal


def test_hello_limits_are_a_setting_parsed_from_name_value_items() -> None:
    assert HelloLimits.parse([]) == LIMITS
    limits = HelloLimits.parse(["max_entries=2", "max_display_px=8192"])
    assert (limits.max_entries, limits.max_display_px, limits.max_bytes) == (2, 8192, 65_536)
    assert limits.refusal(_with(labels={"a": "1", "b": "2", "c": "3"})) == (
        "hello limit max_entries=2: advertisement.labels has 3 entries"
    )
    for item, said in [
        ("max_bogus=1", "--hello-limit 'max_bogus=1': NAME=N with NAME one of max_bytes,"),
        ("max_entries", "--hello-limit 'max_entries': NAME=N"),
        ("max_entries=0", "N must be a whole number of at least 1"),
        ("max_entries=-3", "N must be a whole number of at least 1"),
        ("max_entries=1e3", "N must be a whole number of at least 1"),
    ]:
        with pytest.raises(InvalidArgumentError) as caught:
            HelloLimits.parse([item])
        assert said in caught.value.message and "\n" not in caught.value.message


def _receipt(**changes: object) -> IncomingReceipt:
    base = IncomingReceipt("wrk_1", "act_1", "run_1", "att_1", 1, "succeeded", "{}", "", 0.0, 0.0)
    return dataclasses.replace(base, **changes)


def test_a_receipts_ids_status_and_texts_are_bounded_naming_the_limit() -> None:
    assert worker_bounds.receipt_refusal(_receipt()) == ""
    for status in ("succeeded", "failed", "cancelled", "refused"):
        assert worker_bounds.receipt_refusal(_receipt(status=status)) == ""
    art = IncomingArtifact("f" * 64, "image/png", b"", 1, 1)
    assert worker_bounds.receipt_refusal(_receipt(artifacts=(art,), error="e" * 8000)) == ""
    for changes, refusal in [
        ({"action_id": "a" * 65_536}, "action_id: 1 to 64 characters (got 65536)"),
        ({"action_id": ""}, "action_id: 1 to 64 characters (got 0)"),
        ({"run_id": "r" * 65}, "run_id: 1 to 64 characters (got 65)"),
        ({"attempt_id": "t" * 65}, "attempt_id: at most 64 characters (got 65)"),
        (
            {"status": "succeeded" * 1000},
            "status: one of cancelled, failed, refused, succeeded (got 'succeededsucceededsu...')",
        ),
        (
            {"status": "\x1b[2J"},
            "status: one of cancelled, failed, refused, succeeded (got '\\x1b[2J')",
        ),
        ({"error": "e" * 8001}, "error: at most 8000 characters (got 8001)"),
        ({"traceparent": "0" * 65}, "traceparent: at most 64 characters (got 65)"),
        (
            {"artifacts": (art, dataclasses.replace(art, sha256="f" * 65))},
            "artifacts[1].sha256: at most 64 characters (got 65)",
        ),
        (
            {"artifacts": (dataclasses.replace(art, media_type="m" * 65),)},
            "artifacts[0].media_type: at most 64 characters (got 65)",
        ),
    ]:
        assert worker_bounds.receipt_refusal(_receipt(**changes)) == refusal, changes


def test_the_check_costs_a_receipt_next_to_nothing() -> None:
    """The receipt path is the hot path (docs/BENCHMARKS.md): the check is a few length
    comparisons, about a microsecond, where a durable receipt costs milliseconds."""
    receipt = _receipt(
        error="e" * 2000, artifacts=(IncomingArtifact("f" * 64, "image/png", b"", 1, 1),)
    )
    rounds = 20_000
    started = time.perf_counter()
    for _ in range(rounds):
        worker_bounds.receipt_refusal(receipt)
    per_receipt = (time.perf_counter() - started) / rounds
    assert per_receipt < 50e-6, f"{per_receipt * 1e6:.1f} us per receipt"


def test_refusals_are_counted_and_logged_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refusals = worker_bounds.RefusalLog("kill switch acknowledgements", every=3600)
    with caplog.at_level(logging.WARNING, logger="coordinator.streams.worker_bounds"):
        for _ in range(1000):
            refusals.note("wrk_1", "kill_id: 1 to 64 characters (got 65536)")
    assert refusals.total == 1000
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (
        "refused 1 kill switch acknowledgements (1 since start); the last from worker wrk_1:"
        " kill_id: 1 to 64 characters (got 65536)"
    )


def test_a_receipt_the_store_or_the_journal_could_not_hold_is_refused_naming_the_field() -> None:
    """Times that are no number, text that PostgreSQL cannot hold (NUL) and ids outside the
    alphabet of ids are refused as the receipt arrives (B3, B8): once in a batch, any of them
    failed the whole batch's transaction, and the receipts of other workers in it with it."""
    art = IncomingArtifact("f" * 64, "image/png", b"", 1, 1)
    assert worker_bounds.receipt_refusal(_receipt(started_at=-1.5, finished_at=1e18)) == ""
    assert worker_bounds.receipt_refusal(_receipt(error="é ünïcode ✓", attempt_id="")) == ""
    for changes, refusal in [
        ({"started_at": float("nan")}, "started_at: a finite number of seconds (got nan)"),
        ({"finished_at": float("inf")}, "finished_at: a finite number of seconds (got inf)"),
        ({"started_at": float("-inf")}, "started_at: a finite number of seconds (got -inf)"),
        (
            {"error": "bad\x00"},
            "error: U+0000 at 3 is no character the store's text can hold",
        ),
        (
            {"error": "é\udc80"},  # a lone surrogate (no protobuf string holds one either)
            "error: U+DC80 at 1 is no character the store's text can hold",
        ),
        (
            {"traceparent": "00-\x00"},
            "traceparent: U+0000 at 3 is no character the store's text can hold",
        ),
        (
            {"artifacts": (dataclasses.replace(art, media_type="image/\x00png"),)},
            "artifacts[0].media_type: U+0000 at 6 is no character the store's text can hold",
        ),
        (
            {"action_id": "act_\x00"},
            "action_id: an id holds only 0-9, a-z and _ (U+0000 at 4)",
        ),
        ({"run_id": "RUN_1"}, "run_id: an id holds only 0-9, a-z and _ (U+0052 at 0)"),
        ({"attempt_id": "att 1"}, "attempt_id: an id holds only 0-9, a-z and _ (U+0020 at 3)"),
    ]:
        assert worker_bounds.receipt_refusal(_receipt(**changes)) == refusal, changes


def test_every_id_a_worker_sends_is_checked_against_the_alphabet_of_ids() -> None:
    """Starts, kill switch acknowledgements and peek answers (`ids_refusal`) and the attempts
    a hello says it holds: an id with NUL never reaches a query (B8)."""
    assert worker_bounds.ids_refusal(action_id="act_01jd", attempt_id="att_01jd") == ""
    assert worker_bounds.ids_refusal(kill_id="kill_\x00") == (
        "kill_id: an id holds only 0-9, a-z and _ (U+0000 at 5)"
    )
    assert worker_bounds.ids_refusal(action_id="act_1", attempt_id="att\x00") == (
        "attempt_id: an id holds only 0-9, a-z and _ (U+0000 at 3)"
    )
    assert worker_bounds.ids_refusal(peek_id="pk_\u202e") == (
        "peek_id: an id holds only 0-9, a-z and _ (U+202E at 3)"
    )
    for held, refusal in [
        (Held("act\x00", "att", 1, "running"), "held[0].action_id: an id holds only"),
        (Held("act", "att\x00", 1, "finished"), "held[0].attempt_id: an id holds only"),
    ]:
        assert worker_bounds.hello_refusal(100, REAL, [held], LIMITS).startswith(refusal)
    assert worker_bounds.hello_refusal(100, REAL, [Held("act_1", "", 1, "running")], LIMITS) == ""


class _Ends:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


def test_a_stream_past_its_refused_reports_limit_is_ended_naming_the_limit() -> None:
    """B7: a stream's refused receipts and starts are counted per window; one past the limit
    ends the stream, once, saying why in a line."""
    ends = _Ends()
    budget = worker_bounds.ReportBudget("wrk_1", 3, 60.0, ends)
    assert [budget.refused("act_1", f"att_{i}", "stale_epoch") for i in range(3)] == [False] * 3
    assert ends.reasons == []
    assert budget.refused("act_1", "att_9", "not_claimant")
    assert ends.reasons == [
        "refused reports limit max_refused_reports=3 per 60 s: the coordinator refused 4"
        " receipts and starts of this stream (the last: not_claimant)"
    ]
    assert not budget.refused("act_1", "att_10", "stale_epoch")  # ended once
    assert len(ends.reasons) == 1 and budget.ended


def test_the_refused_reports_are_counted_per_window_and_zero_is_no_limit() -> None:
    ends = _Ends()
    budget = worker_bounds.ReportBudget("wrk_1", 2, 0.05, ends)
    for _ in range(4):
        budget.refused("act_1", "att_1", "stale_epoch")
        budget.refused("act_1", "att_1", "stale_epoch")
        time.sleep(0.06)  # a new window
    assert ends.reasons == []
    unlimited = worker_bounds.ReportBudget("wrk_1", 0, 60.0, ends)
    for i in range(10_000):
        unlimited.refused("act_1", f"att_{i}", "stale_epoch")
    assert ends.reasons == [] and not unlimited.ended


def test_a_correct_workers_late_reports_on_attempts_taken_back_from_it_are_not_counted() -> None:
    """A correct worker reports only on attempts it was given; the ledger refuses those it
    took back, and the worker was told of each: listed in its hello (what it held when it
    reconnected) or cancelled on its stream. Their start and receipt are not counted, so
    that recovery never comes near the limit; a third report on one of them is."""
    ends = _Ends()
    held = [(f"act_{i}", f"att_{i}") for i in range(512)]  # a hello's most
    budget = worker_bounds.ReportBudget("wrk_1", 1, 60.0, ends, held)
    for action_id, attempt_id in held:
        assert not budget.refused(action_id, attempt_id, "not_in_flight")  # a late start
        assert not budget.refused(action_id, attempt_id, "stale_epoch")  # its receipt
    budget.given("act_c", "att_c")  # a cancel sent on the stream
    assert not budget.refused("act_c", "att_c", "not_in_flight")
    assert not budget.refused("act_c", "att_c", "stale_epoch")
    assert ends.reasons == []
    assert not budget.refused("act_c", "att_c", "stale_epoch")  # counted: 1 of 1
    assert budget.refused("act_0", "att_0", "stale_epoch")  # counted: 2 of 1
    assert ends.reasons and "max_refused_reports=1" in ends.reasons[0]


def test_a_streams_known_attempts_are_bounded() -> None:
    budget = worker_bounds.ReportBudget("wrk_1", 1, 60.0, _Ends())
    for i in range(10 * worker_bounds.MAX_KNOWN_ATTEMPTS):
        budget.given(f"act_{i}", "att")
    assert len(budget._known) == worker_bounds.MAX_KNOWN_ATTEMPTS


def test_the_budgets_of_a_replicas_streams_are_found_by_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    budgets = worker_bounds.ReportBudgets(1)
    older, newer = _Ends(), _Ends()
    first = budgets.open("wrk_1", older)
    second = budgets.open("wrk_1", newer)  # the worker reconnected: its new stream counts
    budgets.close(first)  # the old stream's end leaves the new one's budget
    budgets.given("wrk_1", "act_1", "att_1")
    budgets.refused("wrk_2", "act_1", "att_1", "stale_epoch")  # no stream here: nothing
    with caplog.at_level(logging.WARNING, logger="coordinator.streams.worker_bounds"):
        for _ in range(4):
            budgets.refused("wrk_1", "act_1", "att_1", "stale_epoch")
    assert older.reasons == [] and len(newer.reasons) == 1 and second.ended
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("ended the stream of worker wrk_1 (streams ended: 1 since the last")
    assert line.endswith("(the last: stale_epoch)")
    budgets.close(second)
