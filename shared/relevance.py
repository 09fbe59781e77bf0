"""Which passages answer a query: BM25 over passages, with stemming and proximity.

Each passage (a `Block` of `shared.passages`) is a document; its section heading is counted
with it at half weight, so a paragraph under "Timeouts" is about timeouts even if it says
"it". Words are lower-cased, split at identifier boundaries (`SECRET_KEY`, `TimeoutError`
also give `secret`, `key`, `timeout`, `error`) and stemmed with the Snowball English stemmer
("times" and "time" are one term); two adjacent query words also count joined ("time out"
finds "timeout"). Document frequencies are counted over every passage of every source of
the run, so a word all pages share weighs little.

A passage's score is its BM25 score (k1 1.2, b 0.75) plus a proximity bonus: the sum of the
idf of the query terms that occur together in the smallest window of its text, times how
tight that window is (matched terms / window length). A passage is a candidate only if it
shares `need` distinct query terms (one for a query of one or two terms, two otherwise) and
scores at least `RELATIVE_CUTOFF` of the best passage of its source: a page that mentions a
word of the query once in passing does not get that mention listed beside its answer.

The excerpt of a long passage is the window of its sentences, at most `EXCERPT_CHARS`
long, around the sentence that matches best.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from shared.passages import Block, sentences

K1 = 1.2
B = 0.75
HEADING_WEIGHT = 0.5
PROXIMITY_WEIGHT = 0.6
RELATIVE_CUTOFF = 0.4
EXCERPT_CHARS = 400
PER_SOURCE = 3

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    out over own same she should so some such than that the their theirs them then there these
    they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours s t don use used using""".split()  # noqa: SIM905
)


@cache
def _stemmer() -> Any:
    # Imported at first use: a coordinator imports this module at every start, and most
    # starts never rank a page.
    import snowballstemmer

    return snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    return str(_stemmer().stemWord(word))


def _parts(word: str) -> list[str]:
    parts = _CAMEL.findall(word)
    return [p.lower() for p in parts] if len(parts) > 1 else []


def tokens(text: str) -> list[tuple[int, str]]:
    """(position, stem) of the content words of `text`, identifier parts at their word's place."""
    out: list[tuple[int, str]] = []
    for pos, match in enumerate(_WORD.finditer(text)):
        word = match.group()
        lower = word.lower()
        if lower not in STOP:
            out.append((pos, stem(lower)))
        out += [(pos, stem(p)) for p in _parts(word) if p not in STOP and p != lower]
    return out


@dataclass(frozen=True)
class Query:
    terms: tuple[str, ...]  # the stems a passage is matched on
    compounds: tuple[str, ...]  # adjacent words joined: optional extra terms
    need: int

    @classmethod
    def parse(cls, query: str) -> Query:
        terms = list(dict.fromkeys(s for _, s in tokens(query)))
        words = [w.lower() for w in _WORD.findall(query)]
        compounds = [stem(stem(a) + b) for a, b in itertools.pairwise(words)]
        compounds = [c for c in dict.fromkeys(compounds) if c not in terms]
        return cls(tuple(terms), tuple(compounds), 1 if len(terms) <= 2 else 2)


@dataclass(frozen=True)
class Passage:
    """A ranked excerpt: where it is (source index, block index), what it says, its score."""

    source: int
    block: int
    text: str
    heading: str
    anchor: str
    score: float


@dataclass
class _Doc:
    source: int
    index: int
    block: Block
    body: list[tuple[int, str]]
    tf: dict[str, float]
    length: float


