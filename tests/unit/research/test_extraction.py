"""The readable-text step of a fetch (`worker_agent.browser.actions._extract`), in-process."""

from __future__ import annotations

import trafilatura.external

from worker_agent.browser.actions import _extract
from worker_agent.browser.policy import BrowserPolicy

PAGE = (
    "<!doctype html><html><head><title>Varn note 3</title></head><body>"
    "<nav><a href='/'>Home</a></nav><article><h1>Varn note 3</h1>"
    "<p>Note 3: the tower was painted in 1903.</p>"
    "<p>Visitors to the Isle of Varn often ask about the tower.</p></article></body></html>"
)


def test_a_short_page_is_extracted_with_the_stop_words_kept_as_a_set() -> None:
    result = _extract({"_html": PAGE, "_visible": "", "final_url": "http://x/3"}, BrowserPolicy())
    assert "the tower was painted in 1903" in result["text"]
    assert any("1903" in block["text"] for block in result["blocks"])
    # The justext fallback (short pages) gets one hashable set, with every word it had.
    kept = trafilatura.external.JT_STOPLIST
    assert isinstance(kept, frozenset)
    assert kept == frozenset(trafilatura.external.jt_stoplist_init())
    trafilatura.external.JT_STOPLIST = kept  # jt_stoplist_init replaced it with a tuple


def test_a_result_without_html_is_left_as_it_is() -> None:
    result = {"status": 404, "_visible": "gone"}
    assert _extract(result, BrowserPolicy()) == {"status": 404}
