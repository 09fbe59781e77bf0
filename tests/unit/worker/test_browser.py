"""A visible browser keeps no spare context (no Chromium started). Browser actions in a real
Chromium are tests/e2e/worker/test_browser.py."""

from __future__ import annotations

from worker_agent.browser.service import BrowserService
from worker_agent.capabilities import DEFAULT_CHROMIUM


def test_a_visible_browser_keeps_no_spare() -> None:
    assert not BrowserService(DEFAULT_CHROMIUM, visible=True).keep_spare
