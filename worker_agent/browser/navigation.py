"""One watched navigation: Chromium loads the page, follows its redirects and makes every
request through the context's egress guard (`egress.py`); nothing is fetched again here.

This module starts the navigation, counts the main document's redirect hops (stopping the
page past the policy's limit), reads what the guard refused while the page was open, and
says what came back: the final document's status, type and size, or why there is none.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from playwright.async_api import (
    BrowserContext,
    ConsoleMessage,
    Error as PlaywrightError,
    Page,
    Request,
    Response,
    TimeoutError as PlaywrightTimeout,
)

from worker_agent.browser.egress import REFUSED_HEADER, UNREACHABLE_HEADER, EgressGuard
from worker_agent.browser.policy import BrowserPolicy
from worker_agent.browser.rendering import Skipper

TEXTUAL = re.compile(r"^(text/|application/(xhtml\+xml|xml|json|[\w.+-]+\+(xml|json))\b)", re.I)
LOCAL_RESOURCE = "Not allowed to load local resource: "
MAX_BLOCKED = 50
SIZES_TIMEOUT = 2.0
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


@dataclass(eq=False)
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
    # Connections the guard could not make (refused, timed out), with why.
    unreached: list[dict[str, str]] = field(default_factory=list)
    # Every redirected request of the run's pages, to the first URL of its chain (the guard's).
    via: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    locations: dict[str, str] = field(default_factory=dict)  # http redirects the guard saw
    document: Response | None = None  # the main frame's last document response
    settle_ms: int = 0  # how long the page was given to settle after load (rendering.py)
    settled: bool = True
    halt: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, outcome: str, reason: str) -> None:
        if not self.outcome:
            self.outcome, self.reason = outcome, reason

    def refused(self, target: str, reason: str) -> None:
        """The egress guard refused a connection while this navigation's page was open."""
        self.blocked.append({"url": target[:500], "reason": reason})

    def oversized(self, url: str, reason: str) -> None:
        """The guard cut a document's body past the policy's limit: this page's own document
        makes the navigation `too_large`; a frame's is listed with the refusals."""
        self.blocked.append({"url": url[:500], "reason": reason})
        hop = self.redirects[-1] if self.redirects else self.url
        if _same_document(url, hop):
            # Not halted: the cut body ends the load at once, and closing a page while its
            # navigation commits can leave Chromium never closing it.
            self.stop("too_large", reason)

    def unreachable(self, target: str, reason: str) -> None:
        """The egress guard could not connect to `target` for this navigation's page."""
        if len(self.unreached) < MAX_BLOCKED:
            self.unreached.append({"url": target[:500], "reason": reason})

    def redirected(self, url: str, location: str) -> None:
        if len(self.locations) < 100:
            self.locations[url] = location

    def refusal_of(self, url: str) -> str | None:
        """Why the guard refused the request for `url`, if it did (however the plan spelled
        it: the guard sees the URL as Chromium canonicalized it, `LocalHost` as `localhost`)."""
        return _reason_for(self.blocked, url)

    def unreached_of(self, url: str) -> str | None:
        """Why the guard could not connect for `url`, if it could not."""
        return _reason_for(self.unreached, url)

    def refusals(self) -> list[dict[str, str]]:
        """The guard's refusals, each with the hop refused and, for a redirect, its origin."""
        listed = []
        for entry in self.blocked[:MAX_BLOCKED]:
            url, reason = entry["url"], entry["reason"]
            if "://" not in url:  # a tunnel (https, wss): the guard saw host:port only
                url = next((u for u in self.failed if _connect_key(u) == url), url)
            item = {"url": url, "reason": reason}
            origin = self.via.get(url)
            if origin and origin != url:
                item["reason"] = f"redirect of {origin}: {reason}"
                item["redirect_of"] = origin
            listed.append(item)
        return listed

    def metadata(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "final_url": self.final_url or self.url,
            "status": self.status,
            "content_type": self.content_type,
            "bytes": self.bytes,
            "redirects": self.redirects,
            "blocked_requests": self.refusals(),
            "blocked_total": len(self.blocked),
            "settle_ms": self.settle_ms,
            "settled": self.settled,
        }


def _reason_for(entries: list[dict[str, str]], url: str) -> str | None:
    key = _connect_key(url)
    for entry in entries:
        seen = entry["url"]
        tunnel = "://" not in seen  # https and wss: the guard saw host:port only
        if (seen == key) if tunnel else _same_document(seen, url):
            return entry["reason"]
    return None


