"""The worker's action machinery without a coordinator: receipts, actions, the log, the executor."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import worker_pb2
from shared.receipts import (
    content_hash,
    decode_result,
    encode_result,
    encode_with,
    fingerprint,
    safe_text,
)
from worker_agent.action_log import (
    ActionLog,
    ReceiptRecord,
    StartedRecord,
    Verdict,
    framed,
    read_frames,
)
from worker_agent.actions import ActionContext, Outcome, default_registry, run_action
from worker_agent.executor import ActionExecutor
from worker_agent.scratch import ScratchDir

# receipts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "\x00",
        "\ud800",
        "a\x00b\udfffc",
        "emoji \U0001f600 and \u00e9",
        "x" * 1_000_000,
        "\U0001f600\x00\ud800" * 300_000,
        {"nested": ["\x00", {"k\ud800": None}], "n": 1.5, "t": True},
    ],
    ids=["nul", "lone-surrogate", "mixed", "emoji", "1mb", "1mb-mixed", "nested"],
)
def test_results_round_trip_as_ascii(value: Any) -> None:
    text = encode_result(value)
    assert text.isascii()
    assert decode_result(text) == value
    # ASCII text passes through protobuf strings untouched.
    wire = worker_pb2.Receipt(result_json=text).SerializeToString()
    assert worker_pb2.Receipt.FromString(wire).result_json == text


def test_encoding_is_canonical() -> None:
    assert encode_result({"b": 1, "a": [1, "\x00"]}) == '{"a":[1,"\\u0000"],"b":1}'


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"action": "a", "run": "r", "error": '\u0000result"x', "z": None}, "result"),
        ({"b": 1}, "a"),  # the value's key sorts first
        ({"a": 1}, "b"),  # or last
        ({}, "result"),
        ({"result_preview": "p", "res": [1, {"k": "\ud800"}]}, "result"),
    ],
)
@pytest.mark.parametrize("value", [None, {"echo": "\x00\U0001f600", "n": [1.5, True]}, "x" * 5000])
def test_a_value_encoded_once_joins_a_canonical_text(
    fields: dict[str, Any], key: str, value: Any
) -> None:
    # A receipt's body is built around its result's canonical text, not by encoding it again.
    joined = encode_with(fields, key, encode_result(value))
    assert joined == encode_result({**fields, key: value})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), {1, 2}, b"bytes"])
def test_values_json_cannot_hold_are_refused(value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot be encoded as JSON"):
        encode_result(value)


def test_circular_values_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidArgumentError):
        encode_result(loop)


@pytest.mark.parametrize("text", ["{", "NaN", "[Infinity]", ""])
def test_invalid_json_is_refused(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        decode_result(text)


def test_content_hash_changes_with_one_character() -> None:
    text = encode_result({"s": "x" * 1_000_000})
    changed = text[:500_000] + "y" + text[500_001:]
    assert content_hash(text) != content_hash(changed)
    assert content_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert content_hash(encode_result("\ud800")) == content_hash('"\\ud800"')
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        content_hash("\ud800")


def test_fingerprint_ignores_key_order_only() -> None:
    a = fingerprint("diag.echo", {"value": 1, "other": [1, 2]})
    assert a == fingerprint("diag.echo", {"other": [1, 2], "value": 1})
    assert a != fingerprint("diag.echo", {"value": 1, "other": [2, 1]})
    assert a != fingerprint("diag.sleep", {"value": 1, "other": [1, 2]})
    assert len(a) == 64


def test_safe_text_escapes_what_protobuf_and_sql_cannot_hold() -> None:
    assert safe_text("a\x00b\ud800") == "a\\x00b\\ud800"
    worker_pb2.Receipt(error=safe_text("\ud800"))  # would raise unescaped


# actions -------------------------------------------------------------------------------------


def _run(
    kind: str,
    args: Any,
    attempt: int = 1,
    ctx: ActionContext | None = None,
    scratch: ScratchDir | None = None,
) -> Outcome:
    ctx = ctx or ActionContext("act_1", attempt)
    return run_action(default_registry(scratch), kind, json.dumps(args), ctx)


def test_echo_returns_any_json_value() -> None:
    value = {"x": ["\x00", "\ud800", 1.25, None]}
    outcome = _run("diag.echo", {"value": value})
    assert outcome.status == "succeeded"
    assert decode_result(outcome.result_json) == {"echo": value}


def test_sleep_sleeps_and_is_cancelled_within_half_a_second() -> None:
    assert decode_result(_run("diag.sleep", {"seconds": 0.01}).result_json) == {"slept": 0.01}

    ctx = ActionContext("act_1", 1)
    outcomes: list[Outcome] = []
    thread = threading.Thread(
        target=lambda: outcomes.append(_run("diag.sleep", {"seconds": 30}, ctx=ctx))
    )
    thread.start()
    time.sleep(0.1)
    cancelled_at = time.monotonic()
    ctx.cancelled.set()
    thread.join(5)
    assert time.monotonic() - cancelled_at < 0.5
    assert outcomes[0].status == "cancelled"
    assert outcomes[0].error.startswith("ActionCancelled:")


@pytest.mark.parametrize("seconds", [-1, "1", None, True])
def test_sleep_refuses_bad_seconds(seconds: Any) -> None:
    outcome = _run("diag.sleep", {"seconds": seconds})
    assert outcome.status == "failed"
    assert "diag.sleep needs 'seconds'" in outcome.error


def test_fail_fails_the_first_attempts_then_recovers() -> None:
    args = {"message": "flaky", "fail_attempts": 2}
    for attempt in (1, 2):
        outcome = _run("diag.fail", args, attempt)
        assert (outcome.status, outcome.error) == ("failed", "ActionFailed: flaky")
    outcome = _run("diag.fail", args, 3)
    assert outcome.status == "succeeded"
    assert decode_result(outcome.result_json) == {"recovered_after": 2}
    for attempt in (1, 50):
        assert _run("diag.fail", {"message": "always"}, attempt).status == "failed"
    assert "'fail_attempts' must be" in _run("diag.fail", {"fail_attempts": "2"}).error


def test_append_appends_exactly_inside_the_scratch_directory(tmp_path: Path) -> None:
    scratch = ScratchDir.of(tmp_path / "state")
    first = _run("diag.append", {"name": "log.txt", "line": "one"}, scratch=scratch)
    second = _run("diag.append", {"name": "log.txt", "line": "d\u00e9j\u00e0"}, scratch=scratch)
    path = tmp_path / "state" / "scratch" / "log.txt"
    assert path.read_bytes() == "one\nd\u00e9j\u00e0\n".encode()
    assert decode_result(first.result_json) == {"name": "log.txt", "bytes": 4}
    assert decode_result(second.result_json)["bytes"] == 7
    assert (path.parent.stat().st_mode & 0o777, path.stat().st_mode & 0o777) == (0o700, 0o600)


def test_has_line_reads_whether_an_append_took_effect_and_changes_nothing(
    tmp_path: Path,
) -> None:
    scratch = ScratchDir.of(tmp_path / "state")
    look = {"name": "log.txt", "line": "one"}
    # No scratch directory, then no file: the line is not there (and nothing is created).
    assert decode_result(_run("diag.has_line", look, scratch=scratch).result_json) == {
        "name": "log.txt",
        "present": False,
        "count": 0,
    }
    assert not scratch.path.exists()
    for line in ("one", "one two", "one"):
        _run("diag.append", {"name": "log.txt", "line": line}, scratch=scratch)
    before = (scratch.path / "log.txt").read_bytes()
    found = decode_result(_run("diag.has_line", look, scratch=scratch).result_json)
    assert (found["present"], found["count"]) == (True, 2)  # whole lines only
    assert (scratch.path / "log.txt").read_bytes() == before
    (scratch.path / "link.txt").symlink_to(tmp_path / "outside")
    (tmp_path / "outside").write_text("one\n")
    linked = _run("diag.has_line", {"name": "link.txt", "line": "one"}, scratch=scratch)
    assert linked.status == "refused" and "symbolic link" in linked.error
    two = _run("diag.has_line", {"name": "log.txt", "line": "a\nb"}, scratch=scratch)
    assert two.status == "failed" and "one line of text" in two.error


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        ({"path": "/tmp/x", "line": "x"}, "refused", "outside_scratch: diag.append takes 'name'"),
        ({"line": "x"}, "refused", "invalid_argument: 'name' must be a file name"),
        ({"name": "/tmp/x", "line": "x"}, "refused", "outside_scratch: 'name' '/tmp/x' is an"),
        ({"name": "../worker.json", "line": "x"}, "refused", "outside_scratch: 'name' '../wor"),
        ({"name": "a/b", "line": "x"}, "refused", "outside_scratch: 'name' 'a/b' is not one"),
        ({"name": "..", "line": "x"}, "refused", "outside_scratch: 'name' '..' is not one"),
        ({"name": ".bashrc", "line": "x"}, "refused", "invalid_argument: 'name' '.bashrc'"),
        ({"name": "x"}, "failed", "ActionFailed: diag.append needs 'line': a string, not null"),
        (
            {"name": "x", "line": 3},
            "failed",
            "ActionFailed: diag.append needs 'line': a string, not a number",
        ),
    ],
)
def test_append_refuses_paths_and_bad_args(
    tmp_path: Path, args: dict[str, Any], status: str, message: str
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "worker.json").write_text("{}\n")
    outcome = _run("diag.append", args, scratch=ScratchDir.of(state))
    assert outcome.status == status and outcome.error.startswith(message), outcome.error
    assert (state / "worker.json").read_text() == "{}\n"
    assert not (state / "scratch").exists() or not any((state / "scratch").iterdir())


def test_append_refuses_links_placed_in_the_scratch_directory(tmp_path: Path) -> None:
    state, outside = tmp_path / "state", tmp_path / "bashrc"
    outside.write_text("# the desk user's shell\n")
    scratch = ScratchDir.of(state)
    scratch.path.mkdir(parents=True)
    (scratch.path / "link.txt").symlink_to(outside)
    (scratch.path / "dangling.txt").symlink_to(tmp_path / "created-by-following")
    os.link(outside, scratch.path / "hard.txt")
    os.mkfifo(scratch.path / "fifo")
    for name, why in [
        ("link.txt", "is a symbolic link"),
        ("dangling.txt", "is a symbolic link"),
        ("hard.txt", "has other hard links"),
        ("fifo", "is not a regular file"),
    ]:
        outcome = _run("diag.append", {"name": name, "line": "x"}, scratch=scratch)
        assert outcome.status == "refused", (name, outcome)
        assert outcome.error.startswith("outside_scratch:") and why in outcome.error, outcome
    assert outside.read_text() == "# the desk user's shell\n"
    assert not (tmp_path / "created-by-following").exists()
    # The scratch directory itself replaced by a link to elsewhere: refused too.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = ScratchDir(tmp_path / "linked-scratch")
    moved.path.symlink_to(elsewhere)
    outcome = _run("diag.append", {"name": "x.txt", "line": "x"}, scratch=moved)
    assert outcome.status == "refused" and "not a plain directory" in outcome.error
    assert list(elsewhere.iterdir()) == []


def test_append_without_a_scratch_directory_is_refused() -> None:
    outcome = _run("diag.append", {"name": "x.txt", "line": "x"})
    assert (outcome.status, outcome.error) == (
        "refused",
        "not_offered: this worker has no scratch directory",
    )


def test_unknown_kinds_and_non_object_args_are_refused() -> None:
    outcome = _run("nope.nothing", {})
    assert outcome.status == "refused"
    assert outcome.error == (
        "unknown action kind 'nope.nothing' (this worker knows: "
        "diag.append, diag.echo, diag.fail, diag.has_line, diag.sleep)"
    )
    outcome = _run("diag.echo", [1, 2])
    assert (outcome.status, outcome.error) == (
        "refused",
        "args of diag.echo must be a JSON object, not an array",
    )


def test_a_result_json_cannot_hold_is_a_failure() -> None:
    registry = default_registry()
    registry.register("test.bad", lambda args, ctx: {"x": float("nan")})
    outcome = run_action(registry, "test.bad", "{}", ActionContext("act_1", 1))
    assert outcome.status == "failed"
    assert outcome.error.startswith("InvalidArgumentError: value cannot be encoded as JSON")


# action log ----------------------------------------------------------------------------------


def _started(action: str, attempt: str, epoch: int) -> StartedRecord:
    return StartedRecord(action, attempt, epoch, "run_1", "diag.echo", time.time())


def _receipt(action: str, attempt: str, epoch: int, result: Any = None) -> ReceiptRecord:
    now = time.time()
    return ReceiptRecord(
        action, "run_1", attempt, epoch, "succeeded", encode_result(result), "", now, now
    )


def test_log_lifecycle_started_then_outbox_then_acknowledged(tmp_path: Path) -> None:
    log = ActionLog(tmp_path / "actions")
    assert log.admit("act_a", "att_1", 1).verdict is Verdict.ACCEPT
    assert log.held() == [("act_a", "att_1", 1, "running")]  # admitted, not begun yet
    log.begin(_started("act_a", "att_1", 1))
    assert [r["op"] for r in _records(log)] == ["started"]
    assert log.held() == [("act_a", "att_1", 1, "running")]

    receipt = _receipt("act_a", "att_1", 1, {"v": "\x00\ud800"})
    log.finish(receipt)
    assert ActionLog(tmp_path / "other").held() == []
    assert ActionLog(log.root).held() == [("act_a", "att_1", 1, "finished")]
    assert log.held() == [("act_a", "att_1", 1, "finished")]
    assert log.pending_receipts() == [receipt]
    assert log.admit("act_a", "att_1", 1).receipt == receipt  # repeat: resend, do not rerun

    assert log.acknowledge("act_a", "att_1")
    assert log.held() == [] and log.pending_receipts() == []
    assert log.admit("act_a", "att_1", 1).verdict is Verdict.ACKNOWLEDGED


def test_receipts_outlive_the_process(tmp_path: Path) -> None:
    first = ActionLog(tmp_path)
    first.admit("act_a", "att_1", 3)
    first.begin(_started("act_a", "att_1", 3))
    first.finish(_receipt("act_a", "att_1", 3, "\ud800"))
    again = ActionLog(tmp_path)
    [receipt] = again.pending_receipts()
    assert decode_result(receipt.result_json) == "\ud800"
    assert again.held() == [("act_a", "att_1", 3, "finished")]
    assert again.highest_epoch("act_a") == 3


def test_a_started_file_left_by_a_dead_process_is_interrupted(tmp_path: Path) -> None:
    dead = ActionLog(tmp_path)
    dead.admit("act_a", "att_1", 2)
    dead.begin(_started("act_a", "att_1", 2))
    assert dead.held() == [("act_a", "att_1", 2, "running")]

    log = ActionLog(tmp_path)  # the next process
    assert log.held() == [("act_a", "att_1", 2, "interrupted")]
    admission = log.admit("act_a", "att_1", 2)
    assert admission.verdict is Verdict.INTERRUPTED and "outcome is unknown" in admission.reason
    assert log.admit("act_a", "att_0", 1).reason == "stale epoch 1 < 2"  # epoch from the file
    # A newer attempt means the coordinator has settled the interrupted one.
    assert log.admit("act_a", "att_2", 3).verdict is Verdict.ACCEPT
    assert log.held() == [("act_a", "att_2", 3, "running")]


def test_acknowledging_an_interrupted_attempt_forgets_it(tmp_path: Path) -> None:
    ActionLog(tmp_path).begin(_started("act_a", "att_1", 1))
    log = ActionLog(tmp_path)
    assert log.acknowledge("act_a", "att_1")
    assert log.held() == []


def test_stale_epochs_are_refused_and_repeats_recognised(tmp_path: Path) -> None:
    log = ActionLog(tmp_path)
    assert log.admit("act_a", "att_1", 5).verdict is Verdict.ACCEPT
    assert log.admit("act_a", "att_1", 5).verdict is Verdict.DUPLICATE
    stale = log.admit("act_a", "att_0", 4)
    assert (stale.verdict, stale.reason) == (Verdict.STALE, "stale epoch 4 < 5")
    newer = log.admit("act_a", "att_2", 6)
    assert (newer.verdict, newer.superseded) == (Verdict.ACCEPT, ("att_1",))
    assert log.highest_epoch("act_a") == 6
    assert log.admit("act_b", "att_1", 1).verdict is Verdict.ACCEPT  # epochs are per action


def test_a_receipt_written_before_a_crash_wins_over_its_started_file(tmp_path: Path) -> None:
    log = ActionLog(tmp_path)
    log.begin(_started("act_a", "att_1", 1))
    log.finish(_receipt("act_a", "att_1", 1))
    log.begin(_started("act_a", "att_1", 1))  # as if the process died before removing it
    again = ActionLog(tmp_path)
    assert again.held() == [("act_a", "att_1", 1, "finished")]
    assert again.admit("act_a", "att_1", 1).verdict is Verdict.FINISHED


def _records(log: ActionLog) -> list[dict[str, Any]]:
    """The records in the log's file, by the same framing the replay reads."""
    return [json.loads(p) for _, _, p in read_frames(log.path.read_bytes())]


