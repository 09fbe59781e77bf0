"""python-xlib's connections are locked for threads before pyautogui makes its one connection.

Unlocked (python-xlib's default is a dummy lock), two threads' requests on pyautogui's shared
Display lost a reply: the held-button watchdog's pointer query waited for it forever while
holding the input turn, and every later action of the worker waited behind it (seen as a
desktop test that hung until its timeout). A hang cannot be provoked on demand, so this checks
the cause: the lock python-xlib hands each new Display.
"""

from __future__ import annotations

import _thread

import pytest

from worker_agent import x_authority


def test_displays_made_after_the_worker_prepares_xlib_get_real_locks() -> None:
    lock = pytest.importorskip("Xlib.support.lock")
    x_authority.allow_missing_file()
    assert lock.allocate_lock is _thread.allocate_lock
    made = lock.allocate_lock()
    assert made.acquire(blocking=False) and not made.acquire(blocking=False)
    made.release()
