"""The browser action kinds: `browser.fetch`, `browser.search`, `browser.screenshot`, and the
read-only `browser.check` a postcondition runs.

Their results are outcomes, not failures: a refused, binary, challenged or timed-out page is
a successful action whose result says so (with the source's metadata), so that research can
report it. Only a browser that cannot work at all fails the action.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote_plus

import trafilatura
import trafilatura.external
from playwright.async_api import Error as PlaywrightError, Page

from shared import passages
from shared.search import SearchSpec, search_spec
from worker_agent.actions import ActionContext, ActionFailed, ActionRefused, ActionRegistry
from worker_agent.browser import ACTION_KINDS
from worker_agent.browser.navigation import Navigation, Slot, crashed, navigate
from worker_agent.browser.policy import BrowserPolicy
from worker_agent.browser.rendering import settle
from worker_agent.browser.results import (
    GENERIC_JS,
    SELECTORS_JS,
    results_of,
    searxng_results,
    searxng_url,
)
from worker_agent.browser.service import BrowserService, Pages

CHALLENGE_STATUS = (401, 403, 429)
CHALLENGE_TEXT = re.compile(
    r"verify (that )?you are (a )?human|are you a robot|captcha|unusual traffic|"
    r"checking your browser|access denied",
    re.I,
)

# Everything read from a page is cut to size inside it, before it is transferred: a page may
# have grown past any size after it loaded. A document longer than the policy's max_bytes is
# not read at all (the page is `too_large`, like a document the server sent too large).
MAX_TITLE = 1000
MAX_LINK = 4096
_SIZE_JS = """maxBytes => {
  const html = document.documentElement ? document.documentElement.outerHTML : '';
  if (html.length > maxBytes) return {grown: html.length, html};
  const bytes = new TextEncoder().encode(html).length;
  return bytes > maxBytes ? {grown: bytes, html} : {grown: 0, html};
}"""
# One round trip to the page for everything a fetch reads from it.
_READ_JS = (
    "([maxBytes, maxText, maxLinks, maxTitle, maxLink]) => {"
    f" const size = ({_SIZE_JS})(maxBytes);"
    " if (size.grown) return {grown: size.grown};"
    " return {html: size.html, title: document.title.slice(0, maxTitle),"
    " text: document.body ? document.body.innerText.slice(0, maxText + 1) : '',"
    " links: Array.from(document.links).slice(0, maxLinks).map(a => a.href.slice(0, maxLink))};"
    "}"
)
_TEXT_JS = (
    "([maxBytes, maxText]) => {"
    f" const size = ({_SIZE_JS})(maxBytes);"
    " if (size.grown) return {grown: size.grown};"
    " return {text: document.body ? document.body.innerText.slice(0, maxText) : ''};"
    "}"
)


def _grew(nav: Navigation, policy: BrowserPolicy, read: dict[str, Any]) -> bool:
    """Whether the page read was over the limit (the navigation then says so)."""
    grown = int(read.get("grown") or 0)
    if grown:
        nav.stop(
            "too_large",
            f"the page grew to {grown} bytes after it loaded, more than the limit of"
            f" {policy.max_bytes}",
        )
    return bool(grown)


def _classify(nav: Navigation, text: str) -> tuple[str, str]:
    if nav.outcome:
        return nav.outcome, nav.reason
    if nav.status in CHALLENGE_STATUS:
        return "access_challenge", f"HTTP {nav.status}: the site refused or challenged the request"
    if CHALLENGE_TEXT.search(text[:5000]) and len(text) < 5000:
        return "access_challenge", "the page asks to prove a human is visiting (captcha)"
    if nav.status >= 400:
        return "http_error", f"HTTP {nav.status}"
    return "ok", ""


async def _open(slot: Slot, url: str, policy: BrowserPolicy, *, text_only: bool) -> Navigation:
    """Navigate, then wait for the page to settle; a text read skips images, media, fonts."""
    await slot.skipper.set(text_only)
    nav = await navigate(slot, url, policy)
    if not nav.outcome:
        waited = await settle(slot.page)
        nav.settle_ms, nav.settled = int(waited.get("settle_ms", 0)), bool(waited.get("settled"))
    return nav


async def _read(page: Page, nav: Navigation, policy: BrowserPolicy) -> dict[str, Any]:
    read: dict[str, Any] = await page.evaluate(
        _READ_JS, [policy.max_bytes, policy.max_text, policy.max_links, MAX_TITLE, MAX_LINK]
    )
    if _grew(nav, policy, read):
        return _without_page(nav)
    outcome, reason = _classify(nav, read["text"])
    return {
        **nav.metadata(),
        "outcome": outcome,
        "reason": reason,
        "evidence": outcome == "ok",
        "title": read["title"],
        "links": read["links"],
        "_html": read["html"],
        "_visible": read["text"],
    }


def _stoplist_as_set() -> None:
    """trafilatura's justext fallback keeps every language's stop words (about 150,000) in a
    tuple that justext caches by value, so each page hashed the whole tuple again: two thirds
    of an extraction's CPU on short pages. A frozenset holds the same words and caches its hash.
    """
    if not isinstance(trafilatura.external.JT_STOPLIST, frozenset):
        words = trafilatura.external.JT_STOPLIST or trafilatura.external.jt_stoplist_init()
        trafilatura.external.JT_STOPLIST = frozenset(words)  # type: ignore[assignment]


def _extract(result: dict[str, Any], policy: BrowserPolicy) -> dict[str, Any]:
    """Add the readable main text. Runs on the action's thread: it is CPU work that would
    otherwise stall every page sharing the browser's event loop."""
    html, visible = result.pop("_html", None), result.pop("_visible", "")
    if html is None:
        return result
    _stoplist_as_set()
    main = (
        trafilatura.extract(
            html, url=result.get("final_url") or None, include_comments=False, favor_recall=True
        )
        or visible
    )
    result["text"] = main[: policy.max_text]
    result["text_truncated"] = len(main) > policy.max_text
    # The page's passages with their headings and anchors (shared/passages.py): the report
    # ranks these, not the flattened text. Bounded like the text.
    kept, size = [], 0
    for block in passages.blocks(html):
        size += len(block.text) + len(block.heading)
        if size > policy.max_text:
            break
        kept.append(block)
    result["blocks"] = passages.dump(kept)
    return result


