"""One policed navigation: every document hop is fetched and checked by us, not the browser.

Chromium follows redirects without showing them to route handlers, so for documents (the
page and its frames) the handler walks the redirect chain itself with `max_redirects=0`,
checking each hop against the policy, then hands the final response to the page. Binary or
oversized documents never reach the page.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

from playwright.async_api import BrowserContext, ConsoleMessage, Page, Route
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from worker_agent.browser.policy import BrowserPolicy

TEXTUAL = re.compile(r"^(text/|application/(xhtml\+xml|xml|json|[\w.+-]+\+(xml|json))\b)", re.I)
_HEAD = re.compile(rb"<head[^>]*>", re.I)
LOCAL_RESOURCE = "Not allowed to load local resource: "


@dataclass
class Navigation:
    """What happened to a document navigation; `outcome` is empty while it went fine."""

    url: str
    final_url: str = ""
    status: int = 0
    content_type: str = ""
    bytes: int = 0
    redirects: list[str] = field(default_factory=list)
    outcome: str = ""
    reason: str = ""
    blocked: list[dict[str, str]] = field(default_factory=list)

    def stop(self, outcome: str, reason: str) -> None:
        if not self.outcome:
            self.outcome, self.reason = outcome, reason

    def metadata(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "final_url": self.final_url or self.url,
            "status": self.status,
            "content_type": self.content_type,
            "bytes": self.bytes,
            "redirects": self.redirects,
            "blocked_requests": self.blocked[:20],
        }


def _with_base(body: bytes, base: str) -> bytes:
    # The page is served under its first URL; a <base> keeps its relative links right.
    tag = f'<base href="{base}">'.encode()
    match = _HEAD.search(body)
    return body[: match.end()] + tag + body[match.end() :] if match else tag + body


@dataclass(eq=False)
class Slot:
    """A page kept for reuse within one run: opening a page costs more than loading one."""

    page: Page
    nav: Navigation | None = None
    policy: BrowserPolicy | None = None


async def new_slot(context: BrowserContext) -> Slot:
    slot = Slot(await context.new_page())

    async def handle(route: Route) -> None:
        nav, policy = slot.nav, slot.policy
        if nav is None or policy is None:
            await route.abort("blockedbyclient")  # no navigation of ours is under way
            return
        request = route.request
        if request.resource_type != "document":
            await _subresource(route, request.url, policy, nav)
            return
        if request.frame.parent_frame is None:
            await _document(route, request.url, policy, nav)
            return
        frame = Navigation(request.url)
        await _document(route, request.url, policy, frame)
        if frame.outcome == "refused":  # the page loads without it; the report says why
            hop = frame.redirects[-1] if frame.redirects else request.url
            why = policy.refusal(hop, document=True) or frame.reason
            if hop != request.url:
                why = f"redirect of {request.url}: {why}"
            nav.blocked.append({"url": hop, "reason": why})

    def console(message: ConsoleMessage) -> None:
        # Chromium itself stops a page's navigation to file:, chrome: and the like before any
        # request exists (so no route sees it) and says so only on the console: the policy's
        # reason goes into the result, so the report shows what the page tried.
        nav, policy = slot.nav, slot.policy
        text = message.text
        if nav is None or policy is None or not text.startswith(LOCAL_RESOURCE):
            return
        target = text[len(LOCAL_RESOURCE) :].strip()
        why = policy.refusal(target, document=True) or "Chromium refused a local resource"
        nav.blocked.append({"url": target[:500], "reason": why})

    slot.page.on("console", console)
    await slot.page.route("**/*", handle)
    return slot


async def navigate(slot: Slot, url: str, policy: BrowserPolicy) -> Navigation:
    """Load `url` in the slot's page; `outcome` says why not when it did not load."""
    nav = Navigation(url)
    refusal = policy.refusal(url, document=True)
    if refusal:
        nav.stop("refused", refusal)
        return nav
    slot.nav, slot.policy = nav, policy
    try:
        await slot.page.goto(url, timeout=policy.timeout * 1000, wait_until="load")
    except PlaywrightTimeout:
        nav.stop("timeout", f"the page did not finish loading within {policy.timeout:g} s")
    except PlaywrightError as exc:
        nav.stop("network_error", str(exc).strip().splitlines()[0])
    return nav


async def _subresource(route: Route, url: str, policy: BrowserPolicy, nav: Navigation) -> None:
    """An image, script, style or fetch of the page: every redirect hop checked, like documents.

    Chromium would follow a continued request's redirects without showing them to the route
    handler, so a redirect could reach a denied or private address; the hops are walked here.
    """
    hop = url
    try:
        for _ in range(policy.max_redirects + 1):
            reason = policy.refusal(hop)
            if reason:
                why = reason if hop == url else f"redirect of {url}: {reason}"
                nav.blocked.append({"url": hop, "reason": why})
                await route.abort("blockedbyclient")
                return
            response = await route.fetch(url=hop, max_redirects=0, timeout=policy.timeout * 1000)
            location = response.headers.get("location")
            if not (300 <= response.status < 400 and location):
                await route.fulfill(response=response)
                return
            hop = urljoin(hop, location)
    except PlaywrightError:
        # The page is closing or the request failed: it simply does not load.
        with contextlib.suppress(PlaywrightError):
            await route.abort("failed")
        return
    nav.blocked.append({"url": hop, "reason": f"more than {policy.max_redirects} redirects"})
    await route.abort("blockedbyclient")


async def _document(route: Route, url: str, policy: BrowserPolicy, nav: Navigation) -> None:
    hop = url
    try:
        while True:
            reason = policy.refusal(hop, document=True)
            if reason:
                nav.stop("refused", reason if hop == url else f"redirect to {hop}: {reason}")
                await route.abort("blockedbyclient")
                return
            response = await route.fetch(url=hop, max_redirects=0, timeout=policy.timeout * 1000)
            location = response.headers.get("location")
            if 300 <= response.status < 400 and location:
                hop = urljoin(hop, location)
                nav.redirects.append(hop)
                if len(nav.redirects) > policy.max_redirects:
                    nav.stop(
                        "redirect_limit",
                        f"more than {policy.max_redirects} redirects (last to {hop})",
                    )
                    await route.abort("blockedbyclient")
                    return
                continue
            break
        body = await response.body()
    except PlaywrightTimeout:
        nav.stop("timeout", f"no complete answer within {policy.timeout:g} s")
        await route.abort("timedout")
        return
    except PlaywrightError as exc:
        nav.stop("network_error", str(exc).strip().splitlines()[0])
        await route.abort("failed")
        return
    content_type = response.headers.get("content-type", "")
    nav.final_url, nav.status = hop, response.status
    nav.content_type, nav.bytes = content_type, len(body)
    if content_type and not TEXTUAL.match(content_type):
        nav.stop(
            "unsupported_content",
            f"{content_type.split(';')[0]} is not text: the fetch surface is UTF-8 text",
        )
        await route.abort("blockedbyclient")
        return
    if len(body) > policy.max_bytes:
        nav.stop("too_large", f"{len(body)} bytes is more than the limit of {policy.max_bytes}")
        await route.abort("blockedbyclient")
        return
    headers = {
        k: v
        for k, v in response.headers.items()
        if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")
    }
    await route.fulfill(
        status=response.status,
        headers=headers,
        body=_with_base(body, hop) if nav.redirects else body,
    )
