"""Research runs: search (unless sources are given), fetch sources in parallel, report.

A research run is an ordinary run of kind "research": a `browser.search` unit first, then
one `browser.fetch` work unit per chosen source, all in one stage so that they spread over
the eligible headless workers; when every unit has its receipt, the evidence report
(`research_report`) is written to the journal. Snippets from the search page are kept apart
and never count as evidence; failed, refused, binary and challenged sources are listed with
their reason.

App routes of the routing policy add one `app.research` unit each, a branch of its own:

- without `thorough` the app units come first, one stage each; the first that answers
  settles the run (its sources are the report) and the later units are skipped; when every
  app fails, the headless units run as they would have without apps;
- with `thorough` the app units run in the same stage as the headless units (fetches found
  by the search join that stage too, so nothing waits for the app) and the report merges
  both, with the points where they disagree.

An app unit's failure is a result, not a failed action (the worker maps it to a code): it
is journaled as a `research.branch` event and the run goes on. An app that no worker offers
is skipped under its branch the same way.

Limits per run: `max_pages` fetch units at most (the rest are listed as skipped), and
`max_bytes` read by the browsers: each document is capped at it, and once the run has read
that much, fetches not yet dispatched are skipped with the reason (fetches already in
flight finish, so the total may pass the limit by what they read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from coordinator.heart import ledger
from coordinator.heart.context import RunKind
from coordinator.runs.plan import Plan, PlannedAction, check_url
from coordinator.runs.research import fallback, report as research_report
from coordinator.runs.research.report import APP_KIND
from coordinator.store import journal, runs as run_queries
from coordinator.store.models import ActionRow, RunRow
from shared.errors import InvalidArgumentError
from shared.receipts import decode_result
from shared.search import search_spec
from shared.states import ActionState
from shared.text import refuse_control

__all__ = ["ResearchRequest", "research_plan"]

MAX_SOURCES = 20
DEFAULT_MAX_PAGES = 50
MAX_PAGES = 500
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_BYTES = 1024 * 1024 * 1024
MAX_URLS = 2 * MAX_PAGES
DOCUMENT_BYTES = 2 * 1024 * 1024  # the workers' own cap per document (BrowserPolicy.max_bytes)
APP_TIMEOUT = 120.0
APP_GRACE = 15.0  # the ledger waits this much longer than the app may run, for its receipt
HEADLESS = {"capability": "headless"}


@dataclass(frozen=True)
class ResearchRequest:
    query: str
    urls: tuple[str, ...] = ()
    search_url: str = ""  # a URL template with {query}; empty: the workers' default profile
    max_sources: int = 5
    thorough: bool = False  # app routes beside the headless route, reports merged
    max_pages: int = 0  # 0: DEFAULT_MAX_PAGES
    max_bytes: int = 0  # 0: DEFAULT_MAX_BYTES
    search_format: str = ""  # "html" or "searxng" (shared/search.py)
    result_selector: str = ""  # with link_selector; none: the generic extractor
    link_selector: str = ""
    snippet_selector: str = ""
    search_profile: str = ""

    def search_args(self, default: dict[str, str] | None = None) -> dict[str, str]:
        """The `browser.search` arguments that say where and how to search: the request's
        own, else the routing policy's `search` (`default`), else the workers' profile."""
        asked = {
            "template": self.search_url,
            "format": self.search_format,
            "result": self.result_selector,
            "link": self.link_selector,
            "snippet": self.snippet_selector,
            "profile": self.search_profile,
        }
        chosen = asked if any(asked.values()) else dict(default or {})
        return {k: v for k, v in chosen.items() if v}


def research_plan(
    request: ResearchRequest,
    routes: list[dict[str, Any]] | None = None,
    search: dict[str, str] | None = None,
) -> Plan:
    """The run that answers `request` (fetch units are added after the search, if any);
    `search` is the routing policy's search for the owner (used when the request has none)."""
    query = request.query.strip()
    if not query or len(query) > 500:
        raise InvalidArgumentError("query: 1-500 characters")
    refuse_control("query", query)
    if not 1 <= request.max_sources <= MAX_SOURCES:
        raise InvalidArgumentError(f"max_sources: between 1 and {MAX_SOURCES}")
    if request.search_url:
        check_url("search_url", request.search_url, template=True)
        if "{query}" not in request.search_url:
            raise InvalidArgumentError(
                "search_url: a template needs {query}, e.g. https://x/?q={query}"
            )
    search_args = request.search_args(search)
    if not request.urls:
        try:
            search_spec(search_args)
        except ValueError as exc:
            field, _, why = str(exc).partition(": ")
            names = {"template": "search_url", "format": "search_format"}
            names |= {"result": "result_selector", "link": "link_selector"}
            names |= {"snippet": "snippet_selector", "profile": "search_profile"}
            raise InvalidArgumentError(f"{names.get(field, field)}: {why}") from exc
    # URLs past max_pages are listed as skipped, not fetched: still bounded, and each checked
    # (a file:, chrome: or javascript: URL is refused here, not at the worker).
    if len(request.urls) > MAX_URLS:
        raise InvalidArgumentError(f"urls: at most {MAX_URLS} (this is {len(request.urls)})")
    for i, url in enumerate(request.urls):
        check_url(f"urls[{i}]", url)
    max_pages = request.max_pages or DEFAULT_MAX_PAGES
    max_bytes = request.max_bytes or DEFAULT_MAX_BYTES
    if not 1 <= max_pages <= MAX_PAGES:
        raise InvalidArgumentError(f"max_pages: between 1 and {MAX_PAGES}")
    if not 1 <= max_bytes <= MAX_BYTES:
        raise InvalidArgumentError(f"max_bytes: between 1 and {MAX_BYTES}")
    routes = routes or [HEADLESS | {"name": "headless"}]
    apps = [r for r in routes if r.get("app")]
    mode = "thorough" if apps and request.thorough else "app" if apps else "headless"
    policy = {"max_bytes": max_bytes} if max_bytes < DOCUMENT_BYTES else {}
    urls = list(dict.fromkeys(request.urls))
    spec: dict[str, Any] = {
        "query": query,
        "max_sources": request.max_sources,
        "search_url": request.search_url,
        "search": search_args,
        "routes": routes,
        "mode": mode,
        "limits": {"max_pages": max_pages, "max_bytes": max_bytes},
        "progress": {"pages": 0, "bytes": 0},
        "skipped": [
            {"url": url, "reason": f"max_pages: the run's page limit ({max_pages}) is reached"}
            for url in urls[max_pages:]
        ],
    }
    headless: list[PlannedAction]
    if urls:
        headless = [_fetch(url, policy) for url in urls[:max_pages]]
    else:
        args: dict[str, Any] = {"query": query, "max_results": request.max_sources * 2}
        args.update(search_args)
        if policy:
            args["policy"] = policy
        headless = [PlannedAction("browser.search", args, True, HEADLESS, f"search: {query}")]
    branches = [_app_unit(r, query, request.max_sources) for r in apps]
    if mode == "thorough":  # the headless units first: they are routed first
        actions, stages = headless + branches, (0,) * (len(headless) + len(branches))
    else:
        actions = branches + headless
        stages = tuple(range(len(branches))) + (len(branches),) * len(headless)
    n = len(actions)
    return Plan(
        tuple(actions),
        title=f"research: {query}",
        kind="research",
        spec=spec,
        stages=stages,
        max_actions=max(3 * (request.max_sources + 1 + len(branches)), n + 10),
    )


