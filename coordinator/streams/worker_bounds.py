"""What a worker's stream may carry, beyond its hello (`shared/advertisement.HelloLimits`).

A worker is a peer, not a part of the coordinator: an enrolled machine may be broken or taken
over, and what it sends reaches the store, the journal and the logs. Every id it sends names
a row whose id column holds `MAX_ID` characters of an id's alphabet (`shared.ids`), so a
longer one, or one with another character, names nothing; a receipt's status is one of four
words; its error is a line for people; its times are numbers, and no text of it holds what
the store's text cannot (NUL). Each check is a few comparisons on the message as it arrives:
receipts are the hot path, and a check that read the store would cost as much as the receipt.

What is refused is answered (a receipt gets a refused `ReceiptAck` naming the limit, so the
worker forgets it instead of sending it again) or dropped (a start, a kill switch
acknowledgement, a peek's answer: they ask for no answer), and counted in a `RefusalLog`,
which logs at a bounded rate, so a flood costs neither the disk nor the event loop.

A stream whose reports (receipts and starts) keep being refused, here or by the ledger, is
ended past a limit (`ReportBudget`): a correct worker reports only on attempts it was given,
so what the ledger refuses of it is about attempts taken back from it, each of which it was
told about (its hello listed it, or the attempt was cancelled on its stream); those are not
counted, and a correct worker's count stays at zero.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence

from coordinator.model.orders import Held, IncomingReceipt
from shared.advertisement import Advertisement, HelloLimits
from shared.ids import ID_CHARACTERS, foreign_character

log = logging.getLogger(__name__)

MAX_ID = 64  # characters: the store's id columns (actions, runs, attempts, kill switches)
# worker.proto's Receipt.status; the worker's own words (worker_agent/actions.py).
RECEIPT_STATUSES = frozenset({"succeeded", "failed", "cancelled", "refused"})
HELD_STATES = frozenset({"running", "finished", "interrupted"})
# A receipt's error. The worker cuts its own at 2,000 characters; a cancelled attempt's adds
# the coordinator's reason (a kill switch's, up to 1,000): past this is no line for people.
MAX_ERROR = 8_000
MAX_TRACEPARENT = 64  # a W3C traceparent is 55 characters; the store keeps 64
MAX_SHA256 = 64  # an artifact's sha256 in hex
MAX_MEDIA_TYPE = 64  # the store's column
MAX_PEEK_ERROR = 1_000  # a peek refusal is shown to the admin who asked, in one line
MAX_CODE = 64  # a refusal code (`no_display`, `kill_switch`, ...)
LOG_EVERY = 30.0  # seconds between two lines of one RefusalLog
REFUSED_REPORTS_WINDOW = 60.0  # seconds: refused reports are counted per window (`ReportBudget`)
# A report on an attempt the stream was told was taken back (listed in its hello, cancelled
# on it) is not counted this many times: its start and its receipt.
FREE_REPORTS_PER_ATTEMPT = 2
MAX_KNOWN_ATTEMPTS = 1024  # such attempts remembered per stream, the oldest forgotten first


def _too_long(name: str, value: str, limit: int) -> str:
    return f"{name}: at most {limit} characters (got {len(value)})" if len(value) > limit else ""


def _id_refusal(name: str, value: str, *, required: bool = True) -> str:
    if required and (not value or len(value) > MAX_ID):
        return f"{name}: 1 to {MAX_ID} characters (got {len(value)})"
    found = _too_long(name, value, MAX_ID)
    if found:
        return found
    at = foreign_character(value)
    if at >= 0:
        return f"{name}: an id holds only {ID_CHARACTERS} (U+{ord(value[at]):04X} at {at})"
    return ""


def _unstorable(name: str, value: str) -> str:
    """Why the store's text cannot hold `value` (PostgreSQL's holds no NUL, and no text holds
    a lone surrogate); "" when it can."""
    at = value.find("\x00")
    if at < 0 and not value.isascii():
        at = next((i for i, c in enumerate(value) if "\ud800" <= c <= "\udfff"), -1)
    if at < 0:
        return ""
    return f"{name}: U+{ord(value[at]):04X} at {at} is no character the store's text can hold"


def _time_refusal(name: str, value: float) -> str:
    return "" if math.isfinite(value) else f"{name}: a finite number of seconds (got {value})"


def receipt_refusal(r: IncomingReceipt) -> str:
    """Why the receipt cannot be recorded as it is, naming the limit; "" when it can."""
    found = _id_refusal("action_id", r.action_id) or _id_refusal("run_id", r.run_id)
    if found:
        return found
    if r.status not in RECEIPT_STATUSES:
        shown = r.status[:20] + ("..." if len(r.status) > 20 else "")
        return f"status: one of {', '.join(sorted(RECEIPT_STATUSES))} (got {shown!r})"
    found = (
        _id_refusal("attempt_id", r.attempt_id, required=False)
        or _too_long("error", r.error, MAX_ERROR)
        or _too_long("traceparent", r.traceparent, MAX_TRACEPARENT)
        or _time_refusal("started_at", r.started_at)
        or _time_refusal("finished_at", r.finished_at)
        or _unstorable("error", r.error)
        or _unstorable("traceparent", r.traceparent)
    )
    if found:
        return found
    for i, a in enumerate(r.artifacts):
        found = (
            _too_long(f"artifacts[{i}].sha256", a.sha256, MAX_SHA256)
            or _too_long(f"artifacts[{i}].media_type", a.media_type, MAX_MEDIA_TYPE)
            or _unstorable(f"artifacts[{i}].sha256", a.sha256)
            or _unstorable(f"artifacts[{i}].media_type", a.media_type)
        )
        if found:
            return found
    return ""


def ids_refusal(**ids: str) -> str:
    """Why these ids name nothing the store could hold; "" when each could."""
    for name, value in ids.items():
        found = _id_refusal(name, value)
        if found:
            return found
    return ""


def hello_refusal(
    size: int, advertisement: Advertisement, held: Sequence[Held], limits: HelloLimits
) -> str:
    """Why a hello (`size` bytes serialized) is refused, naming the limit; "" when it is not."""
    if size > limits.max_bytes:
        return f"hello limit max_bytes={limits.max_bytes}: the hello is {size} bytes"
    return limits.refusal(advertisement) or held_refusal(held, limits.max_held)


def held_refusal(held: Sequence[Held], max_held: int) -> str:
    """Why a hello's list of held attempts is refused (naming the limit); "" when it is not."""
    if len(held) > max_held:
        return f"hello limit max_held={max_held}: held lists {len(held)} attempts"
    for i, h in enumerate(held):
        found = _id_refusal(f"held[{i}].action_id", h.action_id) or _id_refusal(
            f"held[{i}].attempt_id", h.attempt_id, required=False
        )
        if found:
            return found
        if h.state not in HELD_STATES:
            return f"held[{i}].state: one of {', '.join(sorted(HELD_STATES))}"
    return ""