def _without_page(nav: Navigation) -> dict[str, Any]:
    return {
        **nav.metadata(),
        "outcome": nav.outcome,
        "reason": nav.reason,
        "evidence": False,
        "title": "",
        "text": "",
        "links": [],
    }


class BrowserActions:
    def __init__(self, service: BrowserService, visible: BrowserService | None = None) -> None:
        self._service = service
        self._visible = visible

    def register(self, registry: ActionRegistry) -> None:
        handlers = {
            "browser.fetch": self.fetch,
            "browser.search": self.search,
            "browser.screenshot": self.screenshot,
            "browser.check": self.check,
        }
        assert set(handlers) == set(ACTION_KINDS)  # what a worker without a browser refuses
        for kind, handler in handlers.items():
            registry.register(kind, handler)

    def _run(self, args: dict[str, Any], ctx: ActionContext, make: Any) -> dict[str, Any]:
        try:
            policy = BrowserPolicy.from_args(args.get("policy"))
        except ValueError as exc:
            raise ActionRefused(str(exc), code="invalid_argument") from exc
        started = time.monotonic()
        budget = ctx.timeout or policy.timeout * 3
        service = self._service
        if args.get("visible"):
            # The desktop fallback: on a person's screen, so only under an approval the
            # coordinator checked and never while a kill switch or a lost link blocks input.
            if self._visible is None:
                raise ActionRefused("this worker offers no visible browser", code="no_display")
            blocked = ctx.input_blocked()
            if blocked is not None:
                raise ActionRefused(f"desktop use is blocked: {blocked}", code="kill_switch")
            service = self._visible
        result: dict[str, Any] = service.run(
            lambda c: make(c, policy), ctx.run_id, ctx, budget, policy
        )
        result = _extract(result, policy)
        result["browser"] = "visible" if service is self._visible else "headless"
        result["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        return result

    def fetch(self, args: dict[str, Any], ctx: ActionContext) -> dict[str, Any]:
        url = _required(args, "url")

        async def go(pages: Pages, policy: BrowserPolicy) -> dict[str, Any]:
            async with pages.slot() as slot:
                nav = await _open(slot, url, policy, text_only=True)
                if nav.outcome:
                    return _without_page(nav)
                async with _crashing(slot):
                    return await _read(slot.page, nav, policy)
                return _without_page(nav)

        return self._run(args, ctx, go)

    def search(self, args: dict[str, Any], ctx: ActionContext) -> dict[str, Any]:
        query = _required(args, "query")
        try:
            spec = search_spec(args)
        except ValueError as exc:
            raise ActionRefused(str(exc), code="invalid_argument") from exc
        url = spec.template.replace("{query}", quote_plus(query))
        if spec.format == "searxng":
            url = searxng_url(url)
        limit = int(args.get("max_results", 10))

        async def go(pages: Pages, policy: BrowserPolicy) -> dict[str, Any]:
            async with pages.slot() as slot:
                nav = await _open(slot, url, policy, text_only=True)
                about = {"query": query, "search_url": url, "extractor": spec.extractor}
                nothing = {"results": [], "found": 0}
                if nav.outcome:
                    return {**_without_page(nav), **about, **nothing}
                async with _crashing(slot):
                    read = await slot.page.evaluate(_TEXT_JS, [policy.max_bytes, policy.max_bytes])
                    if _grew(nav, policy, read):
                        return {**_without_page(nav), **about, **nothing}
                    visible = str(read["text"])
                    outcome, reason = _classify(nav, visible)
                    results, why = await _results(slot, nav, spec, limit, visible)
                if slot.crashed:
                    return {**_without_page(nav), **about, **nothing}
                if not results and (outcome == "ok" or spec.format == "searxng"):
                    reason = why or reason
                return {
                    **nav.metadata(),
                    **about,
                    "outcome": outcome,
                    "reason": reason,
                    "found": len(results),
                    # Snippets are what the search page says about a source, not the
                    # source: they are never evidence of its claims.
                    "results": [{**r, "snippet_is_evidence": False} for r in results],
                }

        return self._run(args, ctx, go)

    def check(self, args: dict[str, Any], ctx: ActionContext) -> dict[str, Any]:
        """{"url", "text"?} -> {"url": the final URL, "status", "contains"}: a read-only look,
        a postcondition's check. `contains` says whether the page's visible text holds `text`
        (without one: whether the page loaded); a page that could not be read contains
        nothing, and its outcome says why."""
        url = _required(args, "url")
        text = args.get("text")
        if text is not None and not isinstance(text, str):
            raise ActionFailed("text: a string")

        async def go(pages: Pages, policy: BrowserPolicy) -> dict[str, Any]:
            async with pages.slot() as slot:
                nav = await _open(slot, url, policy, text_only=True)
                found = {"url": nav.final_url or nav.url, "status": nav.status}
                if nav.outcome:
                    return {
                        **found,
                        "contains": False,
                        "outcome": nav.outcome,
                        "reason": nav.reason,
                    }
                async with _crashing(slot):
                    read = await slot.page.evaluate(_TEXT_JS, [policy.max_bytes, policy.max_bytes])
                if slot.crashed or _grew(nav, policy, read):
                    return {
                        **found,
                        "contains": False,
                        "outcome": nav.outcome,
                        "reason": nav.reason,
                    }
                visible = str(read["text"])
                contains = text in visible if text else True
                return {**found, "contains": contains, "outcome": "ok", "reason": ""}

        result = self._run(args, ctx, go)
        return {
            k: result[k] for k in ("url", "status", "contains", "outcome", "reason", "elapsed_ms")
        }

    def screenshot(self, args: dict[str, Any], ctx: ActionContext) -> dict[str, Any]:
        url = _required(args, "url")
        full_page = bool(args.get("full_page", False))

        async def go(pages: Pages, policy: BrowserPolicy) -> dict[str, Any]:
            async with pages.slot() as slot:
                nav = await _open(slot, url, policy, text_only=False)
                if nav.outcome:
                    return _without_page(nav)
                png = b""
                async with _crashing(slot):
                    png = await slot.page.screenshot(type="png", full_page=full_page)
                if slot.crashed:
                    return _without_page(nav)
            return {
                **nav.metadata(),
                "outcome": nav.outcome or "ok",
                "reason": nav.reason,
                "format": "png",
                "sha256": hashlib.sha256(png).hexdigest(),
                "bytes": len(png),
                "png_base64": base64.b64encode(png).decode("ascii"),
            }

        return self._run(args, ctx, go)


@contextlib.asynccontextmanager
async def _crashing(slot: Slot) -> AsyncIterator[None]:
    """Reading a page whose renderer goes away (killed past the memory limit) ends the read:
    the slot's navigation holds the reason; any other error is the action's."""
    try:
        yield
    except PlaywrightError as exc:
        if not (slot.crashed or crashed(exc)):
            raise
        slot.crash()


def _required(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise ActionFailed(f"{key}: required (a non-empty string)")
    return value


async def _results(
    slot: Slot, nav: Navigation, spec: SearchSpec, limit: int, visible: str
) -> tuple[list[dict[str, Any]], str]:
    """The results on the page, and why there are none when there are none."""
    page = slot.page
    if spec.format == "searxng":
        body = visible
        if nav.document is not None:
            try:
                body = (await nav.document.body()).decode("utf-8", "replace")
            except PlaywrightError:
                pass  # the text the browser shows is the same JSON
        if nav.status == 403:
            return [], "HTTP 403: the instance refuses format=json (enable it in search.formats)"
        found, why = searxng_results(body, limit)
        return [dict(r) for r in found], why
    if spec.result:
        picked = await page.evaluate(SELECTORS_JS, [spec.result, spec.link, spec.snippet, limit])
        found = results_of(picked, limit)
        why = f"no element matches the result selector {spec.result!r} with a link {spec.link!r}"
        return [dict(r) for r in found], "" if found else why
    picked = await page.evaluate(GENERIC_JS, [limit])
    found = results_of(picked.get("results") if isinstance(picked, dict) else None, limit)
    why = "the page has no repeated list of result links (give --result-selector/--link-selector)"
    return [dict(r) for r in found], "" if found else why
