"""Measure what this machine can offer, on the spot: displays, Computer Use, headless browser.

Nothing here raises: an absent display or browser is a capability that is absent, with the
reason a person needs to fix it.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version as package_version

from shared import __version__
from shared.advertisement import HEADLESS_NOT_GRANTED, Advertisement, Capability, Display
from worker_agent import sandbox as browser_sandbox, x_authority
from worker_agent.macos_permissions import accessibility_problem, screen_recording_problem
from worker_agent.sandbox import Sandbox

DEFAULT_CHROMIUM = "/usr/bin/chromium"
# Without --no-sandbox: whether the sandbox runs is decided per machine (`sandbox.py`).
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


HEADLESS_DISABLED = "disabled by local policy (--no-headless)"
NOT_GRANTED = "not granted by the enrollment token"


@dataclass(frozen=True)
class ProbeOptions:
    chromium: str = DEFAULT_CHROMIUM
    computer_use_allowed: bool = True
    # False (`--no-headless`): no browser is imported, launched or offered on this machine.
    headless_allowed: bool = True
    # What the enrollment token granted: a capability it did not grant is not measured (no
    # Chromium launched, no pointer moved) and is advertised as not granted.
    granted: frozenset[str] = frozenset(("headless", "computer_use"))
    browser_timeout: float = 30.0
    sandbox: str = "auto"  # `--chromium-sandbox`: auto | on | off (worker_agent/sandbox.py)
    research_apps: tuple[str, ...] = ()  # `--research-app` names, advertised as they are
    owner_takeover: bool = False  # `--allow-owner-takeover`, advertised as it is
    # Starts the browser that will serve this worker's browser actions, if it is not running,
    # and returns its version: the browser launched to measure the capability is then the one
    # that serves, instead of a second launch at the first action (about a second of a core).
    # None: a browser is launched to measure it and closed again (`deskfleet-worker doctor`).
    launch: Callable[[], str] | None = None


def _display_problem() -> str | None:
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        if os.environ.get("WAYLAND_DISPLAY"):
            return "no X display: Wayland without DISPLAY (XWayland) is not supported"
        return "no display: DISPLAY is not set"
    if sys.platform.startswith("linux"):
        # libX11 (mss) would block on a FIFO or read /dev/zero forever: not connected at all.
        unusable = x_authority.unusable_file()
        if unusable:
            return unusable
    return None


def probe_displays() -> tuple[tuple[Display, ...], str | None]:
    problem = _display_problem()
    if problem:
        return (), problem
    try:
        import mss

        with mss.MSS() as grabber:
            monitors = grabber.monitors[1:]
    except Exception as exc:  # any failure here means "no usable display", with its reason
        refused = x_authority.refusal()  # mss (libX11) does not say why; python-xlib does
        if refused is not None:
            return (), refused.problem
        return (), f"display {os.environ.get('DISPLAY', '')} does not answer: {_short(exc)}"
    displays = tuple(
        Display(i, int(m["left"]), int(m["top"]), int(m["width"]), int(m["height"]))
        for i, m in enumerate(monitors)
    )
    return displays, None if displays else "the display reports no screens"


def probe_computer_use(display_problem: str | None, options: ProbeOptions) -> Capability:
    name = "computer_use"
    if not options.computer_use_allowed:
        return Capability(name, False, "disabled by local policy (--no-computer-use)")
    if name not in options.granted:
        return Capability(name, False, NOT_GRANTED)
    if display_problem:
        return Capability(name, False, display_problem)
    if sys.platform == "darwin":
        # macOS drops input and blanks captures silently without these permissions, so
        # their absence must be found here, not by an action that seems to work.
        missing = screen_recording_problem() or accessibility_problem()
        if missing:
            return Capability(name, False, missing)
    try:
        # Imported only now: pyautogui fails at import time without a display.
        x_authority.allow_missing_file()
        import pyautogui

        pyautogui.PAUSE = 0
        x, y = pyautogui.position()
        pyautogui.moveTo(x, y)  # an input action that leaves the pointer where it was
    except (Exception, SystemExit) as exc:  # mouseinfo calls sys.exit() without tkinter
        return Capability(name, False, f"pyautogui cannot act on the display: {_short(exc)}")
    return Capability(name, True)


def _no_browser_at(options: ProbeOptions) -> Capability:
    why = f"no browser at {options.chromium}: install chromium or pass --chromium PATH"
    return Capability("headless", False, why)


def probe_headless(options: ProbeOptions) -> tuple[Capability, str, Sandbox | None]:
    """(capability, browser version, the sandbox mode it launched in: None if it did not)."""
    name = "headless"
    if not options.headless_allowed:
        return Capability(name, False, HEADLESS_DISABLED), "", None
    if not os.path.exists(options.chromium):
        return _no_browser_at(options), "", None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        return Capability(name, False, f"playwright is not installed: {_short(exc)}"), "", None
    mode = browser_sandbox.decide(options.sandbox)
    try:
        with sync_playwright() as pw:
            while True:
                try:
                    browser = pw.chromium.launch(
                        executable_path=options.chromium,
                        args=[*CHROMIUM_ARGS, *mode.args],
                        chromium_sandbox=mode.on,
                        timeout=options.browser_timeout * 1000,
                    )
                    break
                except Exception as exc:
                    retry = browser_sandbox.fallback(mode, options.sandbox, exc)
                    if retry is None:
                        raise
                    mode = retry
            version = browser.version
            browser.close()
    except Exception as exc:
        why = browser_sandbox.launch_problem(exc) or _short(exc)
        return (
            Capability(name, False, f"chromium at {options.chromium} did not launch: {why}"),
            "",
            None,
        )
    return Capability(name, True), version, mode


# A browser that launched once in this process is not launched again to measure it at every
# reconnect (about a second of a core each time); a failed probe is tried again next time.
_launched: dict[str, tuple[Capability, str]] = {}


def _headless(options: ProbeOptions) -> tuple[Capability, str]:
    if options.headless_allowed and "headless" not in options.granted:
        # Not launched; whether Chromium is there at all still tells the coordinator whether
        # a visible browser could serve the research fallback on this desktop.
        if not os.path.exists(options.chromium):
            return _no_browser_at(options), ""
        return Capability("headless", False, HEADLESS_NOT_GRANTED), ""
    if options.launch is not None and options.headless_allowed:
        return _serving_browser(options, options.launch)
    known = _launched.get(options.chromium)
    if known is not None and os.path.exists(options.chromium):
        return known
    capability, version, _ = probe_headless(options)
    found = capability, version
    if capability.available:
        _launched[options.chromium] = found
    return found


def _serving_browser(options: ProbeOptions, launch: Callable[[], str]) -> tuple[Capability, str]:
    """The capability as the browser that serves the actions shows it: started if it is not
    running (at the first connect, or after it stopped), asked for its version otherwise."""
    name = "headless"
    if not os.path.exists(options.chromium):
        return _no_browser_at(options), ""
    try:
        version = launch()
    except Exception as exc:
        cause = exc.__cause__ or exc
        why = browser_sandbox.launch_problem(cause) or _short(cause)
        return Capability(name, False, f"chromium at {options.chromium} did not launch: {why}"), ""
    return Capability(name, True), version


def measure(options: ProbeOptions, labels: dict[str, str]) -> Advertisement:
    """Run the probes (in parallel: the browser launch dominates) and build the advertisement."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="probe") as pool:
        browser_future = pool.submit(_headless, options)
        displays, display_problem = probe_displays()
        computer_use = probe_computer_use(display_problem, options)
        headless, browser_version = browser_future.result()
    versions = {"deskfleet": __version__, "python": platform.python_version()}
    if options.headless_allowed:  # a worker without a browser has no Playwright to speak of
        with contextlib.suppress(PackageNotFoundError):  # the headless probe reports its absence
            versions["playwright"] = package_version("playwright")
    if browser_version:
        versions["chromium"] = browser_version
    return Advertisement(
        hostname=platform.node(),
        labels=labels,
        displays=displays,
        capabilities=(headless, computer_use),
        os=f"{platform.system()} {platform.release()}",
        versions=versions,
        research_apps=options.research_apps,
        owner_takeover=options.owner_takeover,
    )


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