def test_a_torn_last_record_is_skipped_and_cut_off(tmp_path: Path) -> None:
    log = ActionLog(tmp_path)
    log.finish(_receipt("act_a", "att_1", 1, "kept"))
    log.finish(_receipt("act_b", "att_1", 1, "torn"))
    whole = log.path.read_bytes()
    first = next(read_frames(whole))[1]
    for cut in (first + 3, first + 12, len(whole) - 1):  # in the header, the payload, the end
        log.path.write_bytes(whole[:cut])
        again = ActionLog(tmp_path)
        assert [r.action_id for r in again.pending_receipts()] == ["act_a"]
        assert log.path.stat().st_size == first  # cut back to the last whole record
        again.finish(_receipt("act_c", "att_1", 1))  # appends follow whole records
        assert [r.action_id for r in ActionLog(tmp_path).pending_receipts()] == ["act_a", "act_c"]


@pytest.mark.parametrize(
    "tail", [b"\0" * 4096, b"DF\0\0\0\x05\0\0\0\0hello", b"DF\xff\xff\xff\xff"]
)
def test_zeros_or_a_bad_checksum_after_a_power_cut_end_the_replay(
    tmp_path: Path, tail: bytes
) -> None:
    log = ActionLog(tmp_path)
    log.begin(_started("act_a", "att_1", 4))
    with log.path.open("ab") as fh:
        fh.write(tail)
    again = ActionLog(tmp_path)
    assert again.held() == [("act_a", "att_1", 4, "interrupted")]
    assert again.highest_epoch("act_a") == 4


