"""Research runs: search (unless sources are given), fetch sources in parallel, report.

A research run is an ordinary run of kind "research": a `browser.search` unit first, then
one `browser.fetch` work unit per chosen source, all in one stage so that they spread over
the eligible headless workers; when every unit has its receipt, the evidence report is
written to the journal. Snippets from the search page are kept apart and never count as
evidence; failed, refused, binary and challenged sources are listed with their reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from coordinator import journal, ledger
from coordinator.runs import Plan, PlannedAction
from coordinator.store import runs as run_queries
from coordinator.store.models import ActionRow, RunRow
from shared.errors import InvalidArgumentError
from shared.receipts import decode_result

MAX_SOURCES = 20
EXCERPTS_PER_SOURCE = 3
EXCERPT_CHARS = 300
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[\w'-]{3,}", re.UNICODE)
HEADLESS = {"capability": "headless"}


@dataclass(frozen=True)
class ResearchRequest:
    query: str
    urls: tuple[str, ...] = ()
    search_url: str = ""  # a URL template with {query}; empty: the workers' default profile
    max_sources: int = 5


def research_plan(request: ResearchRequest, routes: list[dict[str, Any]] | None = None) -> Plan:
    """The run that answers `request` (fetch units are added after the search, if any)."""
    query = request.query.strip()
    if not query or len(query) > 500:
        raise InvalidArgumentError("query: 1-500 characters")
    if not 1 <= request.max_sources <= MAX_SOURCES:
        raise InvalidArgumentError(f"max_sources: between 1 and {MAX_SOURCES}")
    if request.search_url and "{query}" not in request.search_url:
        raise InvalidArgumentError(
            "search_url: a template needs {query}, e.g. https://x/?q={query}"
        )
    spec = {
        "query": query,
        "max_sources": request.max_sources,
        "search_url": request.search_url,
        "routes": routes or [],
    }
    if request.urls:
        actions = tuple(_fetch(url) for url in dict.fromkeys(request.urls))
    else:
        args: dict[str, Any] = {"query": query, "max_results": request.max_sources * 2}
        if request.search_url:
            args.update(template=request.search_url, profile="local")
        actions = (PlannedAction("browser.search", args, True, HEADLESS, f"search: {query}"),)
    n = len(actions)
    return Plan(
        actions,
        title=f"research: {query}",
        kind="research",
        spec=spec,
        stages=(0,) * n,
        max_actions=max(3 * (request.max_sources + 1), n + 10),
    )


def _fetch(url: str) -> PlannedAction:
    return PlannedAction("browser.fetch", {"url": url}, True, HEADLESS, f"fetch: {url}")


def on_receipt(
    s: Session, run: RunRow, action: ActionRow, result: Any, ctx: ledger.Context
) -> None:
    """After the search: fan the chosen sources out as fetch work units of the next stage."""
    if action.kind != "browser.search" or not isinstance(result, dict):
        return
    urls = list(dict.fromkeys(r["url"] for r in result.get("results", []) if r.get("url")))
    chosen = urls[: run.spec.get("max_sources", 5)]
    policy = _policy_of(action)  # the search ran under the coordinator's policy; so do these
    for offset, url in enumerate(chosen):
        args = {"url": url, "policy": policy}
        s.add(
            ledger.new_action(
                run.id,
                run.actions_total + offset,
                action.stage + 1,
                "browser.fetch",
                args,
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
        ],
    )


def _policy_of(action: ActionRow) -> dict[str, Any]:
    args = decode_result(action.args)
    policy: dict[str, Any] = args.get("policy", {}) if isinstance(args, dict) else {}
    return policy


_STOP = frozenset(
    {
        "the",
        "and",
        "for",
        "are",
        "was",
        "were",
        "with",
        "that",
        "this",
        "from",
        "what",
        "when",
        "where",
        "which",
        "who",
        "how",
        "why",
        "not",
        "you",
        "your",
        "can",
        "has",
        "have",
        "had",
        "but",
        "all",
        "any",
        "its",
        "into",
        "about",
        "over",
        "out",
        "more",
        "one",
    }
)


def excerpts(text: str, query: str) -> list[str]:
    """The sentences of `text` that mention the query's words, most words first.

    A sentence must share at least two of the query's content words (one for a query of one
    or two): a shared "light" alone does not make a page about lighthouses evidence.
    """
    terms = {w.lower() for w in _WORD.findall(query)} - _STOP
    need = 1 if len(terms) <= 2 else 2
    scored = []
    for i, sentence in enumerate(s.strip() for s in _SENTENCE.split(text)):
        hits = len(terms & {w.lower() for w in _WORD.findall(sentence)})
        if hits >= need:
            scored.append((-hits, i, sentence[:EXCERPT_CHARS]))
    return [s for _, _, s in sorted(scored)[:EXCERPTS_PER_SOURCE]]


def report(s: Session, run: RunRow, actions: Sequence[ActionRow], ctx: ledger.Context) -> None:
    """Fan in: one evidence report from the fetch receipts, written to the journal."""
    query = run.spec.get("query", "")
    s.flush()  # the last receipt may still be pending in this batch's session
    sources, failures = [], []
    for action in actions:
        if action.kind != "browser.fetch":
            continue
        row = run_queries.receipt(s, action.receipt_id)
        if row is None:
            continue
        result = journal.read_receipt(row).get("result") or {}
        entry = {
            "url": result.get("url"),
            "final_url": result.get("final_url"),
            "title": result.get("title", ""),
            "status": result.get("status"),
            "outcome": result.get("outcome"),
            "receipt": row.id,
            "work_unit": action.id,
            "worker": row.worker_id,
        }
        if result.get("outcome") == "ok":
            found = excerpts(result.get("text", ""), query)
            sources.append({**entry, "excerpts": found, "evidence": bool(found)})
        else:
            failures.append(
                {
                    **entry,
                    "reason": result.get("reason", ""),
                    "content_type": result.get("content_type", ""),
                    "bytes": result.get("bytes", 0),
                }
            )
    ledger.record(
        s,
        run,
        ctx,
        "research.report",
        query=query,
        sources=sources,
        failures=failures,
        evidence=sum(1 for x in sources if x["evidence"]),
    )


def route_unit(
    s: Session, run: RunRow, action: ActionRow, ctx: ledger.Context
) -> tuple[str | None, str, str]:
    """Try the run's routes in order; say what each lacked when none can take the unit."""
    notes = []
    for route in run.spec.get("routes") or [HEADLESS | {"name": "headless"}]:
        if route.get("needs_approval"):
            notes.append(
                f"route {route['name']}: {route['capability']} research needs an approved"
                " desktop scope, which this coordinator cannot grant yet"
            )
            return None, ledger.NEEDS_APPROVAL, "; ".join(notes)
        wanted = {"capability": route["capability"]}
        if route.get("labels"):
            wanted["labels"] = route["labels"]
        action.route = wanted  # the ledger records the route each attempt took
        worker, _, detail = ledger.choose_worker(s, action, ctx)
        if worker is not None:
            return worker, "", ""
        notes.append(f"route {route['name']}: {detail}")
    return None, "no_eligible_worker", "; ".join(notes)


ledger.RECEIPT_HOOKS["research"] = on_receipt
ledger.ROUTE_HOOKS["research"] = route_unit
ledger.COMPLETION_HOOKS["research"] = report
