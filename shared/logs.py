"""Process logs: one JSON object per line (or the classic text line), with the ids in play.

Where a dispatch, a receipt or an action is handled, `log_context(run_id=..., ...)` puts its
ids in a context variable; every record logged inside carries them, and the trace id of the
current span when there is one, so that a log line can be found from a run, an action or a
trace and back.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from opentelemetry import trace

from shared.errors import InvalidArgumentError
from shared.text import visible

FORMATS = ("json", "text")
# The order of the ids on a line; any other field follows.
ID_FIELDS = ("run_id", "action_id", "attempt_id", "worker_id", "trace_id", "span_id")

_fields: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "log_fields", default=MappingProxyType({})
)


@contextlib.contextmanager
def log_context(**fields: str) -> Iterator[None]:
    """Records logged in the block carry these fields (empty values are left out)."""
    merged = {**_fields.get(), **{k: v for k, v in fields.items() if v}}
    token = _fields.set(merged)
    try:
        yield
    finally:
        _fields.reset(token)


def context_fields() -> dict[str, str]:
    """The ids of the current context, with the current span's trace and span ids."""
    fields = dict(_fields.get())
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        fields.setdefault("trace_id", format(span.trace_id, "032x"))
        fields.setdefault("span_id", format(span.span_id, "016x"))
    return fields


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "msg", ids..., "exc"}` on one line, ASCII only."""

    def __init__(self, static: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = {**self._static, **context_fields()}
        for key in ID_FIELDS:
            if key in fields:
                doc[key] = fields.pop(key)
        doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=True)


class TextFormatter(logging.Formatter):
    """The classic line, with the ids in play appended as key=value."""

    def __init__(self, static: Mapping[str, str] | None = None) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        # Messages quote what others wrote (DISPLAY, a capability's reason, a path): an escape
        # sequence is spelled out, not run by the terminal that tails the log (as json does).
        line = visible(super().format(record), multiline=True)
        fields = {**self._static, **context_fields()}
        if not fields:
            return line
        return line + " " + " ".join(f"{k}={v}" for k, v in fields.items())


def configure(level: str, fmt: str, static: Mapping[str, str] | None = None) -> None:
    """Send this process's log records to stderr in `fmt` (json or text) at `level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(static) if fmt == "json" else TextFormatter(static))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    try:
        root.setLevel(level.upper())
    except ValueError as exc:
        raise InvalidArgumentError(
            f"--log-level: {level[:40]!r} is not a level (DEBUG, INFO, WARNING, ERROR)"
        ) from exc
    root.addHandler(handler)


def add_static(**fields: str) -> None:
    """Fields every later line carries (the worker's id once it is known)."""
    for handler in logging.getLogger().handlers:
        formatter = handler.formatter
        if isinstance(formatter, JsonFormatter | TextFormatter):
            formatter._static.update({k: v for k, v in fields.items() if v})


def _iso(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"