def _fetch(url: str, policy: dict[str, Any]) -> PlannedAction:
    args: dict[str, Any] = {"url": url} | ({"policy": policy} if policy else {})
    return PlannedAction("browser.fetch", args, True, HEADLESS, f"fetch: {url}")


def _app_unit(route: dict[str, Any], query: str, max_sources: int) -> PlannedAction:
    args = {
        "app": route["app"],
        "route": route["name"],
        "query": query,
        "max_sources": max_sources,
        "timeout": float(route.get("timeout") or APP_TIMEOUT),
    }
    return PlannedAction(
        APP_KIND, args, True, {"app": route["app"]}, f"research app {route['app']}: {query}"
    )


# ------------------------------------------------------------------------------ receipts


def on_receipt(
    s: Session, run: RunRow, action: ActionRow, result: Any, ctx: ledger.Context
) -> None:
    if not isinstance(result, dict):
        return
    if action.kind.startswith("browser."):
        _count(run, action, result)
    if action.kind == APP_KIND:
        _on_app(s, run, action, result, ctx)
    elif action.kind == "browser.search":
        _on_search(s, run, action, result, ctx)


def _count(run: RunRow, action: ActionRow, result: dict[str, Any]) -> None:
    """Keep the run's page and byte totals, which the route hook checks against its limits."""
    progress = dict(run.spec.get("progress") or {"pages": 0, "bytes": 0})
    progress["bytes"] += int(result.get("bytes") or 0)
    progress["pages"] += action.kind == "browser.fetch"
    run.spec = {**run.spec, "progress": progress}  # a new value: the JSON column sees it


