"""The harness's Chromium window: a browser that cannot show itself is reported at once, with
its own words, instead of after the whole wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.harness import ChromiumApp


def test_a_chromium_that_cannot_open_its_display_is_reported_at_once(tmp_path: Path) -> None:
    if not ChromiumApp.available():
        pytest.skip("chromium and xdotool are not installed")
    no_display = {"DISPLAY": ":249", "XAUTHORITY": str(tmp_path / "Xauthority")}
    app = ChromiumApp(no_display, "about:blank", tmp_path / "home")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"chromium exited \d+ before showing its window"):
        app.start()
    assert time.monotonic() - started < ChromiumApp.SHOW_TIMEOUT / 3
    assert app.proc is not None and app.proc.poll() is not None
    app.stop()
