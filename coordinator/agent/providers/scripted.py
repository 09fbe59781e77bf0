"""A model that replays a JSON script: for tests and the offline demo, no network at all.

The script (`scripted:NAME`) is a JSON object in the directory the operator named with
`serve --scripted-models-dir DIR`; NAME is a plain file name in it (letters, digits, '.', '_',
'-'; no path, no '..'). Only a regular file of at most MAX_SCRIPT_BYTES is read, without
following a symlink, and every refusal says the same thing: what an owner sends never makes
the coordinator reveal anything about its files. The detail goes to the coordinator's log.

The script is a JSON object:

    {"steps": [
        {"text": "Looking it up.",
         "tool_calls": [{"name": "research", "arguments": {"query": "..."}}]},
        {"sleep": 5},                        # this call takes 5 s (past a 2 s limit: timeout)
        {"error": "overloaded"},             # this call fails with ModelError("overloaded")
        {"text": "Done.", "stop": "end"}
    ]}

Each `complete()` consumes the next step, failing ones included (so a retry gets the step
after), and returns its text and tool calls; ids are `call_1`, `call_2`, ... across the whole
script unless a call gives its own `id`. `stop` defaults to "tool_use" when the step calls
tools and "end" otherwise. A step whose `sleep` exceeds the call's timeout sleeps `timeout`
seconds and raises ModelTimeout. When the steps run out every call returns an "end" turn with
the text "script finished". Usage is the token estimate of the request and of the step.
Every request is recorded in `.requests` (system, messages, tools), for tests to inspect.

A model opened for a goal resumed from its journal (a retry after a restart) starts at the
step after the assistant turns its first request already holds. A checkpoint request (the
context manager's summary instruction as the system prompt) consumes no step: it is answered
with the turns' text.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.agent.context import SUMMARY_INSTRUCTION
from coordinator.agent.conversation import (
    Message,
    ModelConfigError,
    ModelError,
    ModelSpecError,
    ModelTimeout,
    ModelTurn,
    ToolCall,
    ToolSpec,
    Usage,
)
from coordinator.agent.tokens import CHARS_PER_TOKEN, estimate_tokens

log = logging.getLogger(__name__)

FINISHED = "script finished"
STOPS = ("tool_use", "end", "max_tokens", "refusal")
MAX_SCRIPT_BYTES = 1 << 20
SCRIPT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# One answer for every refusal: which files exist, and what they hold, stays the operator's.
NO_SUCH_SCRIPT = (
    "scripted: no script of that name is offered here (a plain file name from the"
    " coordinator's scripted models directory)"
)
NOT_OFFERED = "scripted: this coordinator offers no scripted models"


@dataclass(frozen=True)
class ScriptedRequest:
    """One call the scripted model received."""

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]


@dataclass(frozen=True)
class Step:
    text: str = ""
    tool_calls: tuple[tuple[str | None, str, dict[str, Any]], ...] = ()  # (id, name, arguments)
    stop: str | None = None
    sleep: float = 0.0
    error: str | None = None


class ScriptedModel:
    """Replays its steps in order, one per call."""

    def __init__(self, steps: list[Step], *, name: str = "script") -> None:
        self._steps = list(steps)
        self._name = name
        self._next = 0
        self._calls = 0
        self._lock = threading.Lock()
        self.requests: list[ScriptedRequest] = []

    @classmethod
    def from_directory(cls, directory: Path | None, name: str) -> ScriptedModel:
        """The script NAME in the operator's `directory`; ModelSpecError (always the same
        message) when there is none to use. Blocking: call it off the event loop."""
        if directory is None:
            raise ModelSpecError(NOT_OFFERED)
        if not SCRIPT_NAME.fullmatch(name) or ".." in name:
            log.warning("scripted model refused: %r is not a plain file name", name[:200])
            raise ModelSpecError(NO_SUCH_SCRIPT)
        try:
            return cls(parse_script(json.loads(_read_script(directory / name)), name), name=name)
        except (OSError, ValueError, ModelConfigError) as exc:
            log.warning("scripted model %r refused: %s", name, exc)
            raise ModelSpecError(NO_SUCH_SCRIPT) from None

    @property
    def name(self) -> str:
        return f"scripted:{self._name}"

    @property
    def remaining(self) -> int:
        return len(self._steps) - self._next

    def complete(
        self,
        system: str,
        messages: tuple[Message, ...],
        tools: tuple[ToolSpec, ...],
        *,
        timeout: float,
    ) -> ModelTurn:
        if system == SUMMARY_INSTRUCTION:
            # A checkpoint, not a step of the script: say what the turns held, plainly.
            summary = " ".join(m.text for m in messages if m.text)[:2000] or "(no text)"
            tokens = estimate_tokens(messages, system, tools)
            return ModelTurn(f"checkpoint: {summary}", (), "end", _usage(tokens, summary))
        with self._lock:
            if not self.requests:
                # A loop resumed from its journal: the script goes on where the conversation
                # stands, one step per assistant turn already taken.
                self._next = sum(m.role == "assistant" for m in messages)
                self._calls = sum(len(m.tool_calls) for m in messages)
            self.requests.append(ScriptedRequest(system, tuple(messages), tuple(tools)))
            step = self._steps[self._next] if self._next < len(self._steps) else None
            if step is not None:
                self._next += 1
                ids = []
                for given, _, _ in step.tool_calls:
                    self._calls += 1
                    ids.append(given or f"call_{self._calls}")
        input_tokens = estimate_tokens(messages, system, tools)
        if step is None:
            return ModelTurn(FINISHED, (), "end", _usage(input_tokens, FINISHED))
        if step.sleep:
            if step.sleep > timeout:
                time.sleep(max(timeout, 0.0))
                raise ModelTimeout(f"scripted: the step took longer than {timeout:g} s")
            time.sleep(step.sleep)
        if step.error is not None:
            raise ModelError(f"scripted: {step.error}")
        calls = tuple(
            ToolCall(id=call_id, name=name, arguments=dict(arguments))
            for call_id, (_, name, arguments) in zip(ids, step.tool_calls, strict=True)
        )
        stop = step.stop or ("tool_use" if calls else "end")
        output = step.text + json.dumps([c.arguments for c in calls])
        return ModelTurn(step.text, calls, stop, _usage(input_tokens, output))


def _read_script(path: Path) -> str:
    """The text of a regular file of at most MAX_SCRIPT_BYTES (no symlink, FIFO or device)."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: no symlink out.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        data = fh.read(MAX_SCRIPT_BYTES + 1)
    if len(data) > MAX_SCRIPT_BYTES:
        raise ValueError(f"{path} is larger than {MAX_SCRIPT_BYTES} bytes")
    return data.decode("utf-8")