def test_a_whole_record_that_makes_no_sense_is_skipped_not_fatal(tmp_path: Path) -> None:
    log = ActionLog(tmp_path)
    log.finish(_receipt("act_a", "att_1", 1))
    with log.path.open("ab") as fh:
        fh.write(framed({"op": "receipt", "action_id": "act_b"}))  # fields missing
        fh.write(framed({"op": "launch"}))
    log2 = ActionLog(tmp_path)
    log2.finish(_receipt("act_c", "att_1", 1))
    assert [r.action_id for r in ActionLog(tmp_path).pending_receipts()] == ["act_a", "act_c"]


def test_a_replay_after_restart_sends_every_unacknowledged_receipt_once(tmp_path: Path) -> None:
    log = ActionLog(tmp_path)
    for i in range(5):
        key = (f"act_{i}", "att_1")
        log.admit(*key, 1)
        log.begin(_started(*key, 1))
        log.finish(_receipt(*key, 1, i))
    log.finish(_receipt("act_1", "att_1", 1, 1))  # a duplicate append changes nothing
    for i in (0, 3):
        assert log.acknowledge(f"act_{i}", "att_1")
    assert not log.acknowledge("act_0", "att_1")  # a repeated ack finds nothing
    again = ActionLog(tmp_path)
    assert sorted(r.action_id for r in again.pending_receipts()) == ["act_1", "act_2", "act_4"]
    assert [h.state for h in again.held()] == ["finished"] * 3
    assert again.admit("act_0", "att_1", 1).verdict is Verdict.ACKNOWLEDGED


