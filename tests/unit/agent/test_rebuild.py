"""A goal rebuilt from its journal and the ledger (coordinator/agent/rebuild.py), as pure
rules: each open call of the last turn is resolved from what the ledger says it became, never
guessed; guidance stays at its place; an earlier turn is always whole."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.agent.conversation import TextPart, ToolCall, ToolResult
from coordinator.agent.rebuild import (
    SCREENSHOT_NOTE,
    Child,
    Decision,
    call_id_problem,
    last_calls,
    resolve,
    shown_id,
)

TYPE = {"id": "call_2", "name": "computer", "arguments": {"action": "type", "text": "hi"}}
SHOT = {"id": "call_3", "name": "computer", "arguments": {"action": "screenshot"}}
LOOK = {"id": "call_1", "name": "research", "arguments": {"query": "q"}}


def _events(*turn: dict[str, Any], results: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = [("goal.request", {"text": "fill the form"})]
    events.append(("goal.model_call", {"step": 1, "text": "", "tool_calls": [LOOK]}))
    events.append(("goal.tool_result", {"call": "call_1", "text": "report", "is_error": False}))
    events.append(
        (
            "goal.model_call",
            {"step": 2, "text": "typing", "tool_calls": list(turn), "guidance": ["gd_1"]},
        )
    )
    for call in results:
        events.append(("goal.tool_result", {"call": call, "text": f"done {call}"}))
    return events


def _result(call_id: str, text: str, error: bool = False) -> ToolResult:
    return ToolResult(call_id, (TextPart(text),), error)


def test_a_call_whose_action_has_a_receipt_gets_the_real_result_not_not_run() -> None:
    ran = Child("action", "act_1", "SUCCEEDED", False, _result("call_2", "typed 2 characters"))
    rebuilt = resolve(_events(TYPE), {"call_2": ran}, {"gd_1": "use the left field"})
    [open_call] = rebuilt.open
    assert open_call.decision is Decision.RESULT and open_call.child == ran
    # The turn is whole again, with the receipt's result where the call was.
    assert rebuilt.messages[-1].tool_results == (ran.result,)
    assert "not run" not in repr(rebuilt.messages)


def test_an_unknown_outcome_of_a_call_that_is_not_idempotent_hands_back_naming_it() -> None:
    unknown = Child("action", "act_1", "UNKNOWN", False)
    [open_call] = resolve(_events(TYPE), {"call_2": unknown}, {}).open
    assert open_call.decision is Decision.HAND_BACK
    assert "computer call call_2 became action act_1" in open_call.reason
    assert open_call.reason.startswith("unknown_outcome:")
    # Cancelled in flight with no receipt: it may have acted, the same.
    cancelled = Child("action", "act_1", "CANCELLED", False)
    assert resolve(_events(TYPE), {"call_2": cancelled}, {}).open[0].decision is Decision.HAND_BACK


@pytest.mark.parametrize("status", ["PENDING", "DISPATCHED", "STARTED"])
def test_a_call_in_flight_is_awaited(status: str) -> None:
    flying = Child("action", "act_1", status, False)
    assert resolve(_events(TYPE), {"call_2": flying}, {}).open[0].decision is Decision.AWAIT
    running = Child("run", "run_9", "RUNNING")
    look = resolve(_events({**LOOK, "id": "call_4"}), {"call_4": running}, {})
    assert look.open[0].decision is Decision.AWAIT


def test_a_call_that_never_became_anything_may_run_and_so_may_a_harmless_one_again() -> None:
    rebuilt = resolve(_events(TYPE, SHOT), {}, {})
    assert [o.decision for o in rebuilt.open] == [Decision.RUN, Decision.RUN]
    # The turn stays open: its results come when the calls run.
    assert rebuilt.messages[-1].role == "assistant"
    lost = Child("action", "act_2", "UNKNOWN", True)  # a screenshot: harmless to take again
    assert resolve(_events(SHOT), {"call_3": lost}, {}).open[0].decision is Decision.RUN


def test_a_type_refused_before_dispatch_for_want_of_approval_runs_once_approved_again() -> None:
    refused = Child("action", "act_1", "FAILED", False, never_ran=True)
    [open_call] = resolve(_events(TYPE), {"call_2": refused}, {}).open
    assert open_call.decision is Decision.RUN and open_call.child == refused
    # The same refusal with its outcome unknown is not a refusal: it hands back.
    unknown = Child("action", "act_1", "FAILED", False)
    assert resolve(_events(TYPE), {"call_2": unknown}, {}).open[0].decision is Decision.HAND_BACK


def test_journaled_results_stay_and_only_the_missing_calls_are_open() -> None:
    ran = Child("action", "act_2", "SUCCEEDED", True, _result("call_3", "a screenshot"))
    rebuilt = resolve(_events(TYPE, SHOT, results=("call_2",)), {"call_3": ran}, {})
    assert [o.call.id for o in rebuilt.open] == ["call_3"]
    results = rebuilt.messages[-1].tool_results
    assert [r.call_id for r in results] == ["call_2", "call_3"]  # in the model's order
    assert results[0].content == (TextPart("done call_2"),)


def test_guidance_stays_before_the_model_call_it_joined_and_is_not_taken_again() -> None:
    rebuilt = resolve(_events(TYPE, results=("call_2",)), {}, {"gd_1": "use the left field"})
    kinds = [(m.role, m.kind) for m in rebuilt.messages]
    assert kinds == [
        ("user", "request"),
        ("assistant", ""),
        ("user", ""),
        ("user", "guidance"),
        ("assistant", ""),
        ("user", ""),
    ]
    assert rebuilt.messages[3].text == "use the left field"
    assert rebuilt.guidance_seen == {"gd_1"}


def test_a_screenshot_in_a_journaled_result_is_a_note_and_an_earlier_turn_is_whole() -> None:
    events = _events(TYPE, results=("call_2",))
    events.insert(2, ("goal.tool_result", {"call": "call_x", "text": "", "images": [{"bytes": 9}]}))
    events[1][1]["tool_calls"].append({"id": "call_x", "name": "computer", "arguments": {}})
    rebuilt = resolve(events, {}, {})
    first = rebuilt.messages[2].tool_results
    assert [r.call_id for r in first] == ["call_1", "call_x"]
    assert first[1].content[-1] == TextPart(SCREENSHOT_NOTE)
    assert rebuilt.open == ()


def test_the_last_turns_calls_are_read_from_the_newest_model_call() -> None:
    assert [c.id for c in last_calls(_events(TYPE, SHOT))] == ["call_2", "call_3"]
    assert last_calls([("goal.request", {"text": "x"})]) == ()
    assert last_calls(_events()) == ()
    assert isinstance(last_calls(_events(TYPE))[0], ToolCall)


def test_a_turn_with_one_id_twice_is_handed_back_not_answered_from_the_first_result() -> None:
    """Two `type` calls with one id: the first one's result once answered the second, and the
    goal ended SUCCEEDED with the second's outcome unknown."""
    first = {**TYPE, "id": "dup"}
    second = {**TYPE, "id": "dup", "arguments": {"action": "type", "text": "more"}}
    rebuilt = resolve(_events(first, second, results=("dup",)), {}, {})
    [open_call] = rebuilt.open
    assert open_call.decision is Decision.HAND_BACK
    assert open_call.reason == (
        "model_error: tool call id dup was given twice; none of that turn's calls is run again"
    )


def test_an_id_of_an_earlier_turn_given_again_is_handed_back() -> None:
    """call_1 answered the first turn: its result must not answer a later call."""
    again = {**TYPE, "id": "call_1"}
    [open_call] = resolve(_events(again), {}, {}).open
    assert open_call.decision is Decision.HAND_BACK
    assert "tool call id call_1 was given twice" in open_call.reason


def test_call_ids_are_short_and_plain_and_reasons_quote_others_on_one_line() -> None:
    calls = [ToolCall("toolu_01AbC-9.x:1", "recall", {})]
    assert call_id_problem(calls, ()) == ""
    for bad in ("", "a\x00\n\x1b[2J\u202e", "x" * 129, "a b"):
        problem = call_id_problem([ToolCall(bad, "recall", {})], ())
        assert problem.endswith("is not 1 to 128 letters, digits or _.:-"), problem
        assert "\n" not in problem and len(problem) < 160
    assert shown_id("call_2") == "call_2"
    assert shown_id("a\nb") == '"a\\nb"'
    assert shown_id("y" * 400_000) == '"' + "y" * 64 + '"...'
