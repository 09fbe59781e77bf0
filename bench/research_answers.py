"""Research answers: do the excerpts of a page hold the answer to a question about it?

Corpus: Flask's documentation as Debian ships it (`python-flask-doc`: Sphinx HTML nobody on
the team wrote), served on loopback. Questions: bench/research_answers.json, each with the
page that answers it and the phrase that is the answer.

Figures, for each method, over the same pages fetched in the same run:
- share of questions whose top 3 excerpts contain the answer phrase (case and spacing aside);
- MRR: the mean of 1/rank of the first excerpt that holds it (0 if none in the top 10).

Methods:
- `passages`: the report's method on the page's HTML (`shared.passages.from_result` with the
  HTML a fetch can return, then `shared.relevance.rank`) — what the coordinator does;
- `passages_from_text`: the same ranking on the extracted text a fetch returns today
  (trafilatura, as the worker calls it), cut into passages by `blocks_from_text`;
- `lines` (baseline): the earlier method, `research_report.line_excerpts` on that text;
- `passages_across`: the report's best passages across all the questions' pages together
  (as a search run over several sources would rank them), top 3.

The corpus is installed on demand with apt-get (root only); without it the script says so.

Usage: python -m bench.research_answers [--quick] [--out bench/results/research_answers.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trafilatura

from coordinator.runs.research.report import line_excerpts
from shared import passages, relevance

ROOT = Path(__file__).resolve().parent.parent

QUESTIONS = ROOT / "bench" / "research_answers.json"
QUICK_QUESTIONS = 12
MRR_DEPTH = 10
_SPACE = re.compile(r"\s+")


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(QUESTIONS.read_text())
    return doc


def corpus_root(install: bool = True) -> Path:
    """The corpus's directory, installing its Debian package first if it is absent."""
    corpus = load()["corpus"]
    root = Path(corpus["root"])
    if root.is_dir():
        return root
    if not install or os.geteuid() != 0:
        raise RuntimeError(
            f"the corpus {root} is absent: apt-get install {corpus['package']} (as root)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", corpus["package"]],
    ):
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    if not root.is_dir():
        raise RuntimeError(f"{corpus['package']} installed, but {root} is still absent")
    return root


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def served(root: Path) -> Iterator[str]:
    """The corpus on an HTTP server on 127.0.0.1; yields its base URL."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        body: bytes = resp.read()
    return body.decode("utf-8", "replace")


def extracted_text(html: str, url: str) -> str:
    """The text a worker's fetch returns today (the worker's own trafilatura call)."""
    return trafilatura.extract(html, url=url, include_comments=False, favor_recall=True) or ""


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def first_hit(found: list[str], answer: str) -> int | None:
    """1-based rank of the first excerpt that holds the answer phrase."""
    want = _norm(answer)
    return next((i for i, text in enumerate(found, 1) if want in _norm(text)), None)


Method = Callable[[dict[str, Any], str], list[str]]


def _passages(blocks: list[passages.Block], question: str) -> list[str]:
    [found] = relevance.rank([blocks], question, per_source=MRR_DEPTH)
    return [p.text for p in found]


def evaluate(questions: list[dict[str, Any]], base: str) -> dict[str, Any]:
    pages: dict[str, dict[str, Any]] = {}
    for q in questions:
        if q["path"] not in pages:
            url = base + q["path"]
            html = fetch(url)
            text = extracted_text(html, url)
            pages[q["path"]] = {
                "url": url,
                "html_blocks": passages.from_result({"html": html, "text": text}),
                "text_blocks": passages.from_result({"text": text}),
                "text": text,
            }
    paths = list(pages)
    all_blocks = [pages[p]["html_blocks"] for p in paths]
    methods: dict[str, Method] = {
        "passages": lambda page, q: _passages(page["html_blocks"], q),
        "passages_from_text": lambda page, q: _passages(page["text_blocks"], q),
        "lines": lambda page, q: line_excerpts(page["text"], q, limit=MRR_DEPTH),
    }
    results: dict[str, Any] = {}
    for name, method in methods.items():
        results[name] = _score(questions, lambda q, m=method: m(pages[q["path"]], q["question"]))

    def across(q: dict[str, Any]) -> list[str]:
        ranked = relevance.rank(all_blocks, q["question"], per_source=MRR_DEPTH)
        return [p.text for p in relevance.across(ranked, MRR_DEPTH)]

    results["passages_across"] = _score(questions, across)
    return {"pages": len(pages), "methods": results}


def _score(
    questions: list[dict[str, Any]], method: Callable[[dict[str, Any]], list[str]]
) -> dict[str, Any]:
    started = time.perf_counter()
    ranks = []
    misses = []
    for q in questions:
        rank = first_hit(method(q), q["answer"])
        ranks.append(rank)
        if rank is None or rank > 3:
            misses.append({"question": q["question"], "path": q["path"], "rank": rank})
    n = len(questions)
    return {
        "questions": n,
        "top3": sum(1 for r in ranks if r is not None and r <= 3) / n,
        "top1": sum(1 for r in ranks if r == 1) / n,
        "mrr": sum(1 / r for r in ranks if r is not None) / n,
        "ms_per_question": (time.perf_counter() - started) * 1000 / n,
        "not_in_top3": misses,
    }


def run(quick: bool) -> dict[str, Any]:
    questions = load()["questions"]
    if quick:
        questions = questions[:: max(1, len(questions) // QUICK_QUESTIONS)][:QUICK_QUESTIONS]
    root = corpus_root()
    with served(root) as base:
        found = evaluate(questions, base)
    return {
        "corpus": load()["corpus"] | {"root": str(root)},
        "quick": quick,
        **found,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_QUESTIONS} questions")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    doc = run(args.quick)
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    for name, m in doc["methods"].items():
        print(
            f"{name:<20} top-3 {m['top3']:.0%}  top-1 {m['top1']:.0%}  MRR {m['mrr']:.3f}"
            f"  ({m['questions']} questions, {m['ms_per_question']:.1f} ms each)"
        )


if __name__ == "__main__":
    main()