def rank(
    pages: Sequence[Sequence[Block]], query: str, per_source: int = PER_SOURCE
) -> list[list[Passage]]:
    """The best passages of each page, best first (an empty list for a page without any)."""
    q = Query.parse(query)
    if not q.terms:
        return [[] for _ in pages]
    docs: list[_Doc] = []
    df: Counter[str] = Counter()
    for source, blocks in enumerate(pages):
        for index, block in enumerate(blocks):
            body = tokens(block.text)
            tf: dict[str, float] = dict(Counter(s for _, s in body))
            for _, s in tokens(block.heading):
                tf[s] = tf.get(s, 0.0) + HEADING_WEIGHT
            docs.append(_Doc(source, index, block, body, tf, float(sum(tf.values()))))
            df.update(tf.keys())
    if not docs:
        return [[] for _ in pages]
    n = len(docs)
    avgdl = sum(d.length for d in docs) / n or 1.0
    wanted = [t for t in (*q.terms, *q.compounds) if df[t]]
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in wanted}
    best: list[list[tuple[float, _Doc]]] = [[] for _ in pages]
    for d in docs:
        matched = [t for t in wanted if d.tf.get(t)]
        if len(matched) < q.need:
            continue
        score = 0.0
        for t in matched:
            f = d.tf[t]
            score += idf[t] * f * (K1 + 1) / (f + K1 * (1 - B + B * d.length / avgdl))
        score += PROXIMITY_WEIGHT * _proximity(d.body, idf)
        best[d.source].append((score, d))
    out: list[list[Passage]] = []
    for found in best:
        found.sort(key=lambda x: (-x[0], x[1].index))
        top = found[0][0] if found else 0.0
        chosen: list[Passage] = []
        seen: set[str] = set()
        for score, d in found:
            if len(chosen) >= per_source or score < RELATIVE_CUTOFF * top:
                break
            text = excerpt(d.block.text, idf)
            if text.casefold() in seen:
                continue
            seen.add(text.casefold())
            chosen.append(
                Passage(d.source, d.index, text, d.block.heading, d.block.anchor, round(score, 3))
            )
        out.append(chosen)
    return out


def across(ranked: Sequence[Sequence[Passage]], limit: int) -> list[Passage]:
    """The best passages of all sources together, without the same text twice."""
    seen: set[str] = set()
    out: list[Passage] = []
    for p in sorted((p for found in ranked for p in found), key=lambda p: -p.score):
        if p.text.casefold() not in seen:
            seen.add(p.text.casefold())
            out.append(p)
    return out[:limit]


def _proximity(body: list[tuple[int, str]], idf: dict[str, float]) -> float:
    """The idf of the terms in the tightest window that holds most of them, times tightness."""
    hits = [(pos, s) for pos, s in body if s in idf]
    distinct = {s for _, s in hits}
    if len(distinct) < 2:
        return 0.0
    # The smallest window of positions that holds every distinct matched term.
    need = len(distinct)
    have: Counter[str] = Counter()
    span = math.inf
    lo = 0
    for hi in range(len(hits)):
        have[hits[hi][1]] += 1
        while len(have) == need:
            span = min(span, hits[hi][0] - hits[lo][0] + 1)
            have[hits[lo][1]] -= 1
            if not have[hits[lo][1]]:
                del have[hits[lo][1]]
            lo += 1
    return sum(idf[s] for s in distinct) * min(1.0, need / span)


def _sentence_score(text: str, idf: dict[str, float]) -> float:
    stems = {s for _, s in tokens(text)}
    return sum(w for t, w in idf.items() if t in stems)


def excerpt(text: str, idf: dict[str, float], limit: int = EXCERPT_CHARS) -> str:
    """The part of a passage to show: all of it if short, else its best sentences."""
    if len(text) <= limit:
        return text
    parts = sentences(text)
    scores = [_sentence_score(p, idf) for p in parts]
    at = max(range(len(parts)), key=lambda i: (scores[i], -i))
    if len(parts[at]) > limit:
        return _cut(parts[at], idf, limit)
    lo = hi = at
    size = len(parts[at])
    while True:
        # Grow toward the better neighbour (the next one on a tie: answers follow questions).
        options = [i for i in (hi + 1, lo - 1) if 0 <= i < len(parts)]
        options = [i for i in options if size + 1 + len(parts[i]) <= limit]
        if not options:
            break
        i = max(options, key=lambda i: (scores[i], i))
        size += 1 + len(parts[i])
        lo, hi = min(lo, i), max(hi, i)
    return " ".join(parts[lo : hi + 1])


def _cut(sentence: str, idf: dict[str, float], limit: int) -> str:
    """A window of a very long sentence's words around its query terms, marked as cut."""
    words = sentence.split()
    best, best_at = -1.0, 0
    for start in range(len(words)):
        if start and not {s for _, s in tokens(words[start])} & idf.keys():
            continue
        lo = max(0, start - 3)
        size, hi = 0, lo
        while hi < len(words) and size + len(words[hi]) + 1 <= limit - 2:
            size += len(words[hi]) + 1
            hi += 1
        score = _sentence_score(" ".join(words[lo:hi]), idf)
        if score > best:
            best, best_at = score, lo
    size, hi = 0, best_at
    while hi < len(words) and size + len(words[hi]) + 1 <= limit - 2:
        size += len(words[hi]) + 1
        hi += 1
    text = " ".join(words[best_at:hi])
    return ("…" if best_at else "") + text + ("…" if hi < len(words) else "")


__all__ = ["Passage", "Query", "across", "excerpt", "rank", "stem", "tokens"]
