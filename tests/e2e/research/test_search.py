"""Search backends in a real Chromium: SearXNG's JSON API, results pages read by given
selectors or by the generic extractor (fixtures modelled on real engines' markup), and a
research run that finds nothing saying why. The search contract alone is
tests/unit/research/test_search.py."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scripts.local_site.server import FACTS
from tests.conftest import require
from tests.harness import CoordinatorProcess, WorkerProcess
from tests.harness.sites import SearchSite
from worker_agent.actions import ActionContext, ActionRefused, ActionRegistry
from worker_agent.browser.actions import BrowserActions
from worker_agent.browser.service import BrowserService
from worker_agent.capabilities import DEFAULT_CHROMIUM


def _research(coordinator: CoordinatorProcess, *args: str) -> tuple[int, dict[str, Any], str]:
    done = coordinator.cli("research", *args, "--wait", json_out=True, check=False, timeout=120)
    doc = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, doc, done.stderr


@pytest.mark.slow
def test_research_searches_searxng_and_a_run_without_evidence_says_why(
    coordinator: CoordinatorProcess,
    workers: Callable[..., WorkerProcess],
    engines: SearchSite,
    site: str,
) -> None:
    workers("w").wait_online()
    keepers = f"{site}/varn/keepers.html"
    engines.results = [
        (keepers, "Varn Keepers", "the keeper left in 1962"),
        (f"{site}/varn/lens.html", "Varn Lens", "the lens of the keeper station"),
    ]
    code, doc, err = _research(coordinator, "keeper 1962", "--searxng", f"{engines.url}/searxng")
    assert code == 0, err
    evidence = {s["url"] for s in doc["report"]["sources"] if s["evidence"]}
    assert keepers in evidence and FACTS["/varn/keepers.html"][:20]
    # Nothing found: the run says what was searched, how many results, and why none counted.
    code, doc, err = _research(coordinator, "zeppelin", "--searxng", f"{engines.url}/searxng")
    assert code == 8, err
    assert doc["status"] == "SUCCEEDED"
    assert doc["stopReason"].startswith("no_evidence: searched 'zeppelin' on ")
    assert "(searxng): 0 results" in doc["stopReason"]
    assert "unresponsive engines: google" in doc["stopReason"]
    # Results that are read but hold nothing that matches also say so.
    engines.results = [(keepers, "Varn Keepers", "a zeppelin mooring mast")]
    code, doc, err = _research(coordinator, "zeppelin mast", "--searxng", f"{engines.url}/searxng")
    assert code == 8 and ": 1 result;" in doc["stopReason"], doc.get("stopReason")
    assert "had no passage that matches the query" in doc["stopReason"]
    # A bad profile or half a set of selectors is refused before anything runs.
    bad = coordinator.cli("research", "x", "--search-profile", "nope", check=False)
    assert bad.returncode == 2 and "search_profile: unknown search profile 'nope'" in bad.stderr
    half = coordinator.cli(
        "research",
        "x",
        "--search-url",
        f"{site}/search?q={{query}}",
        "--result-selector",
        "li",
        check=False,
    )
    assert half.returncode == 2 and "link_selector:" in half.stderr, half.stderr


@pytest.mark.slow
def test_the_generic_extractor_finds_the_results_not_the_navigation(
    browser: ActionRegistry, engines: SearchSite
) -> None:
    ddg = search(browser, template=f"{engines.url}/ddg?q={{query}}")
    assert (ddg["outcome"], ddg["extractor"]) == ("ok", "generic")
    assert [r["url"] for r in ddg["results"]] == [
        "https://en.wikipedia.org/wiki/Fresnel_lens",  # unwrapped from the engine's redirect
        "https://www.britannica.com/technology/lighthouse",
        "https://www.uslhs.org/fresnel-lenses",
    ]
    assert ddg["results"][0]["title"] == "Fresnel lens - Wikipedia"
    assert "Augustin-Jean Fresnel" in ddg["results"][0]["snippet"]
    bing = search(browser, template=f"{engines.url}/bing?q={{query}}")
    assert [r["url"] for r in bing["results"]] == [
        "https://www.nps.gov/articles/fresnel.htm",
        "https://www.chancebrothers.example/history",
        "https://lighthousefriends.example/lens.html",
    ]
    assert bing["results"][1]["title"] == "Chance Brothers and lighthouse optics"
    assert all(r["snippet_is_evidence"] is False for r in bing["results"])


LOCAL = {"allow_private": True, "timeout": 5}


@pytest.fixture(scope="module")
def engines() -> Iterator[SearchSite]:
    site = SearchSite().start()
    yield site
    site.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[ActionRegistry]:
    require(shutil.which(DEFAULT_CHROMIUM) is not None, f"no Chromium at {DEFAULT_CHROMIUM}")
    service = BrowserService(DEFAULT_CHROMIUM)
    registry = ActionRegistry()
    BrowserActions(service).register(registry)
    yield registry
    service.close()


def search(registry: ActionRegistry, **args: Any) -> dict[str, Any]:
    handler, _ = registry.resolve("browser.search", "{}")
    result: dict[str, Any] = handler(
        {"query": "fresnel lens", "policy": LOCAL} | args,
        ActionContext("act_s", 1, 30, run_id="run_s"),
    )
    return result


@pytest.mark.slow
def test_selectors_given_by_the_caller_and_searxng_json(
    browser: ActionRegistry, engines: SearchSite
) -> None:
    bing = search(
        browser,
        template=f"{engines.url}/bing?q={{query}}",
        result="li.b_algo",
        link="h2 a",
        snippet=".b_caption p",
    )
    assert bing["extractor"] == "selectors" and len(bing["results"]) == 3
    assert bing["results"][0]["snippet"].startswith("The Fresnel lens concentrates light")
    wrong = search(browser, template=f"{engines.url}/bing?q={{query}}", result=".g", link="a")
    assert (
        wrong["results"] == []
        and "no element matches the result selector '.g'" in (wrong["reason"])
    )
    engines.results = [("https://example.org/a", "Lens A", "a fresnel lens page")]
    found = search(browser, template=f"{engines.url}/searxng/search?q={{query}}", format="searxng")
    assert (found["outcome"], found["extractor"]) == ("ok", "searxng")
    assert found["search_url"].endswith("format=json")
    assert [(r["url"], r["title"], r["snippet"]) for r in found["results"]] == engines.results
    none = search(
        browser,
        query="zeppelin",
        template=f"{engines.url}/searxng/search?q={{query}}",
        format="searxng",
    )
    assert none["results"] == [] and "unresponsive engines: google" in none["reason"]
    closed = search(browser, template=f"{engines.url}/closed/search?q={{query}}", format="searxng")
    assert closed["results"] == [] and "format=json" in closed["reason"]
    with pytest.raises(ActionRefused, match="unknown search profile") as caught:
        search(browser, profile="nope")
    assert caught.value.code == "invalid_argument"
