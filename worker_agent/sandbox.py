"""Whether the worker's Chromium runs inside its own sandbox, and why not when it does not.

Chromium's sandbox keeps a page that broke into a renderer from the rest of the machine (the
state directory's credential among it). It runs whenever it can: on Linux that is as any user
but root (Chromium refuses its sandbox to root), using user namespaces, or Debian's setuid
`chrome-sandbox` helper where they are off; on macOS and Windows always. `--chromium-sandbox
off` turns it off (a container that forbids namespaces, say); `on` requires it, and a browser
that cannot start inside it is then an absent capability instead of an unsandboxed one.

With `auto` (the default) a launch that Chromium refuses for want of a usable sandbox is tried
once more without it, and the mode says so: the worker's log, `deskfleet-worker doctor` and the
browser's result name the mode it really runs in.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

SETTINGS = ("auto", "on", "off")
# Debian's chromium-sandbox package; Chromium finds it next to its binary.
SETUID_HELPERS = ("/usr/lib/chromium/chrome-sandbox",)
# What Chromium prints when it finds no way to sandbox itself (zygote_host_impl_linux.cc).
NO_USABLE_SANDBOX = "No usable sandbox"
AS_ROOT = "the worker runs as root, and Chromium's sandbox does not run as root"
FIX = (
    "run the worker as an unprivileged user (the Linux installer's headless service does) on a"
    " kernel with user namespaces, or install chromium-sandbox; see docs/INSTALL-linux.md"
)


@dataclass(frozen=True)
class Sandbox:
    """The mode a browser launches in: `on`, and how it is sandboxed or why it is not."""

    on: bool
    why: str

    def __str__(self) -> str:
        return f"on ({self.why})" if self.on else f"off: {self.why}"

    @property
    def args(self) -> list[str]:
        # Playwright adds --no-sandbox itself unless told the sandbox is wanted
        # (`chromium_sandbox`); the flag is named here too, so the command line says it.
        return [] if self.on else ["--no-sandbox"]


def decide(setting: str = "auto") -> Sandbox:
    """The mode to launch in, from the setting and what this machine allows."""
    if setting == "off":
        return Sandbox(False, "turned off here (--chromium-sandbox off)")
    if not sys.platform.startswith("linux"):
        return Sandbox(True, f"Chromium's own sandbox on {sys.platform}")
    required = Sandbox(True, "required here (--chromium-sandbox on)")
    if os.geteuid() == 0:
        # Asked for anyway with `on`: Chromium then refuses to start, and the capability says so.
        return required if setting == "on" else Sandbox(False, AS_ROOT)
    problem = user_namespace_problem()
    if not problem:
        return Sandbox(True, "user namespaces")
    helper = _setuid_helper()
    if helper:
        return Sandbox(True, f"the setuid helper {helper}; {problem}")
    return required if setting == "on" else Sandbox(False, problem)


def fallback(mode: Sandbox, setting: str, error: BaseException) -> Sandbox | None:
    """The mode to try again in after a launch failed in `mode`, or None (do not retry)."""
    if not mode.on or setting != "auto" or NO_USABLE_SANDBOX not in str(error):
        return None
    return Sandbox(
        False,
        "Chromium found no usable sandbox here (user namespaces refused, no setuid chrome-sandbox)",
    )


def launch_problem(error: BaseException) -> str:
    """What a launch failure says about the sandbox, in a line ("" when it is about something
    else): Chromium buries it in its log, after Playwright's own first line."""
    text = str(error)
    if NO_USABLE_SANDBOX in text:
        return "Chromium found no usable sandbox here, and --chromium-sandbox on requires one"
    if "Running as root without --no-sandbox" in text:
        return f"{AS_ROOT}, and --chromium-sandbox on requires it"
    return ""


def user_namespace_problem() -> str:
    """Why this kernel does not let an unprivileged process make user namespaces, or ""."""
    limits = (
        ("/proc/sys/user/max_user_namespaces", "0", "user namespaces are off"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0", "unprivileged user namespaces are off"),
    )
    for path, off, what in limits:
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue
        if value == off:
            return f"{what} ({path.removeprefix('/proc/sys/').replace('/', '.')} = {value})"
    return ""


def _setuid_helper() -> str:
    for path in SETUID_HELPERS:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if info.st_uid == 0 and info.st_mode & stat.S_ISUID:
            return path
    return ""
