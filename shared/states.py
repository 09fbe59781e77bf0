"""The one vocabulary of states: runs, actions and approvals, as the coordinator stores them
and every front end (the CLI, the console, MCP) shows and filters them (SPEC §3).

The members are `StrEnum`s: each is the very string stored and sent (`RunState.RUNNING ==
"RUNNING"`), so a value read back from the store or an RPC compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    """A run's state, in the order people read them."""

    RUNNING = "RUNNING"
    WAITING_FOR_ENVIRONMENT = "WAITING_FOR_ENVIRONMENT"
    WAITING_FOR_AUTHORITY = "WAITING_FOR_AUTHORITY"
    # A restarted or adopting coordinator is reconciling the run with its ledger.
    RECOVERING = "RECOVERING"
    # The run waits on a child run it started.
    DELEGATED = "DELEGATED"
    HAND_BACK_TO_HUMAN = "HAND_BACK_TO_HUMAN"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class ActionState(StrEnum):
    """An action's state in the ledger: PENDING -> DISPATCHED -> STARTED -> an outcome."""

    PENDING = "PENDING"
    DISPATCHED = "DISPATCHED"
    STARTED = "STARTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    CANCELLED = "CANCELLED"
    # A unit that a route hook settled without running it (research: an optional branch no
    # worker can take, a fetch past the run's limits); its error says why. It counts as done.
    SKIPPED = "SKIPPED"


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    SUSPENDED = "suspended"  # taken back (a kill switch, a person at the machine)
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"  # its run ended before an answer (cancelled with its parent)
    GUIDED = "guided"  # answered with guidance, not approved: a corrected request is asked anew


class GuidanceState(StrEnum):
    QUEUED = "queued"  # waits for the run's next safe boundary
    DELIVERED = "delivered"  # a model call or an action boundary took it
    NOT_RECEIVED = "not_received"  # the run stopped or ended before any boundary took it


class QuestionState(StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    EXPIRED = "expired"  # optional and unanswered in its time, or its goal stopped first


# What a run is (`RunRow.kind`): a plan of actions, a research question, a desktop control
# session, or a goal a model works towards (whose research, fetch and desktop runs are its
# children).
RUN_KINDS: tuple[str, ...] = ("plan", "research", "desktop", "goal")

RUN_STATES: tuple[RunState, ...] = tuple(RunState)
# A run that has not stopped: it may still act, wait or be reconciled.
ACTIVE: tuple[RunState, ...] = (
    RunState.RUNNING,
    RunState.WAITING_FOR_ENVIRONMENT,
    RunState.WAITING_FOR_AUTHORITY,
    RunState.RECOVERING,
    RunState.DELEGATED,
)
# A run that has stopped, for good or until a person retries it.
STOPPED: tuple[RunState, ...] = (
    RunState.SUCCEEDED,
    RunState.FAILED,
    RunState.HAND_BACK_TO_HUMAN,
    RunState.CANCELLED,
)
# Stopped runs that wait for a person to retry or abandon them.
STOPPED_FOR_A_PERSON: tuple[RunState, ...] = (RunState.FAILED, RunState.HAND_BACK_TO_HUMAN)

ACTION_STATES: tuple[ActionState, ...] = tuple(ActionState)
IN_FLIGHT: tuple[ActionState, ...] = (ActionState.DISPATCHED, ActionState.STARTED)
DONE: tuple[ActionState, ...] = (ActionState.SUCCEEDED, ActionState.SKIPPED)
FINISHED: tuple[ActionState, ...] = (
    ActionState.SUCCEEDED,
    ActionState.FAILED,
    ActionState.CANCELLED,
    ActionState.SKIPPED,
)
APPROVAL_STATES: tuple[ApprovalState, ...] = tuple(ApprovalState)
