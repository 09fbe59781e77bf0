"""macOS privacy permissions that desktop control needs, asked of the system directly (a leaf:
the capability probes and `doctor` both use it)."""

from __future__ import annotations

import os
import sys


def real_python() -> str:
    # macOS grants permissions to the real binary, not to the venv's symlink.
    return os.path.realpath(sys.executable)


def screen_recording_problem() -> str | None:
    """macOS: without Screen Recording, captures show only the wallpaper rather than failing."""
    if sys.platform == "darwin":
        granted = _macos_bool(
            "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics",
            "CGPreflightScreenCaptureAccess",
        )
        if granted is False:
            return f"Screen Recording is not allowed for {real_python()}"
    return None


def accessibility_problem() -> str | None:
    """macOS: without Accessibility, synthetic input is silently dropped rather than refused."""
    if sys.platform == "darwin":
        granted = _macos_bool(
            "/System/Library/Frameworks/ApplicationServices.framework/ApplicationServices",
            "AXIsProcessTrusted",
        )
        if granted is False:
            return f"Accessibility is not allowed for {real_python()}"
    return None


def _macos_bool(library: str, function: str) -> bool | None:
    """Call a no-argument macOS function returning a boolean; None if it is unavailable."""
    import ctypes

    try:
        fn = getattr(ctypes.cdll.LoadLibrary(library), function)
    except (OSError, AttributeError):
        return None  # an older macOS without this query: the probes above must do
    fn.restype = ctypes.c_bool
    fn.argtypes = []
    return bool(fn())
