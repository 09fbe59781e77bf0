"""Action kinds this worker can run, their handlers, and the diagnostic actions built in.

A handler is a plain function `(args, ctx) -> result` run on a pool thread. It returns a JSON
value, raises ActionFailed (or any exception) to fail, and raises ActionCancelled once it sees
`ctx.cancelled` set. Cancellation is cooperative: a handler that never looks cannot be stopped.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import worker_pb2
from shared.receipts import decode_result, encode_result, safe_text
from worker_agent.scratch import OUTSIDE, ScratchDir, ScratchRefused, check_name

SUCCEEDED, FAILED, CANCELLED, REFUSED = "succeeded", "failed", "cancelled", "refused"


class ActionFailed(Exception):
    """The action ran and did not do what was asked; the message says why."""


class ActionCancelled(Exception):
    """The action stopped early because its attempt was cancelled."""


class ActionRefused(Exception):
    """The action was not run at all (unknown kind, malformed arguments, out of scope).

    `code` is machine-readable (e.g. `out_of_scope`, `kill_switch`, `human_active`); the
    receipt's error line starts with it so the coordinator can tell refusals apart.
    """

    def __init__(self, message: str, code: str = "refused") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Artifact:
    """Bytes an action produced (a screenshot): travels beside the receipt, stored by sha256."""

    media_type: str
    data: bytes
    width: int = 0
    height: int = 0

    @functools.cached_property
    def sha256(self) -> str:
        """Hashed once: the receipt's result, the kept file and its name all use it."""
        return hashlib.sha256(self.data).hexdigest()

    def ref(self) -> dict[str, object]:
        """What the receipt's result says about it: never the bytes themselves."""
        return {
            "sha256": self.sha256,
            "media_type": self.media_type,
            "bytes": len(self.data),
            "width": self.width,
            "height": self.height,
        }


def _never_blocked() -> str | None:
    return None


@dataclass(frozen=True)
class ActionContext:
    action_id: str
    attempt: int  # 1 for the first attempt
    timeout: float | None = None  # seconds; the executor cancels the attempt when it passes
    cancelled: threading.Event = field(default_factory=threading.Event)
    run_id: str = ""  # attempts of one run share a browser context
    # Values for `{{secret:NAME}}` references, sent with this dispatch only: never logged,
    # never written to disk, never put in a result.
    secrets: Mapping[str, str] = field(default_factory=dict)
    artifacts: list[Artifact] = field(default_factory=list)  # filled by the handler
    # Why desktop input may not happen right now (kill switch, no coordinator), or None.
    # Input handlers ask before they start and between chunks.
    input_blocked: Callable[[], str | None] = _never_blocked
    # A desktop action's approved scope as sent (`Dispatch.scope`); its handler checks it.
    scope: worker_pb2.ScopeGrant | None = None


MAX_ERROR = 2000  # characters; an error is a line for people, not a dump

Handler = Callable[[dict[str, Any], ActionContext], Any]


class ActionRegistry:
    """Action kinds and their handlers."""

    def __init__(self, handlers: dict[str, Handler] | None = None) -> None:
        self._handlers: dict[str, Handler] = dict(handlers or {})

    def register(self, kind: str, handler: Handler) -> None:
        self._handlers[kind] = handler

    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    def resolve(self, kind: str, args_json: str) -> tuple[Handler, dict[str, Any]]:
        """The handler and decoded args for a dispatch; ActionRefused if it cannot run here."""
        handler = self._handlers.get(kind)
        if handler is None:
            known = ", ".join(self.kinds()) or "nothing"
            raise ActionRefused(f"unknown action kind {kind!r} (this worker knows: {known})")
        try:
            args = decode_result(args_json) if args_json else {}
        except InvalidArgumentError as exc:
            raise ActionRefused(f"args of {kind}: {exc.message}") from exc
        if not isinstance(args, dict):
            raise ActionRefused(f"args of {kind} must be a JSON object, not {_json_type(args)}")
        return handler, args


@dataclass(frozen=True)
class Outcome:
    """How one run of a handler ended, as a receipt reports it."""

    status: str
    result_json: str = ""
    error: str = ""


def run_action(registry: ActionRegistry, kind: str, args_json: str, ctx: ActionContext) -> Outcome:
    """Run one action to its outcome; never raises (a defect in a handler is a failure)."""
    try:
        handler, args = registry.resolve(kind, args_json)
    except ActionRefused as exc:
        return Outcome(REFUSED, error=safe_text(str(exc)))
    return run_handler(handler, args, ctx)


def run_handler(handler: Handler, args: dict[str, Any], ctx: ActionContext) -> Outcome:
    """Run a resolved handler to its outcome; never raises."""
    try:
        return Outcome(SUCCEEDED, result_json=encode_result(handler(args, ctx)))
    except ActionCancelled as exc:
        return Outcome(CANCELLED, error=error_line(exc))
    except ActionRefused as exc:
        return Outcome(REFUSED, error=safe_text(f"{exc.code}: {exc}"[:MAX_ERROR]))
    except Exception as exc:
        return Outcome(FAILED, error=error_line(exc))