def test_acknowledged_records_are_compacted_away(tmp_path: Path) -> None:
    log = ActionLog(tmp_path, compact_at=4096)
    big = "x" * 500
    for i in range(40):
        log.admit(f"act_{i}", "att_1", 1)
        log.begin(_started(f"act_{i}", "att_1", 1))
        log.finish(_receipt(f"act_{i}", "att_1", 1, big))
        if i != 7:
            log.acknowledge(f"act_{i}", "att_1")
        assert log.path.stat().st_size < 4096 + 3 * 700  # never much past the threshold
    log.begin(_started("act_x", "att_1", 2))  # started, not finished: live
    assert {r.get("action_id") for r in _records(log) if r["op"] != "ack"} <= {
        "act_7",
        "act_36",
        "act_37",
        "act_38",
        "act_39",
        "act_x",
    }
    again = ActionLog(tmp_path, compact_at=4096)
    assert [r.action_id for r in again.pending_receipts()] == ["act_7"]
    assert again.held() == [("act_7", "att_1", 1, "finished"), ("act_x", "att_1", 2, "interrupted")]
    assert not list(tmp_path.glob(".*.tmp"))


def test_concurrent_receipts_share_syncs_and_all_survive(tmp_path: Path) -> None:
    log = ActionLog(tmp_path)
    before = log.syncs

    def finish(i: int) -> None:
        for j in range(50):
            log.finish(_receipt(f"act_{i}_{j}", "att_1", 1))

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 0 < log.syncs - before <= 200  # never more than one per record
    assert len(ActionLog(tmp_path).pending_receipts()) == 200