def _on_app(
    s: Session, run: RunRow, action: ActionRow, result: dict[str, Any], ctx: ledger.Context
) -> None:
    route = research_report.app_route(action)
    ok = result.get("outcome") == "ok"
    ledger.record(
        s,
        run,
        ctx,
        "research.branch",
        branch=action.id,
        route=route,
        outcome="ok" if ok else "failed",
        code="" if ok else result.get("code", ""),
        message="" if ok else result.get("message", ""),
        sources=len(result.get("sources") or []),
        worker=action.worker_id,
    )
    if not ok or run.spec.get("mode") != "app":
        return
    # The first app to answer settles a run that is not thorough: the rest is not needed.
    for other in run_queries.actions_of(s, run.id):
        if other.status == ActionState.PENDING and other.stage > action.stage:
            _skip(other, f"not_needed: route {route} answered", ctx)


def _on_search(
    s: Session, run: RunRow, action: ActionRow, result: dict[str, Any], ctx: ledger.Context
) -> None:
    """After the search: fan the chosen sources out as fetch work units."""
    found = [r.get("url") for r in result.get("results", []) if isinstance(r, dict)]
    urls: list[str] = []
    refused: list[dict[str, str]] = []
    for url in dict.fromkeys(u for u in found if isinstance(u, str) and u):
        try:
            urls.append(check_url("url", url))
        except InvalidArgumentError as exc:
            # A search page may link anywhere (file:, javascript:): such a result is not a source.
            refused.append({"url": url[:200], "reason": f"refused: {exc.message}"})
    if refused:
        run.spec = {**run.spec, "skipped": [*run.spec.get("skipped", []), *refused]}
    chosen = urls[: run.spec.get("max_sources", 5)]
    max_pages = run.spec.get("limits", {}).get("max_pages", DEFAULT_MAX_PAGES)
    if len(chosen) > max_pages:
        reason = f"max_pages: the run's page limit ({max_pages}) is reached"
        over = [{"url": url, "reason": reason} for url in chosen[max_pages:]]
        run.spec = {**run.spec, "skipped": [*run.spec.get("skipped", []), *over]}
        chosen = chosen[:max_pages]
    # A thorough run's fetches join the search's stage, beside the app units still running.
    stage = action.stage if run.spec.get("mode") == "thorough" else action.stage + 1
    policy = _policy_of(action)  # the search ran under the coordinator's policy; so do these
    for offset, url in enumerate(chosen):
        s.add(
            ledger.new_action(
                run.id,
                run.actions_total + offset,
                stage,
                "browser.fetch",
                {"url": url, "policy": policy},
                idempotent=True,
                route=HEADLESS,
                intent=f"fetch: {url}",
                timeout=action.timeout_seconds,
            )
        )
    run.actions_total += len(chosen)
    s.flush()
    ledger.record(
        s,
        run,
        ctx,
        "research.sources",
        chosen=chosen,
        outcome=result.get("outcome"),
        reason=result.get("reason", ""),
        snippets=[
            {
                "url": r.get("url"),
                "title": r.get("title"),
                "snippet": r.get("snippet"),
                "is_evidence": False,
            }
            for r in result.get("results", [])
            if isinstance(r, dict)
        ],
    )


def _policy_of(action: ActionRow) -> dict[str, Any]:
    args = decode_result(action.args)
    policy: dict[str, Any] = args.get("policy", {}) if isinstance(args, dict) else {}
    return policy


def _skip(action: ActionRow, why: str, ctx: ledger.Context) -> None:
    action.status = ActionState.SKIPPED
    action.error = why  # "code: message"
    action.finished_at = ctx.now


# ---------------------------------------------------------------------------------- report


NO_EVIDENCE = "no_evidence"


def report(
    s: Session, run: RunRow, actions: Sequence[ActionRow], ctx: ledger.Context
) -> str | None:
    """Fan in: one evidence report from the units' receipts, written to the journal; the
    run's stop reason says why when the report holds no evidence."""
    s.flush()  # the last receipt may still be pending in this batch's session
    built = research_report.build(s, run, actions)
    ledger.record(s, run, ctx, "research.report", **built)
    if built.get("evidence"):
        return None
    return no_evidence_reason(run, _search_result(s, actions), built)


def _search_result(s: Session, actions: Sequence[ActionRow]) -> dict[str, Any] | None:
    for action in actions:
        if action.kind == "browser.search" and action.receipt_id:
            row = run_queries.receipt(s, action.receipt_id)
            if row is not None:
                result = journal.read_receipt(row).get("result")
                return result if isinstance(result, dict) else None
    return None