def _same_document(a: str, b: str) -> bool:
    """Whether two URLs name the same document, as Chromium writes one and a plan another
    (`http://h` and `http://h/`, a default port, a fragment)."""
    try:
        x, y = urlsplit(a), urlsplit(b)
        return (
            (x.scheme.lower(), (x.hostname or ""), x.port or DEFAULT_PORTS.get(x.scheme, 0))
            == (y.scheme.lower(), (y.hostname or ""), y.port or DEFAULT_PORTS.get(y.scheme, 0))
            and (x.path or "/") == (y.path or "/")
            and x.query == y.query
        )
    except ValueError:
        return False


def _connect_key(url: str) -> str:
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return ""
    port = port or DEFAULT_PORTS.get(parts.scheme.lower(), 0)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(eq=False)
class Slot:
    """A page kept for reuse within one run: opening a page costs more than loading one."""

    page: Page
    guard: EgressGuard
    skipper: Skipper
    crash_outcome: Callable[[], tuple[str, str]]  # why the page's renderer went away (memory.py)
    nav: Navigation | None = None
    policy: BrowserPolicy | None = None
    crashed: bool = False  # a crashed page is never reused

    def crash(self) -> None:
        """The page's renderer went away: its navigation ends with the reason."""
        self.crashed = True
        if self.nav is not None:
            self.nav.stop(*self.crash_outcome())
            self.nav.halt.set()


def _main_document(request: Request, page: Page) -> bool:
    try:
        return request.is_navigation_request() and request.frame == page.main_frame
    except PlaywrightError:  # a worker's request has no frame
        return False


async def new_slot(
    context: BrowserContext, guard: EgressGuard, crash_outcome: Callable[[], tuple[str, str]]
) -> Slot:
    page = await context.new_page()
    slot = Slot(page, guard, Skipper(page), crash_outcome)

    def request(request: Request) -> None:
        nav, policy, previous = slot.nav, slot.policy, request.redirected_from
        if previous is None:
            return
        slot.guard.followed(request.url, previous.url)
        if nav is None or policy is None or not _main_document(request, page):
            return
        nav.redirects.append(request.url)
        if len(nav.redirects) > policy.max_redirects:
            nav.stop(
                "redirect_limit",
                f"more than {policy.max_redirects} redirects (last to {request.url})",
            )
            nav.halt.set()

    def response(response: Response) -> None:
        nav = slot.nav
        if nav is not None and _main_document(response.request, page):
            nav.document = response

    def failed(request: Request) -> None:
        if slot.nav is not None:
            slot.nav.failed.append(request.url)

    def console(message: ConsoleMessage) -> None:
        # Chromium itself stops a page's navigation to file:, chrome: and the like before any
        # request exists (so no proxy sees it) and says so only on the console: the policy's
        # reason goes into the result, so the report shows what the page tried.
        nav, policy = slot.nav, slot.policy
        text = message.text
        if nav is None or policy is None or not text.startswith(LOCAL_RESOURCE):
            return
        target = text[len(LOCAL_RESOURCE) :].strip()
        why = policy.refusal(target, document=True) or "Chromium refused a local resource"
        nav.blocked.append({"url": target[:500], "reason": why})

    page.on("request", request)
    page.on("response", response)
    page.on("requestfailed", failed)
    page.on("console", console)
    page.on("crash", lambda _: slot.crash())
    return slot