def test_an_older_workers_directories_are_taken_in_once(tmp_path: Path) -> None:
    """A worker upgraded in place: its started/ and outbox/ files become log records."""
    started, outbox = tmp_path / "started", tmp_path / "outbox"
    started.mkdir()
    outbox.mkdir()
    done = _receipt("act_a", "att_1", 2, "old")
    (outbox / "act_a.att_1.json").write_text(encode_result(asdict(done)))
    (started / "act_a.att_1.json").write_text(encode_result(asdict(_started("act_a", "att_1", 2))))
    (started / "act_b.att_1.json").write_text(encode_result(asdict(_started("act_b", "att_1", 3))))
    (started / "act_c.att_1.json").write_text("{not json")
    (outbox / ".act_d.att_1.json.tmp").write_text("half")

    log = ActionLog(tmp_path)
    assert log.pending_receipts() == [done]
    assert log.held() == [("act_a", "att_1", 2, "finished"), ("act_b", "att_1", 3, "interrupted")]
    assert not started.exists() and not outbox.exists()
    again = ActionLog(tmp_path)  # taken in once, not again
    assert again.pending_receipts() == [done]
    assert len([r for r in _records(again) if r["op"] == "receipt"]) == 1
    assert again.acknowledge("act_a", "att_1") and again.acknowledge("act_b", "att_1")
    assert ActionLog(tmp_path).held() == []


