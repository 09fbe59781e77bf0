"""The X authority file (the display's cookie), read as libX11 reads it, and why a display
refuses this worker, in words.

libX11 (xdpyinfo, xdotool, mss) connects without a cookie when the authority file
(`$XAUTHORITY`, else `~/.Xauthority`) does not exist; python-xlib, under pyautogui, raises
`XauthError: ~/.Xauthority: No such file` instead. On a plain `Xvfb :N` (no `-auth`) every tool
worked but Computer Use. `allow_missing_file()` makes python-xlib do what libX11 does: the X
server then decides, and one that wants a cookie still refuses (`refusal()` says so).

Pointing XAUTHORITY at an empty file would do the same, but python-xlib prints a warning on
stdout for an empty file (into `doctor --json`), and every child would inherit the variable.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_patched = False

# A real authority file holds a few entries of a few dozen bytes; libX11 and python-xlib read
# the whole file, so a bigger one (or /dev/zero) is not read at all.
MAX_FILE_BYTES = 1 << 20


def authority_file() -> Path | None:
    """The file libX11 reads the cookie from; None when neither XAUTHORITY nor HOME is set."""
    named = os.environ.get("XAUTHORITY")
    if named:
        return Path(named)
    home = os.environ.get("HOME")
    return Path(home) / ".Xauthority" if home else None


def missing_file() -> str:
    """A sentence when there is no authority file (X connects without a cookie), else ""."""
    path = authority_file()
    if path is None:
        return "no Xauthority file (neither XAUTHORITY nor HOME is set)"
    if not path.exists():
        named = "XAUTHORITY" if os.environ.get("XAUTHORITY") else "~/.Xauthority"
        return f"no Xauthority file ({named}: {_shown(str(path))} does not exist)"
    return ""


def unusable_file() -> str:
    """A sentence when the authority file exists but is not one X can read safely (a FIFO, a
    device, a directory, or past MAX_FILE_BYTES: libX11 and python-xlib would block on it or
    read it forever), else ""."""
    path = authority_file()
    if path is None:
        return ""
    try:
        found = path.stat()
    except OSError:
        return ""  # missing (or unreadable: the connection says so)
    if stat.S_ISDIR(found.st_mode):
        return f"the Xauthority file {_shown(str(path))} is a directory"
    if not stat.S_ISREG(found.st_mode):
        return f"the Xauthority file {_shown(str(path))} is not a regular file"
    if found.st_size > MAX_FILE_BYTES:
        return (
            f"the Xauthority file {_shown(str(path))} is {found.st_size} bytes"
            f" (a cookie file is under {MAX_FILE_BYTES} bytes)"
        )
    return ""


UNUSABLE_FIX = (
    "set XAUTHORITY to the X server's cookie file (the file its -auth names, or the desktop"
    " session's ~/.Xauthority), or unset it; a headless node: pass --no-computer-use"
)


def allow_missing_file() -> None:
    """Let python-xlib connect without a cookie when the authority file does not exist, and
    lock its connections for threads (once per process, before pyautogui is imported: it
    connects at import)."""
    global _patched
    if _patched or not sys.platform.startswith("linux"):
        return
    try:
        # Real locks in every Display made from now on (python-xlib's default is a dummy lock):
        # pyautogui's one connection is shared by every thread of the process that touches
        # input, the held-button watchdog and a capability probe among them, and two
        # threads' requests on an unlocked Display lose a reply and wait for it forever.
        import Xlib.threaded  # type: ignore[import-untyped]  # noqa: F401
        from Xlib.support import unix_connect  # type: ignore[import-untyped]
    except ImportError:
        return  # pyautogui's import reports the missing python-xlib
    from Xlib.error import XauthError  # type: ignore[import-untyped]

    original = unix_connect.get_auth

    def get_auth(sock: Any, dname: str, host: str, dno: int) -> Any:
        if missing_file():
            return "", ""  # as libX11: no file, no cookie; the server decides
        bad = unusable_file()
        if bad:
            raise XauthError(bad)
        # python-xlib prints its parse warnings on stdout (into `doctor --json`).
        with contextlib.redirect_stdout(sys.stderr):
            return original(sock, dname, host, dno)

    unix_connect.get_auth = get_auth
    _patched = True


@dataclass(frozen=True)
class Refusal:
    """Why the X server at DISPLAY does not let this worker in, and what to do about it."""

    problem: str
    fix: str


def refusal() -> Refusal | None:
    """Connect to DISPLAY as pyautogui would; None when the display accepts this worker."""
    named = os.environ.get("DISPLAY", "")
    if not named or not sys.platform.startswith("linux"):
        return None
    bad = unusable_file()
    if bad:
        return Refusal(bad, UNUSABLE_FIX)
    display = _shown(named, 60)
    allow_missing_file()
    try:
        from Xlib import error as xerror
        from Xlib.display import Display  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        Display(named).close()
    except xerror.XauthError as exc:
        path = authority_file()
        return Refusal(
            f"cannot read the Xauthority file {_shown(str(path))}: {_server_words(exc)}",
            "run the worker as the desktop's user, or let this user read the file; a headless"
            " node: pass --no-computer-use",
        )
    except xerror.DisplayConnectionError as exc:
        words = _server_words(exc)
        if "Errno" in str(exc) or "does not exist" in words:
            return Refusal(
                f"no X server answers at DISPLAY={display} ({words})",
                "start the X server (or log in to the desktop), or set DISPLAY to the display it"
                " runs on (ls /tmp/.X11-unix); a headless node: pass --no-computer-use",
            )
        missing = missing_file()
        cookie = (
            f"it wants a cookie, and there is {missing}"
            if missing
            else (f"the cookie in {_shown(str(authority_file()))} is not this server's")
        )
        return Refusal(
            f"display {display} refused the connection ({words}): {cookie}",
            "set XAUTHORITY to the X server's cookie file (the file its -auth names, or the"
            " desktop session's ~/.Xauthority), or add the cookie with `xauth merge`; a"
            " headless node: pass --no-computer-use",
        )
    except Exception:
        return None  # not a connection problem: the display and input checks report it
    return None


def _server_words(exc: BaseException) -> str:
    """The X server's (or the socket's) own words from a python-xlib error, on one line."""
    text = str(exc)
    found = re.search(r"b'(.*?)(?:\\n)?'$", text)
    words = found.group(1) if found else text.split(": ", 1)[-1]
    return _shown(words.strip().rstrip("."), 200) or type(exc).__name__


def _shown(text: str, limit: int = 240) -> str:
    """An environment-given value as one printable line, cut at `limit` characters."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."
