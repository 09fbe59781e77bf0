"""The search contract both sides enforce: named profiles, result formats and selectors.

A `browser.search` finds result links in one of three ways:

- `searxng`: the URL is a SearXNG instance's search (`/search?q={query}`), asked for its JSON
  answer (`format=json`, added when missing); its `results` are the links;
- `html` with selectors: `result` (each result on the page), `link` and optionally `snippet`
  (CSS selectors inside a result), given by a named profile or by the caller;
- `html` without selectors: the generic extractor finds the page's main repeated list of
  links (worker_agent/browser/results.py).

The coordinator checks a plan's or a research request's search with `search_spec` (a bad
profile or a half-given set of selectors is INVALID_ARGUMENT before anything runs); the
worker checks it again with the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FORMATS = ("html", "searxng")
PROFILES: dict[str, dict[str, str]] = {
    "duckduckgo-html": {
        "template": "https://html.duckduckgo.com/html/?q={query}",
        "result": ".result",
        "link": ".result__a",
        "snippet": ".result__snippet",
    },
    "local": {"template": "", "result": ".result", "link": ".result-link", "snippet": ".snippet"},
}
DEFAULT_PROFILE = "duckduckgo-html"
MAX_SELECTOR = 200


@dataclass(frozen=True)
class SearchSpec:
    """Where to search and how to read the results page."""

    template: str
    format: str = "html"
    result: str = ""  # empty (with link): the generic extractor
    link: str = ""
    snippet: str = ""
    profile: str = ""

    @property
    def extractor(self) -> str:
        if self.format == "searxng":
            return "searxng"
        return "selectors" if self.result else "generic"


def search_spec(args: dict[str, Any]) -> SearchSpec:
    """The search `args` ask for (template, format, profile, result, link, snippet);
    ValueError("field: why") when they do not make one."""
    profile = args.get("profile") or ""
    if not isinstance(profile, str) or (profile and profile not in PROFILES):
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"profile: unknown search profile {str(profile)[:40]!r} (known: {known})")
    fmt = args.get("format") or "html"
    if fmt not in FORMATS:
        raise ValueError(f"format: one of {', '.join(FORMATS)}, not {str(fmt)[:20]!r}")
    template = args.get("template") or ""
    if not profile and not template:
        profile = DEFAULT_PROFILE
    base = PROFILES.get(profile, {})
    picked: dict[str, str] = {}
    for key in ("template", "result", "link", "snippet"):
        value = args.get(key) or ""
        if not isinstance(value, str) or len(value) > (4096 if key == "template" else MAX_SELECTOR):
            raise ValueError(f"{key}: a string of at most {MAX_SELECTOR} characters")
        picked[key] = value or base.get(key, "")
    if "{query}" not in picked["template"]:
        raise ValueError("template: a search URL template needs {query}")
    if fmt == "searxng" and (picked["result"] or picked["link"]) and not profile:
        raise ValueError("result: a SearXNG search answers in JSON and takes no selectors")
    if bool(picked["result"]) != bool(picked["link"]):
        missing = "link" if picked["result"] else "result"
        raise ValueError(f"{missing}: the result and link selectors are given together")
    if fmt == "searxng":
        picked["result"] = picked["link"] = picked["snippet"] = ""
    return SearchSpec(format=fmt, profile=profile, **picked)
