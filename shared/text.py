"""Text that people read in a terminal: what is refused at the API, and how the rest is shown.

Two halves of one rule, so they cannot drift apart:

- `refuse_control(field, value)`: titles, reasons, labels, names, intents and queries are
  one line of text. Control characters (C0 including TAB, LF and CR; DEL; C1) and the Unicode
  bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) are refused with
  INVALID_ARGUMENT naming the field. An escape sequence in an approval's reason could
  otherwise clear the screen, move the cursor or reorder text, and hide the scope an admin is
  about to approve. Multi-line prose (guidance, a goal) may hold LF and TAB, nothing else.
- `visible(text)`: everything else that reaches a terminal (page titles, excerpts, results,
  errors, text written before this rule existed) is printed with those characters spelled
  out (`\\x1b`, `\\r`, `\\u202e`), so what the admin sees is what is stored.
"""

from __future__ import annotations

import re

from shared.errors import InvalidArgumentError

# C0 and DEL, C1, and the bidirectional embeddings, overrides and isolates.
_BIDI = "\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
# The same, except the two characters multi-line prose legitimately holds.
_CONTROL_MULTILINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _spelled(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def describe(char: str) -> str:
    """How a refused character is named in an error: `U+001B`."""
    return f"U+{ord(char):04X}"


def refuse_control(field: str, value: str, *, multiline: bool = False) -> None:
    """InvalidArgumentError if `value` holds a control or bidi-override character.

    `multiline=True` lets LF and TAB through (guidance, goals); CR never passes.
    """
    found = (_CONTROL_MULTILINE if multiline else _CONTROL).search(value)
    if found is not None:
        allowed = " (line breaks and tabs are allowed)" if multiline else ""
        raise InvalidArgumentError(
            f"{field}: must not contain control or bidirectional-override characters"
            f"{allowed}; found {describe(found.group())} at position {found.start()}"
        )


def visible(text: str, *, multiline: bool = False) -> str:
    """`text` with every control and bidi-override character spelled out.

    `multiline=True` keeps LF and TAB as they are (a page of text, a whole command output).
    """
    return (_CONTROL_MULTILINE if multiline else _CONTROL).sub(lambda m: _spelled(m.group()), text)


def storable(text: str) -> str:
    """Text a model wrote (not refused like a person's), with NUL, which PostgreSQL's text
    cannot hold, as U+FFFD: kept whole, a NUL made the row's write a store error."""
    return text.replace("\x00", "\ufffd")