def error_line(exc: BaseException) -> str:
    """`ExceptionType: first line of the message`, safe for protobuf and SQL text."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return safe_text(text[:MAX_ERROR])


def default_registry(scratch: ScratchDir | None = None) -> ActionRegistry:
    """The actions every worker knows; `diag.append` writes only inside `scratch`."""

    def append(args: dict[str, Any], ctx: ActionContext) -> Any:
        return diag_append(args, ctx, scratch)

    def has_line(args: dict[str, Any], ctx: ActionContext) -> Any:
        return diag_has_line(args, ctx, scratch)

    return ActionRegistry(
        {
            "diag.echo": diag_echo,
            "diag.sleep": diag_sleep,
            "diag.fail": diag_fail,
            "diag.append": append,
            "diag.has_line": has_line,
        }
    )


def diag_echo(args: dict[str, Any], ctx: ActionContext) -> Any:
    """{"value": any} -> {"echo": value}."""
    return {"echo": args.get("value")}


def diag_sleep(args: dict[str, Any], ctx: ActionContext) -> Any:
    """{"seconds": number} -> {"slept": seconds}, or ActionCancelled as soon as cancelled."""
    seconds = args.get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not seconds >= 0:
        raise ActionFailed(f"diag.sleep needs 'seconds': a number >= 0, not {seconds!r}")
    if ctx.cancelled.wait(timeout=float(seconds)):
        raise ActionCancelled("cancelled while sleeping")
    return {"slept": seconds}


def diag_fail(args: dict[str, Any], ctx: ActionContext) -> Any:
    """Fail while `attempt <= fail_attempts` (absent or null: always), then succeed; with
    `seconds`, only after sleeping that long (interruptibly), like a task that fails late."""
    message = args.get("message", "failed on request")
    fail_attempts = args.get("fail_attempts")
    seconds = args.get("seconds", 0)
    if not isinstance(message, str):
        raise ActionFailed(f"diag.fail: 'message' must be a string, not {_json_type(message)}")
    if fail_attempts is not None and (type(fail_attempts) is not int or fail_attempts < 0):
        raise ActionFailed("diag.fail: 'fail_attempts' must be an integer >= 0 or null")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not seconds >= 0:
        raise ActionFailed(f"diag.fail: 'seconds' must be a number >= 0, not {seconds!r}")
    if ctx.cancelled.wait(timeout=float(seconds)) if seconds else False:
        raise ActionCancelled("cancelled while waiting to fail")
    if fail_attempts is None or ctx.attempt <= fail_attempts:
        raise ActionFailed(message)
    return {"recovered_after": ctx.attempt - 1}


def diag_append(args: dict[str, Any], ctx: ActionContext, scratch: ScratchDir | None) -> Any:
    """{"name": file name, "line": str}: append the line and a newline to the file of that
    name in the worker's scratch directory, durably.

    An owner never chooses a path on a worker: `path` is refused, and so is any name that is
    not one plain file name (see worker_agent/scratch.py). Not idempotent on purpose: running
    it twice leaves two lines, which is how tests see whether an action was redone.
    """
    if "path" in args:
        raise ActionRefused(
            "diag.append takes 'name', a file name in the worker's scratch directory; 'path' is"
            " refused (an owner never chooses a path on a worker)",
            code=OUTSIDE,
        )
    name, line = args.get("name"), args.get("line")
    if not isinstance(line, str):
        raise ActionFailed(f"diag.append needs 'line': a string, not {_json_type(line)}")
    try:
        check_name(name)
        data = (line + "\n").encode("utf-8")
    except ScratchRefused as exc:
        raise ActionRefused(str(exc), code=exc.code) from exc
    except UnicodeEncodeError as exc:
        raise ActionFailed(f"diag.append: 'line' is not valid Unicode text ({exc.reason})") from exc
    if scratch is None:
        raise ActionRefused("this worker has no scratch directory", code="not_offered")
    assert isinstance(name, str)
    try:
        written = scratch.append(name, data)
    except ScratchRefused as exc:
        raise ActionRefused(str(exc), code=exc.code) from exc
    return {"name": name, "bytes": written}


def diag_has_line(args: dict[str, Any], ctx: ActionContext, scratch: ScratchDir | None) -> Any:
    """{"name": file name, "line": str} -> {"name", "present": bool, "count": int}: whether the
    scratch file holds that line (a whole line, as `diag.append` writes it). Read-only: the
    postcondition of a `diag.append` (no file: the line is not there)."""
    name, line = args.get("name"), args.get("line")
    if not isinstance(line, str) or "\n" in line:
        raise ActionFailed(f"diag.has_line needs 'line': one line of text, not {_json_type(line)}")
    if scratch is None:
        raise ActionRefused("this worker has no scratch directory", code="not_offered")
    try:
        check_name(name)
        assert isinstance(name, str)
        data = scratch.read(name)
    except ScratchRefused as exc:
        raise ActionRefused(str(exc), code=exc.code) from exc
    lines = data.decode("utf-8", errors="replace").split("\n") if data else []
    count = lines.count(line)
    return {"name": name, "present": count > 0, "count": count}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if _is_number(value):
        return "a number"
    return names.get(type(value), type(value).__name__)
