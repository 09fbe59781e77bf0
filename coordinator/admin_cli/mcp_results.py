"""The shapes of the MCP tools' results: each tool publishes one as its `outputSchema`, and its
`structuredContent` is checked against it before it leaves. Keys are the RPC messages' JSON
names (camelCase), as `deskfleet ... --json` prints them."""

from __future__ import annotations

from typing import Any, NotRequired

# pydantic reads TypedDicts from typing_extensions only, before Python 3.12.
from typing_extensions import TypedDict


class Waiting(TypedDict):
    code: str
    detail: str


class FleetStatusResult(TypedDict):
    headlessOnline: int
    computerUseOnline: int
    online: int
    workers: list[dict[str, Any]]
    replicas: list[dict[str, Any]]
    nextPageToken: str


class RunSummary(TypedDict):
    """A run as research, submit_plan and cancel_run hand it back."""

    runId: str
    status: str
    stopReason: NotRequired[str]
    waiting: NotRequired[Waiting]
    report: NotRequired[dict[str, Any] | None]  # research runs, once stopped


class GuideResult(TypedDict):
    """A message queued by guide_run (or the one its message id queued before)."""

    guidanceId: str
    messageId: str
    seq: int
    queued: int
    execution: int
    repeatedSend: bool


class ApprovalAnswer(TypedDict):
    """An approval as guide_approval leaves it."""

    id: str
    runId: str
    status: str
    answer: str


class NoteResult(TypedDict):
    """A note of an approval's discussion (advise_approval: the advice)."""

    id: str
    kind: str
    author: str
    text: str
    at: NotRequired[str]


class DiscussionResult(TypedDict):
    """An approval's discussion, oldest note first."""

    approval: dict[str, Any]
    goalRequest: NotRequired[str]
    notes: NotRequired[list[dict[str, Any]]]


class QuestionsResult(TypedDict):
    """Questions goals asked, as list_questions hands them back (newest first)."""

    questions: list[dict[str, Any]]


class QuestionResult(TypedDict):
    """A question as answer_question leaves it."""

    id: str
    runId: str
    status: str
    answer: NotRequired[str]
    guidanceId: NotRequired[str]


class RunResult(TypedDict):
    """A run as run_status (and the run resource) hands it back."""

    id: str
    title: str
    status: str
    stopReason: str
    lastSeq: int
    actionsTotal: int
    actionsSucceeded: int
    actions: list[dict[str, Any]]
    waiting: NotRequired[dict[str, Any]]
    limits: NotRequired[dict[str, Any]]
    timeline: NotRequired[dict[str, Any]]
    report: NotRequired[dict[str, Any] | None]


class DesktopRequestResult(TypedDict):
    runId: str
    status: str
    waiting: dict[str, Any]
    approval: dict[str, Any] | None


class DesktopActResult(TypedDict):
    runId: str
    actionId: str
    status: str
    code: str
    error: str
    receiptId: str
    result: Any
    artifacts: list[dict[str, Any]]


class JournalSearchResult(TypedDict):
    matches: list[dict[str, Any]]
    cursor: str
    hasMore: bool
    matchLimitReached: bool


class JournalEntryResult(TypedDict):
    runId: str
    seq: int
    kind: str
    text: str
    offset: int
    nextOffset: int
    totalLength: int
    archived: bool