def no_evidence_reason(run: RunRow, search: dict[str, Any] | None, built: dict[str, Any]) -> str:
    """`no_evidence: ...`: what was searched, how many results, why none counted."""
    parts = []
    if search is not None:
        where = search.get("search_url") or search.get("url") or "the search page"
        how = search.get("extractor", "")
        line = f"searched {run.spec.get('query', '')!r} on {where}" + (f" ({how})" if how else "")
        found = len(search.get("results") or [])
        line += f": {found} result{'s' if found != 1 else ''}"
        if search.get("outcome") not in (None, "ok"):
            line += f", the search page was {search.get('outcome')}"
        if not found and search.get("reason"):
            line += f" ({search['reason']})"
        parts.append(line)
    sources = [x for x in built.get("sources") or [] if isinstance(x, dict)]
    failures = [x for x in built.get("failures") or [] if isinstance(x, dict)]
    skipped = built.get("skipped") or []
    if sources:
        parts.append(f"{len(sources)} page(s) read had no passage that matches the query")
    if failures:
        kinds: dict[str, int] = {}
        for f in failures:
            kinds[str(f.get("outcome"))] = kinds.get(str(f.get("outcome")), 0) + 1
        listed = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        first = str(failures[0].get("reason", ""))[:240]  # room for the fix a reason names
        parts.append(f"{len(failures)} page(s) not read ({listed}; first: {first})")
    if skipped:
        parts.append(f"{len(skipped)} source(s) skipped")
    if not sources and not failures and search is None:
        parts.append("no source was read")
    return f"{NO_EVIDENCE}: " + "; ".join(parts)


# --------------------------------------------------------------------------------- routing


def route_unit(
    s: Session, run: RunRow, action: ActionRow, ctx: ledger.Context
) -> tuple[str | None, str, str]:
    """Try the run's routes in order; say what each lacked when none can take the unit."""
    if action.kind == APP_KIND:
        return _route_app(s, run, action, ctx)
    if action.kind == "browser.fetch":
        limits, progress = run.spec.get("limits", {}), run.spec.get("progress", {})
        max_bytes = limits.get("max_bytes", DEFAULT_MAX_BYTES)
        if progress.get("bytes", 0) >= max_bytes:
            why = f"max_bytes: the run has read {progress['bytes']} of its {max_bytes} bytes"
            _skip(action, why, ctx)
            url = research_report.arg(action, "url")
            ledger.record(s, run, ctx, "research.skipped", work_unit=action.id, url=url, reason=why)
            return None, ActionState.SKIPPED, why
    notes = []
    routes = [r for r in run.spec.get("routes") or [HEADLESS | {"name": "headless"}]]
    for route in (r for r in routes if not r.get("app")):
        if route.get("needs_approval"):
            worker, code, detail = fallback.route(s, run, action, route, ctx)
            if worker is not None or code == ActionState.SKIPPED:
                return worker, code, detail
            notes.append(f"route {route['name']}: {detail}")
            return None, code, "; ".join(notes)
        wanted = {"capability": route["capability"]}
        if route.get("labels"):
            wanted["labels"] = route["labels"]
        action.route = wanted  # the ledger records the route each attempt took
        worker, _, detail = ledger.choose_worker(s, action, ctx)
        if worker is not None:
            return worker, "", ""
        notes.append(f"route {route['name']}: {detail}")
    return None, "no_eligible_worker", "; ".join(notes) or "the routing policy has no browser route"


def _route_app(
    s: Session, run: RunRow, action: ActionRow, ctx: ledger.Context
) -> tuple[str | None, str, str]:
    """The least busy worker here that offers the app; with none online, skip the branch."""
    args = decode_result(action.args)
    app = str(args.get("app", ""))
    action.timeout_seconds = float(args.get("timeout") or APP_TIMEOUT) + APP_GRACE
    offering = [
        v
        for v in ctx.fleet(s)
        if app in v.advertisement.research_apps and v.online and v.state == "active"
    ]
    if not offering:
        why = f"no worker offers app {app}"
        _skip(action, f"app_absent: {why}", ctx)
        ledger.record(
            s,
            run,
            ctx,
            "research.branch",
            branch=action.id,
            route=f"app:{app}",
            outcome="failed",
            code="app_absent",
            message=why,
            sources=0,
            worker="",
        )
        return None, ActionState.SKIPPED, why
    busy = ctx.busy(s)
    for view in sorted(offering, key=lambda v: (busy.get(v.id, 0), v.id)):
        action.route = {"worker": view.id, "app": app}
        worker, _, _ = ledger.choose_worker(s, action, ctx)
        if worker is not None:
            return worker, "", ""
    return (
        None,
        "no_eligible_worker",
        f"route {args.get('route', app)}: every worker offering app {app} is busy here",
    )


# A research run's kind (given to the dispatcher at wiring).
RESEARCH_RUNS = RunKind(on_receipt=on_receipt, route=route_unit, on_completion=report)