async def navigate(slot: Slot, url: str, policy: BrowserPolicy) -> Navigation:
    """Load `url` in the slot's page; `outcome` says why not when it did not load."""
    nav = Navigation(url, via=slot.guard.origins)
    refusal = policy.refusal(url, document=True)
    if refusal:
        nav.stop("refused", refusal)
        return nav
    slot.nav, slot.policy = nav, policy
    slot.guard.listen(nav)
    going = asyncio.ensure_future(
        slot.page.goto(url, timeout=policy.timeout * 1000, wait_until="load")
    )
    halted = asyncio.ensure_future(nav.halt.wait())
    try:
        await asyncio.wait({going, halted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        halted.cancel()
        if not going.done():
            # Past the redirect limit, or the action was cancelled: the page is closed
            # when the slot is released, which ends the navigation.
            going.cancel()
            going.add_done_callback(_consume)
    if not going.done() or going.cancelled():
        return nav
    try:
        answer = going.result()
    except PlaywrightTimeout:
        nav.stop("timeout", f"the page did not finish loading within {policy.timeout:g} s")
        return nav
    except PlaywrightError as exc:
        if crashed(exc):
            slot.crash()  # also when the error overtook the page's crash event
            return nav
        await _failed(nav, policy, str(exc).strip().splitlines()[0])
        return nav
    if answer is not None:
        await _loaded(nav, policy, answer)
    return nav


def crashed(exc: BaseException) -> bool:
    """Whether a Playwright error says the page's renderer went away."""
    text = str(exc)
    return "Target crashed" in text or "Page crashed" in text


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _refused_hop(nav: Navigation) -> bool:
    hop = nav.redirects[-1] if nav.redirects else nav.url
    reason = nav.refusal_of(hop)
    if reason is None:
        return False
    nav.status = 0
    nav.stop("refused", reason if hop == nav.url else f"redirect to {hop}: {reason}")
    return True


async def _loaded(nav: Navigation, policy: BrowserPolicy, response: Response) -> None:
    if _refused_hop(nav) or nav.outcome:
        return
    if response.headers.get(REFUSED_HEADER.lower()):
        # The guard's own refusal page: never the site's (its reason is in `blocked`).
        nav.status = 0
        nav.stop("refused", nav.refusal_of(response.url) or "refused by the worker's egress guard")
        return
    if response.headers.get(UNREACHABLE_HEADER.lower()):
        # The guard's 502: no server answered, so there is no HTTP status to report.
        nav.status = 0
        nav.stop("network_error", _unreached(nav, response.url))
        return
    await _describe(nav, policy, response)


def _unreached(nav: Navigation, url: str) -> str:
    reason = nav.unreached_of(url) or "the worker's egress guard could not connect"
    return reason if _same_document(url, nav.url) else f"redirect to {url}: {reason}"


async def _describe(nav: Navigation, policy: BrowserPolicy, response: Response) -> None:
    headers = response.headers
    content_type = headers.get("content-type", "")
    nav.final_url, nav.status, nav.content_type = response.url, response.status, content_type
    nav.bytes = await _size(response, headers)
    if content_type and not TEXTUAL.match(content_type):
        nav.stop(
            "unsupported_content",
            f"{content_type.split(';')[0]} is not text: the fetch surface is UTF-8 text",
        )
    elif nav.bytes > policy.max_bytes:
        nav.stop("too_large", f"{nav.bytes} bytes is more than the limit of {policy.max_bytes}")


# The document's decoded size as the page measured it (Navigation Timing): nothing of the body
# crosses to the worker to be counted.
_DECODED_JS = """() => {
  const entry = performance.getEntriesByType('navigation')[0];
  return entry ? entry.decodedBodySize : 0;
}"""


async def _size(response: Response, headers: dict[str, str]) -> int:
    """The document's size: as declared when it is not compressed, else as the page decoded
    it, else as received. The body itself is never read for this: a compressed or unframed
    document may decode to far more than its limit (`response.body()` took it all into the
    worker, twice over through the driver)."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and not headers.get("content-encoding"):
        return int(declared)
    page = response.frame.page
    with contextlib.suppress(PlaywrightError):
        if _same_document(page.url, response.url):  # the page shows this document
            decoded = await page.evaluate(_DECODED_JS)
            if isinstance(decoded, int) and decoded > 0:
                return decoded
    with contextlib.suppress(PlaywrightError, TimeoutError):
        # Bounded: the sizes are known once the response has finished, which a cut or
        # refused document may never do.
        sizes = await asyncio.wait_for(response.request.sizes(), SIZES_TIMEOUT)
        received = sizes.get("responseBodySize", 0)
        if received > 0:
            return int(received)
    return int(declared) if declared.isdigit() else 0


async def _failed(nav: Navigation, policy: BrowserPolicy, error: str) -> None:
    if _refused_hop(nav) or nav.outcome:
        return
    document = nav.document
    if document is not None:
        location = document.headers.get("location")
        if 300 <= document.status < 400 and location:
            # Chromium refused to follow it (file:, chrome: ...): the policy says why.
            target = urljoin(document.url, location)
            why = policy.refusal(target, document=True)
            if why:
                nav.stop("refused", f"redirect to {target}: {why}")
                return
        else:
            # A document the browser would not show (a download): its metadata and the rule.
            with contextlib.suppress(PlaywrightError):
                await _describe(nav, policy, document)
            if nav.outcome:
                return
    if "ERR_UNSAFE_REDIRECT" in error:
        # Chromium refused to follow a redirect to file:, chrome: and the like.
        hop = nav.redirects[-1] if nav.redirects else nav.url
        location = nav.locations.get(hop.split("#")[0])
        if location is None:
            nav.stop("refused", f"{hop} redirects to a URL that is not http or https")
        else:
            target = urljoin(hop, location)
            why = policy.refusal(target, document=True) or "the browser does not load it"
            nav.stop("refused", f"redirect to {target}: {why}")
        return
    if "ERR_TOO_MANY_REDIRECTS" in error:
        nav.stop("redirect_limit", f"more than {policy.max_redirects} redirects")
        return
    hop = nav.redirects[-1] if nav.redirects else nav.url
    if nav.unreached_of(hop):  # a tunnel the guard could not open: its cause, not Chromium's
        nav.stop("network_error", _unreached(nav, hop))
        return
    nav.stop("network_error", error)
