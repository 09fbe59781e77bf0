"""Key combos in xdotool's notation (`ctrl+a`, `shift+Tab`, `Return`), checked before any input.

Names are X keysym names, the vocabulary agents already use for computer use. A combo is
parsed into keysym names; several combos may be given separated by spaces (`ctrl+a Delete`)
and are pressed one after another. Anything not in the known set is refused: a key the
agent misspelled must not become some other key.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.desktop_scope import INVALID_ARGUMENT, MAX_COMBOS, MAX_KEY_CHARS
from worker_agent.actions import ActionRefused

# xdotool's own aliases for modifiers, plus the names agents commonly send.
MODIFIERS = {
    "ctrl": "Control_L",
    "control": "Control_L",
    "control_l": "Control_L",
    "control_r": "Control_R",
    "shift": "Shift_L",
    "shift_l": "Shift_L",
    "shift_r": "Shift_R",
    "alt": "Alt_L",
    "alt_l": "Alt_L",
    "alt_r": "Alt_R",
    "meta": "Meta_L",
    "super": "Super_L",
    "super_l": "Super_L",
    "super_r": "Super_R",
    "win": "Super_L",
    "cmd": "Super_L",
}

# fmt: off
_NAMED = [
    "Return", "Tab", "Escape", "BackSpace", "Delete", "Insert", "Home", "End", "Prior", "Next",
    "Page_Up", "Page_Down", "Up", "Down", "Left", "Right", "space", "Menu", "Print", "Pause",
    "Caps_Lock", "Num_Lock", "Scroll_Lock", "KP_Enter", "KP_Add", "KP_Subtract",
    "KP_Multiply", "KP_Divide", "KP_Decimal", "KP_Equal",
    "XF86AudioMute", "XF86AudioLowerVolume", "XF86AudioRaiseVolume",
    "XF86AudioPlay", "XF86AudioNext", "XF86AudioPrev",
    *(f"F{n}" for n in range(1, 25)),
    *(f"KP_{n}" for n in range(10)),
]
# fmt: on

# Punctuation by character and by keysym name; '+' separates keys, so it is only `plus`.
# fmt: off
PUNCTUATION = {
    "-": "minus", "=": "equal", ",": "comma", ".": "period", "/": "slash",
    "\\": "backslash", ";": "semicolon", "'": "apostrophe", "`": "grave",
    "[": "bracketleft", "]": "bracketright", "!": "exclam", "@": "at", "#": "numbersign",
    "$": "dollar", "%": "percent", "^": "asciicircum", "&": "ampersand", "*": "asterisk",
    "(": "parenleft", ")": "parenright", "_": "underscore", "{": "braceleft",
    "}": "braceright", "|": "bar", ":": "colon", '"': "quotedbl", "<": "less",
    ">": "greater", "?": "question", "~": "asciitilde",
}
# fmt: on

ALIASES = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "backspace": "BackSpace",
    "del": "Delete",
    "pageup": "Prior",
    "page_up": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "page_down": "Next",
    "pgdn": "Next",
    "arrowup": "Up",
    "arrowdown": "Down",
    "arrowleft": "Left",
    "arrowright": "Right",
    "spacebar": "space",
    "plus": "plus",
}

# Lower-cased name -> keysym name, for the names whose case carries no meaning.
_BY_LOWER = {name.lower(): name for name in _NAMED}
_BY_LOWER.update({name: name for name in PUNCTUATION.values()})
_BY_LOWER.update(ALIASES)


@dataclass(frozen=True)
class KeyCombo:
    """Modifiers held down, in order, around one key; all as X keysym names."""

    modifiers: tuple[str, ...]
    key: str

    def __str__(self) -> str:
        return "+".join((*self.modifiers, self.key))


def keysym_name(part: str) -> str | None:
    """The keysym name for one key of a combo, or None if it is not a known key."""
    if len(part) == 1:
        if part.isascii() and part.isalnum():
            return part  # letters keep their case, as in xdotool: `A` is shift+a
        return PUNCTUATION.get(part)
    lower = part.lower()
    if lower in MODIFIERS:
        return MODIFIERS[lower]
    return _BY_LOWER.get(lower)


def parse_keys(value: object, field: str = "key") -> tuple[KeyCombo, ...]:
    """`"ctrl+shift+t"` or `"ctrl+a Delete"` -> combos; ActionRefused(invalid_argument) if not."""
    if not isinstance(value, str) or not value.strip():
        raise _invalid(field, f"must be a key combo such as 'ctrl+a' or 'Return', not {value!r}")
    if len(value) > MAX_KEY_CHARS:
        raise _invalid(field, f"at most {MAX_KEY_CHARS} characters, got {len(value)}")
    words = value.split()
    if len(words) > MAX_COMBOS:
        raise _invalid(field, f"at most {MAX_COMBOS} combos per action, got {len(words)}")
    return tuple(_parse_combo(word, field) for word in words)


def _parse_combo(word: str, field: str) -> KeyCombo:
    parts = word.split("+")
    if any(not part for part in parts):
        raise _invalid(field, f"{word!r} has an empty key (the + key is written 'plus')")
    names: list[str] = []
    for part in parts:
        name = keysym_name(part)
        if name is None:
            raise _invalid(
                field,
                f"unknown key {part!r} in {word!r} (keys are X keysym names such as Return, "
                "Tab, Escape, BackSpace, Delete, Up, F5, space, a, 1, minus, plus; "
                "modifiers ctrl, shift, alt, super)",
            )
        names.append(name)
    *modifiers, key = names
    for part in parts[:-1]:
        if part.lower() not in MODIFIERS:
            raise _invalid(field, f"{part!r} in {word!r} is not a modifier (ctrl, shift, alt)")
    return KeyCombo(tuple(modifiers), key)


def _invalid(field: str, message: str) -> ActionRefused:
    return ActionRefused(f"'{field}' {message}", code=INVALID_ARGUMENT)
