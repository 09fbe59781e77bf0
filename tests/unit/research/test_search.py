"""Search backends: SearXNG's JSON API, results pages read by given selectors or by the
generic extractor (fixtures modelled on real engines' markup), and research runs that find
nothing saying why."""

from __future__ import annotations

import pytest

from shared.search import search_spec


def test_the_search_contract_refuses_unknown_profiles_and_half_given_selectors() -> None:
    assert search_spec({}).profile == "duckduckgo-html"
    assert search_spec({"template": "http://x/?q={query}"}).extractor == "generic"
    spec = search_spec({"template": "http://x/?q={query}", "result": "li", "link": "a"})
    assert spec.extractor == "selectors"
    assert search_spec({"template": "http://x/s?q={query}", "format": "searxng"}).extractor == (
        "searxng"
    )
    for args, field in (
        ({"profile": "bing-json"}, "profile: unknown search profile 'bing-json'"),
        ({"template": "http://x/?q={query}", "result": "li"}, "link: "),
        ({"template": "http://x/?q={query}", "format": "rss"}, "format: "),
        ({"template": "http://x/"}, "template: "),
    ):
        with pytest.raises(ValueError, match=field):
            search_spec(args)
