"""A goal's conversation rebuilt from its durable record, and what each of its open tool calls
became, read from the ledger instead of guessed (the seed chapter's first error: "assume it
did not happen and repeat a non-idempotent mutation").

The journal holds the request, each model turn (`goal.model_call`, with its tool calls and the
guidance that joined it), each tool result (`goal.tool_result`) and each child run a call
started (`run.child`). A call of the last turn without a result is resolved from what the
ledger says it became (`Child`, read by the loop):

- it finished (its desktop action has a receipt, its research or fetch run stopped): its real
  result goes back to the model, and is journaled as recovered;
- it is still in flight (dispatched, started, a child run still open): the loop waits for it;
- it stopped with no result to read and it is not idempotent (its outcome unknown, or
  cancelled in flight): the goal hands back to a person, naming the call;
- it never became anything, was refused before dispatch until a person approves again, or it
  is harmless to run again (a read, a screenshot): it runs.

Guidance that joined a model call and answers to questions stay in the conversation at their
place. Nothing here reads or writes: `resolve` is a pure function of the events and children.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.agent.conversation import Message, TextPart, ToolCall, ToolResult
from shared.states import ACTIVE, IN_FLIGHT, ActionState

# What providers give (`toolu_...`, `call_...`): a call's result is keyed by its id, in the
# journal and in the conversation, so an id is short, plain and never given twice in a goal.
CALL_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
SCREENSHOT_NOTE = "[a screenshot was here: take a new one to see the screen]"


class Decision(enum.Enum):
    RESULT = "result"  # its result is known (journaled, or read from the ledger)
    AWAIT = "await"  # in flight: wait for its outcome
    RUN = "run"  # never dispatched (or harmless to run again): run it
    HAND_BACK = "hand_back"  # not idempotent, outcome unknown: a person decides


@dataclass(frozen=True)
class Child:
    """What a tool call became, as the ledger has it now."""

    kind: str  # "action" (a desktop act) or "run" (a research, fetch or desktop run)
    id: str
    status: str  # the action's or the run's status
    idempotent: bool = True
    result: ToolResult | None = None  # its result for the model, once it has finished
    # Refused before dispatch for want of a person's approval: it never ran, and runs once
    # approved again.
    never_ran: bool = False

    @property
    def finished(self) -> bool:
        return self.result is not None

    @property
    def in_flight(self) -> bool:
        if self.kind == "run":
            return self.status in ACTIVE
        return self.status in (ActionState.PENDING, *IN_FLIGHT)


@dataclass(frozen=True)
class Open:
    """A call of the last turn with no journaled result, and what to do with it."""

    call: ToolCall
    decision: Decision
    child: Child | None = None
    reason: str = ""  # for HAND_BACK: why, naming the call


@dataclass(frozen=True)
class Rebuilt:
    messages: tuple[Message, ...]
    open: tuple[Open, ...]  # in the order the model asked for them
    guidance_seen: frozenset[str]  # guidance ids already in the conversation


def resolve(
    events: Sequence[tuple[str, dict[str, Any]]],
    children: Mapping[str, Child],
    guidance: Mapping[str, str],
) -> Rebuilt:
    """The conversation and the open calls, from the goal's journal events (kind, data) in
    order, what each call became (by call id) and the text of each guidance message (by id)."""
    messages: list[Message] = []
    results: dict[str, ToolResult] = {}
    turn: tuple[ToolCall, ...] = ()
    seen: set[str] = set()

    def close_turn() -> None:
        nonlocal turn
        if not turn:
            return
        kept = tuple(results[c.id] for c in turn if c.id in results)
        missing = [c for c in turn if c.id not in results]
        # An earlier turn always ran to its end before the next model call: a result missing
        # there was never journaled, and its call is long past.
        kept += tuple(
            ToolResult(c.id, (TextPart("no result was recorded for this call"),), True)
            for c in missing
        )
        messages.append(Message("user", "", tool_results=kept))
        turn = ()

    earlier: list[str] = []  # the ids of the turns before the last
    for kind, data in events:
        if kind == "goal.request":
            messages.append(Message("user", str(data.get("text", "")), kind="request"))
        elif kind == "goal.model_call":
            earlier.extend(c.id for c in turn)
            close_turn()
            results.clear()  # a result answers a call of its own turn only
            for guidance_id in data.get("guidance") or ():
                seen.add(str(guidance_id))
                text = guidance.get(str(guidance_id))
                if text is not None:
                    messages.append(Message("user", text, kind="guidance"))
            turn = tuple(
                ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
                for c in data.get("tool_calls") or ()
            )
            messages.append(Message("assistant", str(data.get("text", "")), turn))
        elif kind == "goal.tool_result":
            results[str(data.get("call", ""))] = journaled_result(data)
    last = turn
    opened: list[Open] = []
    problem = call_id_problem(last, earlier)
    if problem:
        why = f"model_error: {problem}; none of that turn's calls is run again"
        return Rebuilt(
            tuple(messages), (Open(last[0], Decision.HAND_BACK, None, why),), frozenset(seen)
        )
    for call in last:
        if call.id in results:
            continue
        opened.append(_decide(call, children.get(call.id)))
    recovered = {o.call.id: o.child.result for o in opened if o.child and o.child.result}
    results.update({k: v for k, v in recovered.items() if v is not None})
    if last and all(c.id in results for c in last):
        close_turn()  # every call of the last turn is known: the conversation is whole again
    return Rebuilt(tuple(messages), tuple(opened), frozenset(seen))


def call_id_problem(calls: Sequence[ToolCall], earlier: Iterable[str]) -> str:
    """Why the ids of one model turn cannot key its calls' results ('' when they can): one
    that is not 1 to 128 plain characters, or one given before in the goal or this turn."""
    seen = set(earlier)
    for call in calls:
        if not CALL_ID.fullmatch(call.id):
            return f"tool call id {shown_id(call.id)} is not 1 to 128 letters, digits or _.:-"
        if call.id in seen:
            return f"tool call id {call.id} was given twice"
        seen.add(call.id)
    return ""


def shown_id(call_id: str) -> str:
    """A call id as a reason may quote it: a plain one as it is, another quoted, at most 64
    characters of it, its escapes spelled out (a newline would split a stop reason's line)."""
    if CALL_ID.fullmatch(call_id) and len(call_id) <= 64:
        return call_id
    return json.dumps(call_id[:64]) + ("..." if len(call_id) > 64 else "")


def journaled_result(data: Mapping[str, Any]) -> ToolResult:
    """A `goal.tool_result` event as the model is given it again (a screenshot is a note:
    the model takes a new one)."""
    parts: list[Any] = [TextPart(str(data.get("text", "")))]
    if data.get("images"):
        parts.append(TextPart(SCREENSHOT_NOTE))
    return ToolResult(str(data.get("call", "")), tuple(parts), bool(data.get("is_error")))


def resolve_one(call: ToolCall, child: Child | None) -> Open:
    """What to do with one open call, given what it became."""
    return _decide(call, child)


def last_calls(events: Sequence[tuple[str, dict[str, Any]]]) -> tuple[ToolCall, ...]:
    """The tool calls of the journal's last model turn."""
    for kind, data in reversed(events):
        if kind == "goal.model_call":
            return tuple(
                ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
                for c in data.get("tool_calls") or ()
            )
    return ()


def _decide(call: ToolCall, child: Child | None) -> Open:
    if child is None or child.never_ran:
        return Open(call, Decision.RUN, child)
    if child.finished:
        return Open(call, Decision.RESULT, child)
    if child.in_flight:
        return Open(call, Decision.AWAIT, child)
    if child.kind == "action" and not child.idempotent:
        # Stopped with no receipt to read (its outcome unknown, or cancelled in flight): it
        # may have acted, and running it again could act twice.
        return Open(
            call,
            Decision.HAND_BACK,
            child,
            f"unknown_outcome: the goal's {call.name} call {shown_id(call.id)} became action"
            f" {child.id}"
            f" ({child.status}), which is not idempotent and whose outcome is not known; check"
            " whether it took effect, then retry or abandon the goal",
        )
    return Open(call, Decision.RUN, child)  # harmless to run again: a read, a screenshot
