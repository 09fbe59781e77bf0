"""What a model is told when a desktop action did not succeed: one line that names the action,
says whether anything happened, gives the coordinator's reason and what to do about it."""

from __future__ import annotations

from deskfleet.types import ActResult
from shared import desktop_scope as contract

# What the model should do next, by refusal code: a refusal is a person's decision or the
# approval's limit, so most mean "do not try again".
_NEXT = {
    contract.KILL_SWITCH: "A person engaged the kill switch: stop now; nothing will run until"
    " it is released and the desktop is approved again.",
    contract.REAPPROVAL_NEEDED: "The approval was taken back: stop and report; a person must"
    " approve the desktop again.",
    contract.EXPIRED: "The approval's time is over: stop and report.",
    contract.MAX_ACTIONS_USED: "The approval's actions are used up: stop and report.",
    contract.DENIED: "The request was denied: stop.",
    contract.NOT_APPROVED: "The desktop is not approved yet: stop and wait for a person.",
    contract.OUT_OF_SCOPE: "It is outside what the person approved: do not try it again.",
    contract.OUTSIDE_REGION: "The point is outside the approved region of the screen: act"
    " inside it.",
    contract.HUMAN_ACTIVE: "A person is using the desktop: wait for them to hand it back.",
}


def explain(done: ActResult) -> str:
    """The model's line for an action that did not succeed."""
    why = done.error or contract.CODES.get(done.reason, ("", done.reason or "no reason given"))[1]
    if done.status == "refused":
        head = f"{done.action} was refused and nothing was done: {why}"
    elif done.status == "unknown":
        head = f"{done.action} may or may not have happened (its outcome is unknown): {why}"
    elif done.status == "cancelled":
        head = f"{done.action} was stopped before it finished: {why}"
    else:
        head = f"{done.action} failed: {why}"
    advice = _NEXT.get(done.reason)
    return f"{head}. {advice}" if advice else head


def modifiers_refused(action: str, keys: str) -> str:
    """Keys held during a click or scroll: the desktop cannot hold them, and acting without
    them would do something else than what was asked."""
    return (
        f"{action} with {keys!r} held was refused and nothing was done: this desktop cannot"
        " hold keys during a mouse action. Do it without keys held, or press a shortcut"
        " with the key action."
    )


def no_answer(action: str, error: Exception) -> str:
    """The fleet did not answer (the coordinator unreachable, a deadline passed): the action
    may not have been sent, or may have run without its receipt arriving."""
    return f"{action}: no answer from the fleet, so it is not known to have happened: {error}"