def test_an_older_layout_left_by_a_crash_mid_import_changes_nothing(tmp_path: Path) -> None:
    ActionLog(tmp_path).finish(_receipt("act_a", "att_1", 1, "new"))
    outbox = tmp_path / "outbox"  # as if the import's removal was lost
    outbox.mkdir()
    (outbox / "act_a.att_1.json").write_text(encode_result(asdict(_receipt("act_a", "att_1", 1))))
    assert [r.action_id for r in ActionLog(tmp_path).pending_receipts()] == ["act_a"]


@pytest.mark.parametrize("bad", ["../escape", "a/b", "", "a.b", "x" * 200])
def test_ids_that_are_not_file_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not a valid id"):
        ActionLog(tmp_path).admit(bad, "att_1", 1)
    with pytest.raises(InvalidArgumentError):
        ActionLog(tmp_path).admit("act_a", bad, 1)


# executor ------------------------------------------------------------------------------------


class Stream:
    """What the executor sends, as the connection's queue would carry it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[worker_pb2.WorkerMessage] = asyncio.Queue()

    async def next(self, kind: str) -> Any:
        async with asyncio.timeout(5):
            while True:
                message = await self.queue.get()
                if message.WhichOneof("body") == kind:
                    return getattr(message, kind)


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[ActionExecutor]:
    actions = ActionExecutor(
        ActionLog(tmp_path / "actions"), default_registry(ScratchDir(tmp_path / "scratch"))
    )
    yield actions
    actions.close(wait=True)


def _dispatch(
    kind: str, args: Any, action: str = "act_a", attempt: str = "att_1", epoch: int = 1, **kw: Any
) -> worker_pb2.Dispatch:
    return worker_pb2.Dispatch(
        action_id=action,
        run_id="run_1",
        attempt_id=attempt,
        epoch=epoch,
        attempt=kw.pop("number", 1),
        kind=kind,
        args_json=encode_result(args),
        **kw,
    )


async def test_a_dispatch_is_started_then_receipted_then_acknowledged(
    executor: ActionExecutor,
) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    executor.dispatch(_dispatch("diag.echo", {"value": "\x00\ud800"}))
    started = await stream.next("started")
    assert (started.action_id, started.attempt_id, started.epoch) == ("act_a", "att_1", 1)
    receipt = await stream.next("receipt")
    assert (receipt.status, receipt.run_id, receipt.epoch) == ("succeeded", "run_1", 1)
    assert decode_result(receipt.result_json) == {"echo": "\x00\ud800"}
    assert 0 < receipt.started_at <= receipt.finished_at
    assert [m.receipt for m in executor.pending()] == [receipt]
    executor.acknowledge(
        worker_pb2.ReceiptAck(action_id="act_a", attempt_id="att_1", accepted=True)
    )
    assert executor.pending() == [] and executor.held() == []


async def test_a_finished_attempt_is_never_redone(executor: ActionExecutor, tmp_path: Path) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    target = tmp_path / "scratch" / "effects.txt"
    dispatch = _dispatch("diag.append", {"name": "effects.txt", "line": "once"})
    executor.dispatch(dispatch)
    first = await stream.next("receipt")
    executor.dispatch(dispatch)  # the coordinator missed the receipt and asks again
    assert await stream.next("receipt") == first
    assert target.read_text() == "once\n"


async def test_a_stale_dispatch_is_refused_without_acting(
    executor: ActionExecutor, tmp_path: Path
) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    executor.dispatch(_dispatch("diag.echo", {}, attempt="att_2", epoch=7))
    await stream.next("receipt")
    target = tmp_path / "scratch" / "effects.txt"
    executor.dispatch(_dispatch("diag.append", {"name": "effects.txt", "line": "x"}, epoch=6))
    refused = await stream.next("receipt")
    assert (refused.status, refused.error, refused.epoch) == ("refused", "stale epoch 6 < 7", 6)
    assert not target.exists()


async def test_an_unknown_kind_is_refused(executor: ActionExecutor) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    executor.dispatch(_dispatch("gui.teleport", {}))
    refused = await stream.next("receipt")
    assert refused.status == "refused" and "unknown action kind 'gui.teleport'" in refused.error
    assert executor.held() == []


async def test_cancel_stops_a_running_attempt(executor: ActionExecutor) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    executor.dispatch(_dispatch("diag.sleep", {"seconds": 30}))
    executor.dispatch(_dispatch("diag.sleep", {"seconds": 30}))  # a duplicate: ignored
    await stream.next("started")
    assert [h.state for h in executor.held()] == ["running"]
    cancelled_at = time.monotonic()
    executor.cancel(worker_pb2.CancelAction(action_id="act_a", attempt_id="att_1", reason="user"))
    receipt = await stream.next("receipt")
    assert time.monotonic() - cancelled_at < 0.5
    # Why it was cancelled, then what the handler had done by then.
    assert (receipt.status, receipt.error) == (
        "cancelled",
        "ActionCancelled: user; cancelled while sleeping",
    )
    assert stream.queue.empty()  # one start and one receipt: the duplicate never ran


async def test_a_newer_epoch_supersedes_the_running_attempt(executor: ActionExecutor) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    executor.dispatch(_dispatch("diag.sleep", {"seconds": 30}, attempt="att_1", epoch=1))
    await stream.next("started")
    executor.dispatch(_dispatch("diag.echo", {"value": 2}, attempt="att_2", epoch=2))
    receipts = {}
    for _ in range(2):
        r = await stream.next("receipt")
        receipts[r.attempt_id] = r
    assert (receipts["att_1"].status, receipts["att_1"].epoch) == ("cancelled", 1)
    assert "superseded by attempt att_2 (epoch 2)" in receipts["att_1"].error
    assert (receipts["att_2"].status, receipts["att_2"].epoch) == ("succeeded", 2)


async def test_an_attempt_past_its_timeout_is_cancelled(executor: ActionExecutor) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    executor.dispatch(_dispatch("diag.sleep", {"seconds": 30}, timeout_seconds=0.2))
    receipt = await stream.next("receipt")
    assert (receipt.status, receipt.error) == (
        "cancelled",
        "ActionCancelled: timed out after 0.2 s; cancelled while sleeping",
    )


async def test_receipts_made_while_disconnected_wait_in_the_outbox(
    executor: ActionExecutor,
) -> None:
    executor.dispatch(_dispatch("diag.fail", {"message": "no"}))
    executor.close(wait=True)  # lets the attempt finish; no stream is attached
    [pending] = executor.pending()
    assert (pending.receipt.status, pending.receipt.error) == ("failed", "ActionFailed: no")
    assert [(h.action_id, h.state) for h in executor.held()] == [("act_a", "finished")]


async def test_only_an_attempt_unsafe_to_rerun_waits_for_a_started_record(
    executor: ActionExecutor,
) -> None:
    stream = Stream()
    executor.attach(stream.queue.put_nowait)
    cases = [
        ("diag.echo", {}, True, 1),  # harmless: the receipt is its one sync
        ("diag.echo", {}, False, 2),  # the plan wants a person to decide after a crash
        ("diag.append", {"name": "f.txt", "line": "x"}, True, 2),  # a write, whatever it says
    ]
    for i, (kind, args, idempotent, syncs) in enumerate(cases):
        before = executor.log.syncs
        executor.dispatch(_dispatch(kind, args, action=f"act_{i}", idempotent=idempotent))
        await stream.next("receipt")
        assert executor.log.syncs - before == syncs, kind
    executor.dispatch(_dispatch("diag.sleep", {"seconds": 30}, action="act_h", idempotent=True))
    executor.dispatch(_dispatch("diag.sleep", {"seconds": 30}, action="act_u"))
    await stream.next("started")
    await stream.next("started")
    # The next process knows only the attempt it must not rerun; the coordinator sends the
    # other one again.
    assert [(h.action_id, h.state) for h in ActionLog(executor.log.root).held()][-1:] == [
        ("act_u", "interrupted")
    ]
    assert "act_h" not in {h.action_id for h in ActionLog(executor.log.root).held()}