def parse_script(doc: object, where: str = "script") -> list[Step]:
    """`{"steps": [...]}` -> steps; ModelConfigError names the first bad field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ModelConfigError(f'scripted: {where} must be an object with a "steps" list')
    steps = []
    for n, raw in enumerate(doc["steps"], start=1):
        at = f"scripted: {where} step {n}"
        if not isinstance(raw, dict):
            raise ModelConfigError(f"{at} is not an object")
        unknown = sorted(set(raw) - {"text", "tool_calls", "stop", "sleep", "error"})
        if unknown:
            raise ModelConfigError(f"{at}: unknown field {unknown[0]!r}")
        calls = []
        for call in raw.get("tool_calls") or ():
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ModelConfigError(f"{at}: each tool call needs a name")
            arguments = call.get("arguments", {})
            if not isinstance(arguments, dict):
                raise ModelConfigError(f"{at}: {call['name']}'s arguments must be an object")
            call_id = call.get("id")
            calls.append((str(call_id) if call_id else None, call["name"], arguments))
        stop = raw.get("stop")
        if stop is not None and stop not in STOPS:
            raise ModelConfigError(f"{at}: stop must be one of {', '.join(STOPS)}")
        sleep = raw.get("sleep", 0)
        if not isinstance(sleep, int | float) or isinstance(sleep, bool) or sleep < 0:
            raise ModelConfigError(f"{at}: sleep must be a number of seconds")
        error = raw.get("error")
        steps.append(
            Step(
                text=str(raw.get("text", "")),
                tool_calls=tuple(calls),
                stop=stop,
                sleep=float(sleep),
                error=None if error is None else str(error),
            )
        )
    return steps


def _usage(input_tokens: int, output: str) -> Usage:
    return Usage(input_tokens, -(-len(output) // CHARS_PER_TOKEN))