class RefusalLog:
    """Messages of one kind that were refused or dropped: counted, and logged at once the
    first time, then at most one line every LOG_EVERY seconds saying how many more."""

    def __init__(self, what: str, every: float = LOG_EVERY) -> None:
        self.what = what
        self.total = 0
        self._every = every
        self._unlogged = 0
        self._last = -every

    def note(self, worker_id: str, reason: str) -> bool:
        """One more refused; `reason` is ours (it names the limit, never the peer's text).
        True when this one was logged."""
        self.total += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._last < self._every:
            return False
        log.warning(
            "refused %d %s (%d since start); the last from worker %s: %s",
            self._unlogged,
            self.what,
            self.total,
            worker_id,
            reason,
        )
        self._last = now
        self._unlogged = 0
        return True


class ReportBudget:
    """The refused reports of one worker stream: counted in windows of `window` seconds, and
    the stream ended (`end`, told why) once a window holds more than `limit` (0: no limit).

    A report on an attempt the stream was told it no longer holds (`given`: its hello listed
    it, or a cancel of it was sent on the stream) is the late report of a correct worker: the
    first FREE_REPORTS_PER_ATTEMPT of those per attempt are not counted."""

    def __init__(
        self,
        worker_id: str,
        limit: int,
        window: float,
        end: Callable[[str], None],
        held: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.worker_id = worker_id
        self.ended = False
        self._limit = limit
        self._window = window
        self._end = end
        self._known: dict[tuple[str, str], int] = {}  # (action, attempt) -> free reports left
        self._count = 0
        self._since = time.monotonic()
        for action_id, attempt_id in held:
            self.given(action_id, attempt_id)

    def given(self, action_id: str, attempt_id: str) -> None:
        """The stream was told of this attempt (listed, cancelled): its late reports are free."""
        key = (action_id, attempt_id)
        if key in self._known:
            return
        if len(self._known) >= MAX_KNOWN_ATTEMPTS:
            del self._known[next(iter(self._known))]
        self._known[key] = FREE_REPORTS_PER_ATTEMPT

    def refused(self, action_id: str, attempt_id: str, reason: str) -> bool:
        """One report of the stream was refused (`reason`: ours, a code or a limit). True when
        this ended the stream."""
        free = self._known.get((action_id, attempt_id), 0)
        if free:
            self._known[(action_id, attempt_id)] = free - 1
            return False
        if self.ended or not self._limit:
            return False
        now = time.monotonic()
        if now - self._since >= self._window:
            self._since, self._count = now, 0
        self._count += 1
        if self._count <= self._limit:
            return False
        self.ended = True
        self._end(
            f"refused reports limit max_refused_reports={self._limit} per {self._window:g} s:"
            f" the coordinator refused {self._count} receipts and starts of this stream"
            f" (the last: {reason})"
        )
        return True


class ReportBudgets:
    """The `ReportBudget` of each worker stream this replica holds, found by worker."""

    def __init__(self, limit: int, window: float = REFUSED_REPORTS_WINDOW) -> None:
        self.limit = limit
        self.window = window
        self._open: dict[str, ReportBudget] = {}
        self.ended = 0  # streams ended since start
        self._unlogged = 0
        self._logged_at = -LOG_EVERY

    def open(
        self, worker_id: str, end: Callable[[str], None], held: Iterable[tuple[str, str]] = ()
    ) -> ReportBudget:
        """The budget of a new stream of the worker (it replaces the worker's older one)."""

        def ended(reason: str) -> None:
            self.ended += 1
            self._unlogged += 1
            now = time.monotonic()
            if now - self._logged_at >= LOG_EVERY:  # a reconnecting flood costs few lines
                log.warning(
                    "ended the stream of worker %s (streams ended: %d since the last such line,"
                    " %d since start): %s",
                    worker_id,
                    self._unlogged,
                    self.ended,
                    reason,
                )
                self._logged_at, self._unlogged = now, 0
            end(reason)

        budget = ReportBudget(worker_id, self.limit, self.window, ended, held)
        self._open[worker_id] = budget
        return budget

    def close(self, budget: ReportBudget) -> None:
        if self._open.get(budget.worker_id) is budget:
            del self._open[budget.worker_id]

    def given(self, worker_id: str, action_id: str, attempt_id: str) -> None:
        budget = self._open.get(worker_id)
        if budget is not None:
            budget.given(action_id, attempt_id)

    def refused(self, worker_id: str, action_id: str, attempt_id: str, reason: str) -> None:
        budget = self._open.get(worker_id)
        if budget is not None:
            budget.refused(action_id, attempt_id, reason)
