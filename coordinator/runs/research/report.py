"""The evidence report of a research run: sources by route, totals, and where routes disagree.

Every source carries the route that found it: `headless` (a browser fetched the page and the
excerpts are its passages that answer the query best) or `app:NAME` (an external research app
named it; the excerpts are the app's). Search snippets never count as evidence; failed,
refused, binary, challenged and skipped sources are listed apart with their reason.

A headless source's page is cut into passages by its blocks (`shared.passages`: from the
block list or HTML the fetch returned, else from its extracted text) and the passages of all
sources of the run are ranked together (`shared.relevance`: BM25 with stemming, proximity, the
section heading counted with its passage). Each source lists its best `passages` (text,
heading, score, and a link that opens the page at the passage) and, as before, their texts as
`excerpts`; the report's `passages` are the best of all sources together, each naming its URL
and receipt. `totals.sources` counts what `sources` lists, `evidence` those with a passage.

Where a thorough run has both an app route and the headless route, `disagreements` lists,
with the URL as the key (scheme and host lower-cased, fragment and trailing "/" dropped):

- `only_one_route`: a URL that is evidence in one route and not in the other (`detail`
  says what the other route saw of it, if it fetched it);
- `excerpt_not_in_page`: an app's excerpt whose words do not occur, in order, in the text
  of the page the headless route read at that URL.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy.orm import Session

from coordinator.store import journal, runs as run_queries
from coordinator.store.models import ActionRow, RunRow
from shared import passages as page_passages, relevance
from shared.receipts import decode_result
from shared.states import ActionState

APP_KIND = "app.research"
HEADLESS_ROUTE = "headless"
EXCERPTS_PER_SOURCE = relevance.PER_SOURCE
EXCERPT_CHARS = 300  # of the line method (`line_excerpts`)
TOP_PASSAGES = 10  # the report's best passages across sources
MAX_DISAGREEMENTS = 50
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[\w'-]{3,}", re.UNICODE)
_ANY_WORD = re.compile(r"\w+", re.UNICODE)

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


def line_excerpts(text: str, query: str, limit: int = EXCERPTS_PER_SOURCE) -> list[str]:
    """The earlier method, kept as the answer benchmark's baseline: the lines (or sentences)
    of `text` that share the most exact words with the query.

    A line must share at least two of the query's content words (one for a query of one
    or two): a shared "light" alone does not make a page about lighthouses evidence.
    """
    terms = {w.lower() for w in _WORD.findall(query)} - _STOP
    need = 1 if len(terms) <= 2 else 2
    scored = []
    for i, sentence in enumerate(s.strip() for s in _SENTENCE.split(text)):
        hits = len(terms & {w.lower() for w in _WORD.findall(sentence)})
        if hits >= need:
            scored.append((-hits, i, sentence[:EXCERPT_CHARS]))
    return [s for _, _, s in sorted(scored)[:limit]]


def app_route(action: ActionRow) -> str:
    args = decode_result(action.args)
    return f"app:{args.get('app', '') if isinstance(args, dict) else ''}"


def arg(action: ActionRow, key: str) -> Any:
    args = decode_result(action.args)
    return args.get(key) if isinstance(args, dict) else None


def build(s: Session, run: RunRow, actions: Sequence[ActionRow]) -> dict[str, Any]:
    """Fan in: the report of every unit's receipt (or skip reason) in the run."""
    query = run.spec.get("query", "")
    headless: list[dict[str, Any]] = []
    apps: dict[str, list[dict[str, Any]]] = {}
    failures: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = list(run.spec.get("skipped", []))
    branches: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []
    texts: dict[str, str] = {}
    tried: dict[str, str] = {}  # url -> what the headless route saw there
    pages_blocks: list[list[page_passages.Block]] = []  # of each `headless` source
    by_status: Counter[str] = Counter()
    pages = searches = read = 0
    headless_units = headless_skipped = 0
    for action in actions:
        if action.kind.startswith("browser."):
            headless_units += 1
        if action.status == ActionState.SKIPPED:
            code, _, message = action.error.partition(": ")
            if action.kind == APP_KIND:
                branches.append(_branch(app_route(action), action, code, message))
            elif action.kind == "browser.fetch" and code != "not_needed":
                skipped.append({"url": arg(action, "url"), "reason": action.error})
            else:
                headless_skipped += 1
            continue
        row = run_queries.receipt(s, action.receipt_id) if action.receipt_id else None
        if row is None:
            continue
        result = journal.read_receipt(row).get("result") or {}
        entry: dict[str, Any] = {"receipt": row.id, "work_unit": action.id, "worker": row.worker_id}
        if action.kind == APP_KIND:
            route = app_route(action)
            ok = result.get("outcome") == "ok"
            branches.append(
                _branch(
                    route, action, "ok" if ok else result.get("code", ""), result.get("message")
                )
            )
            if ok:
                apps[route] = [_app_source(src, route, entry) for src in result.get("sources", [])]
                if result.get("answer"):
                    answers.append({"route": route, "answer": result["answer"], "evidence": False})
            continue
        read += int(result.get("bytes") or 0)
        if action.kind == "browser.search":
            searches += 1
            continue
        if action.kind != "browser.fetch":
            continue
        pages += 1
        outcome = result.get("outcome") or "unknown"
        by_status[outcome] += 1
        entry |= {
            "url": result.get("url"),
            "final_url": result.get("final_url"),
            "title": result.get("title", ""),
            "status": result.get("status"),
            "outcome": outcome,
            "route": HEADLESS_ROUTE,
        }
        urls = {_key(result.get("url")), _key(result.get("final_url"))}
        if outcome == "ok":
            headless.append(entry)
            pages_blocks.append(page_passages.from_result(result))
            for u in urls:
                texts[u] = result.get("text", "")
                tried[u] = "its page has no sentence that matches the query"
        else:
            failures.append(
                {
                    **entry,
                    "reason": result.get("reason", ""),
                    "content_type": result.get("content_type", ""),
                    "bytes": result.get("bytes", 0),
                }
            )
            for u in urls:
                tried[u] = f"{outcome}: {result.get('reason', '')}".rstrip(": ")
    if headless_units:
        ran = headless_units > headless_skipped
        branches.append(
            {
                "route": HEADLESS_ROUTE,
                "outcome": "ok" if ran else "skipped",
                "code": "" if ran else "not_needed",
                "message": "" if ran else "an app route answered first",
                "work_units": headless_units - headless_skipped,
            }
        )
    by_status["skipped"] = len(skipped)
    ranked = relevance.rank(pages_blocks, query)
    for src, found in zip(headless, ranked, strict=True):
        shown = [_passage(src, p) for p in found]
        src |= {"excerpts": [p["text"] for p in shown], "passages": shown, "evidence": bool(shown)}
    best = [
        {
            "url": headless[p.source]["final_url"] or headless[p.source]["url"],
            "title": headless[p.source]["title"],
            "receipt": headless[p.source]["receipt"],
            **_passage(headless[p.source], p),
        }
        for p in relevance.across(ranked, TOP_PASSAGES)
    ]
    sources = headless + [src for found in apps.values() for src in found]
    limits = run.spec.get("limits", {})
    return {
        "query": query,
        "mode": run.spec.get("mode", "headless"),
        "routes": branches,
        "sources": sources,
        "failures": failures,
        "skipped": skipped,
        "answers": answers,
        "evidence": sum(1 for x in sources if x["evidence"]),
        "passages": best,
        "disagreements": (
            _disagreements(apps, headless, texts, tried)
            if run.spec.get("mode") == "thorough" and pages
            else []
        ),
        "totals": {
            "sources": len(sources),
            "sources_with_evidence": sum(1 for x in sources if x["evidence"]),
            "failures": len(failures),
            "skipped": len(skipped),
            "pages_fetched": pages,
            "searches": searches,
            "bytes_read": read,
            "sources_by_status": dict(sorted(by_status.items())),
            "sources_by_route": dict(Counter(src["route"] for src in sources)),
        },
        "limits": limits,
        "limit_reached": sorted({x["reason"] for x in skipped}),
    }


