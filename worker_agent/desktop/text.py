"""What `desktop.type` types: text whose secret references are resolved only at typing
time, typed in chunks so that a kill switch stops it within one chunk."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from shared.desktop_scope import INVALID_ARGUMENT, MAX_TEXT, UNKNOWN_SECRET
from worker_agent.actions import ActionRefused

CHUNK = 8  # characters typed between two looks at the kill switch


class TextKeyboard(Protocol):
    def type(self, text: str) -> None: ...


SECRET_REF = re.compile(r"\{\{secret:([A-Za-z0-9_.-]+)\}\}")


@dataclass(frozen=True)
class _Piece:
    start: int  # in the template
    end: int
    value_start: int  # in the text typed
    value_end: int
    secret: str | None  # the name, for a `{{secret:NAME}}` reference


@dataclass(frozen=True)
class SecretText:
    """Text to type whose `{{secret:NAME}}` references are resolved, and a map back to them.

    Only `template` may appear in results, errors and logs; `value` goes to the keyboard.
    Progress is reported in template characters, so a count never tells a secret's length.
    """

    template: str
    value: str = field(repr=False)
    pieces: tuple[_Piece, ...] = field(repr=False)

    @classmethod
    def resolve(cls, template: str, secrets: Mapping[str, str]) -> SecretText:
        """ActionRefused: unknown_secret for a name not sent, invalid_argument for bad text."""
        check_typeable(template, "'text'")
        pieces: list[_Piece] = []
        parts: list[str] = []
        at = typed = 0
        for match in SECRET_REF.finditer(template):
            literal = template[at : match.start()]
            _no_stray_reference(literal)
            pieces.append(_Piece(at, match.start(), typed, typed + len(literal), None))
            parts.append(literal)
            typed += len(literal)
            name = match.group(1)
            if name not in secrets:
                raise ActionRefused(
                    f"'text' refers to {{{{secret:{name}}}}}, which was not sent with this action",
                    code=UNKNOWN_SECRET,
                )
            value = secrets[name]
            check_typeable(value, f"the value of {{{{secret:{name}}}}}", secret=True)
            pieces.append(_Piece(match.start(), match.end(), typed, typed + len(value), name))
            parts.append(value)
            typed += len(value)
            at = match.end()
        _no_stray_reference(template[at:])
        pieces.append(_Piece(at, len(template), typed, typed + len(template) - at, None))
        parts.append(template[at:])
        return cls(template, "".join(parts), tuple(pieces))

    def progress(self, typed: int) -> tuple[int, str | None]:
        """(template characters fully typed, the reference typing stopped inside or None)."""
        for piece in self.pieces:
            if typed < piece.value_end or (typed == piece.value_end and piece.secret is None):
                if piece.secret is None:
                    return piece.start + typed - piece.value_start, None
                if typed == piece.value_start:
                    return piece.start, None
                return piece.start, f"{{{{secret:{piece.secret}}}}}"
        return len(self.template), None


def check_typeable(text: str, what: str, secret: bool = False) -> None:
    """Refuse characters no keyboard types: control characters other than newline and tab,
    and lone surrogates. For a secret, says nothing about the character or where it is."""
    if len(text) > MAX_TEXT:
        raise ActionRefused(f"{what} is longer than {MAX_TEXT} characters", INVALID_ARGUMENT)
    for index, ch in enumerate(text):
        code = ord(ch)
        if (code < 0x20 and ch not in "\n\t") or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF:
            where = "" if secret else f" (U+{code:04X} at index {index})"
            raise ActionRefused(
                f"{what} has a character that cannot be typed{where}; "
                "send keys such as Return or Escape with desktop.key",
                code=INVALID_ARGUMENT,
            )


def _no_stray_reference(literal: str) -> None:
    if "{{secret:" in literal:
        raise ActionRefused(
            "'text' has a malformed secret reference: write {{secret:NAME}} with a name of "
            "letters, digits, '_', '.' or '-'",
            code=INVALID_ARGUMENT,
        )


def type_chunks(
    keyboard: TextKeyboard,
    text: str,
    stop_reason: Callable[[], tuple[str, str] | None],
    cancelled: threading.Event,
    interval: float = 0.0,
) -> None:
    """Type `text` CHUNK characters at a time, asking `stop_reason` and `cancelled` before
    each chunk, so that a kill switch stops it within one chunk.

    Raises TypingStopped as soon as a stop reason or cancellation is seen.
    """
    typed = 0
    for start in range(0, len(text), CHUNK):
        reason = stop_reason()
        if reason is not None:
            raise TypingStopped(reason[0], reason[1], typed)
        if cancelled.is_set():
            raise TypingStopped("cancelled", "the action was cancelled", typed)
        part = text[start : start + CHUNK]
        try:
            keyboard.type(part)
        except Exception as exc:
            if typed == 0:
                raise
            raise TypingStopped("failed", f"typing failed ({_short(exc)})", typed) from exc
        typed += len(part)
        if interval:
            cancelled.wait(interval * len(part))


class TypingStopped(Exception):
    """Typing stopped before the end; `typed` characters went out."""

    def __init__(self, code: str, reason: str, typed: int) -> None:
        super().__init__(reason)
        self.code, self.reason, self.typed = code, reason, typed


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