def _passage(src: dict[str, Any], p: relevance.Passage) -> dict[str, Any]:
    url = src["final_url"] or src["url"] or ""
    return {
        "text": p.text,
        "heading": p.heading,
        "score": p.score,
        "link": page_passages.text_link(url, p.anchor, p.text) if url else "",
    }


def _branch(route: str, action: ActionRow, code: str, message: Any) -> dict[str, Any]:
    outcome = "ok" if code == "ok" else "skipped" if code == "not_needed" else "failed"
    return {
        "route": route,
        "name": arg(action, "route") or route,
        "work_unit": action.id,
        "worker": action.worker_id,
        "outcome": outcome,
        "code": "" if code == "ok" else code,
        "message": str(message or ""),
    }


def _app_source(src: dict[str, Any], route: str, entry: dict[str, Any]) -> dict[str, Any]:
    found = [str(e) for e in src.get("excerpts", [])][:EXCERPTS_PER_SOURCE]
    return {
        **entry,
        "url": src.get("url"),
        "final_url": src.get("url"),
        "title": src.get("title", ""),
        "status": 0,
        "outcome": "ok",
        "route": route,
        "excerpts": found,
        "passages": [{"text": e, "heading": "", "score": None, "link": ""} for e in found],
        "evidence": bool(found),
    }


def _key(url: Any) -> str:
    """A URL as routes are compared by it: case of scheme and host, fragment and end "/" aside."""
    if not isinstance(url, str) or not url:
        return ""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def _words(text: str) -> str:
    return " " + " ".join(_ANY_WORD.findall(text.lower())) + " "


def _disagreements(
    apps: dict[str, list[dict[str, Any]]],
    headless: list[dict[str, Any]],
    texts: dict[str, str],
    tried: dict[str, str],
) -> list[dict[str, Any]]:
    found_headless = {
        _key(u): src for src in headless if src["evidence"] for u in (src["url"], src["final_url"])
    }
    out: list[dict[str, Any]] = []
    for route, sources in apps.items():
        found_app = {_key(src["url"]): src for src in sources if src["evidence"]}
        for key, src in found_app.items():
            if key not in found_headless:
                out.append(
                    {
                        "kind": "only_one_route",
                        "url": src["url"],
                        "found_by": route,
                        "not_by": HEADLESS_ROUTE,
                        "detail": tried.get(key, "the headless route did not fetch it"),
                    }
                )
                continue
            page = _words(texts.get(key, ""))
            out += [
                {
                    "kind": "excerpt_not_in_page",
                    "url": src["url"],
                    "route": route,
                    "excerpt": excerpt,
                    "detail": "the page the headless route read does not say this",
                }
                for excerpt in src["excerpts"]
                if _words(excerpt).strip() and _words(excerpt) not in page
            ]
        out += [
            {
                "kind": "only_one_route",
                "url": src["url"],
                "found_by": HEADLESS_ROUTE,
                "not_by": route,
                "detail": f"{route} did not name it",
            }
            for src in headless
            if src["evidence"] and not {_key(src["url"]), _key(src["final_url"])} & found_app.keys()
        ]
    return out[:MAX_DISAGREEMENTS]
