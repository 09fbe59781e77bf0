"""A page as passages: its blocks of text, each under its section heading, with a link to it.

`blocks(html)` walks the document the way a reader sees it: paragraphs, list items, table
cells, code blocks, definition terms and descriptions, quotes and captions each become one
`Block`, with whitespace normalised inside it (the source's line wraps inside a paragraph
are not breaks), markup residue removed (a pilcrow "¶" from a permalink, "Permalink to this
headline"), navigation, scripts and forms left out, and repeats dropped. Each block carries
the text of the heading it sits under and the nearest id to jump to.

`blocks_from_text(text)` is the same for pages that arrive as flattened text only (the
extracted main text of a fetch): a line that ends without a sentence's end and is long
enough to be a wrapped line is joined to the next; a short line without one, or a line that
ends with a pilcrow, is taken as a heading.

`sentences(text)` splits a block with pysbd (rule-based, nothing to download), and
`text_link(url, anchor, text)` builds the link that jumps to a passage: the anchor, then a
URL text fragment (`#anchor:~:text=start,end`, percent-encoded as the fragment directive
spec requires, a start and an end for a long passage).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, urldefrag

# lxml and pysbd are imported where a page is read: a coordinator imports this module with its
# research reports at every start, and most starts never build one.

# Elements whose text is not the page's content.
_SKIP = frozenset(
    {
        "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form",
        "button", "select", "option", "textarea", "input", "svg", "canvas", "iframe", "object",
        "head", "title", "meta", "link", "map",
    }
)  # fmt: skip
# Elements that start a new block; their inline content is one passage.
_BLOCK = frozenset(
    {
        "p", "li", "td", "th", "pre", "dd", "dt", "blockquote", "figcaption", "caption",
        "div", "section", "article", "main", "body", "ul", "ol", "dl", "table", "tr", "tbody",
        "thead", "tfoot", "figure", "details", "summary", "address", "center", "fieldset",
        "hr", "html",
    }
)  # fmt: skip
_HEADING = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# Containers read as one passage when short and without nested lists, tables or code.
_WHOLE = frozenset({"li", "dd", "td", "th", "blockquote"})
WHOLE_CHARS = 600
_KIND = {"pre": "code", "td": "cell", "th": "cell", "li": "item", "dt": "term", "dd": "definition"}
# Roles and classes of navigation that is not in a <nav> (Sphinx's sidebar, "skip" links).
_NAV_CLASS = re.compile(
    r"\b(sphinxsidebar|related|headerlink|skip-?link|breadcrumbs?|toc|footer|site-footer)\b"
)
_RESIDUE = re.compile(r"[¶§]|\bPermalink to this (?:headline|heading|definition|section)\b")
_SPACE = re.compile(r"\s+")
_SENTENCE_END = re.compile("[.!?:;\u2026\u3002)\\]\"'\u201d\u2019]$")
_BULLET = re.compile("^(?:[-*\u2022\u00b7\u25aa\u2013]\\s|\\d{1,3}[.)]\\s)")
MIN_WRAPPED_LINE = 40  # characters: a shorter line that ends without punctuation is a heading
MAX_BLOCK_CHARS = 4000


@dataclass(frozen=True)
class Block:
    """One passage of a page: normalised text, the heading it sits under, an id to jump to."""

    text: str
    heading: str = ""
    anchor: str = ""
    kind: str = "text"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Block | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
            return None
        return cls(
            text=normalise(raw["text"]),
            heading=normalise(str(raw.get("heading") or "")),
            anchor=str(raw.get("anchor") or ""),
            kind=str(raw.get("kind") or "text"),
        )


def normalise(text: str) -> str:
    """One line of text: markup residue gone, runs of whitespace one space."""
    return _SPACE.sub(" ", _RESIDUE.sub(" ", text)).strip()


class _Walk:
    def __init__(self) -> None:
        self.out: list[Block] = []
        self.buf: list[str] = []
        self.heading = ""
        self.anchor = ""
        self.block_anchor = ""
        self.kind = "text"
        # A definition is read under its term: (term text, term id) of the last <dt>, and
        # the one in force inside the <dd> being walked.
        self.last_term = ("", "")
        self.term = ("", "")

    def flush(self) -> None:
        text = normalise("".join(self.buf))
        self.buf = []
        if not text:
            return
        anchor = self.block_anchor or self.term[1] or self.anchor
        heading = self.heading
        if self.term[0]:
            heading = f"{heading} \u203a {self.term[0]}" if heading else self.term[0]
        if self.kind == "term":
            self.last_term = (text[:200], self.block_anchor)
        self.out.append(Block(text[:MAX_BLOCK_CHARS], heading, anchor, self.kind))

    def visit(self, el: Any) -> None:
        tag = el.tag.lower() if isinstance(el.tag, str) else ""
        if not tag:  # a comment or processing instruction: only its tail is text
            self.tail(el)
            return
        cls = f"{el.get('class') or ''} {el.get('role') or ''}"
        if (
            tag in _SKIP
            or el.get("hidden") is not None
            or el.get("aria-hidden") == "true"
            or "navigation" in cls
            or _NAV_CLASS.search(cls)
        ):
            self.tail(el)
            return
        if tag in _HEADING:
            self.flush()
            self.heading = normalise(el.text_content())
            self.last_term = ("", "")
            self.anchor = el.get("id") or _section_id(el) or self.anchor
            self.tail(el)
            return
        if tag == "br":
            self.buf.append(" ")
            self.tail(el)
            return
        if tag in _WHOLE and _short_leaf(el):
            # A short item, cell or definition reads as one passage even when its parts are
            # paragraphs ("Default: False" belongs with what it is the default of).
            self.flush()
            saved_kind, saved_anchor, saved_term = self.kind, self.block_anchor, self.term
            if tag == "dd":
                self.term = self.last_term
            self.kind = _KIND.get(tag, "text")
            self.block_anchor = el.get("id") or self.block_anchor
            self.buf.append("".join(_texts(el)))
            self.flush()
            self.kind, self.block_anchor, self.term = saved_kind, saved_anchor, saved_term
            self.tail(el)
            return
        if tag in _BLOCK:
            self.flush()
            saved = (self.kind, self.block_anchor, self.term)
            if tag == "dd":
                self.term = self.last_term
            if tag in _KIND:
                self.kind = _KIND[tag]
                self.block_anchor = el.get("id") or self.block_anchor
            if tag == "section" and el.get("id"):
                self.anchor = el.get("id")
            self.buf.append(el.text or "")
            for child in el:
                self.visit(child)
            self.flush()
            self.kind, self.block_anchor, self.term = saved
            self.tail(el)
            return
        # Inline: its text joins the block it is in; a block nested inside still splits.
        if el.get("id") and not self.block_anchor and not "".join(self.buf).strip():
            self.block_anchor = el.get("id")
        self.buf.append(el.text or "")
        for child in el:
            self.visit(child)
        self.tail(el)

    def tail(self, el: Any) -> None:
        if el.tail:
            self.buf.append(el.tail)


def _texts(el: Any) -> Iterator[str]:
    """The text of an element and its descendants, less what the walk skips."""
    if el.text:
        yield el.text
    for child in el:
        tag = child.tag.lower() if isinstance(child.tag, str) else ""
        cls = f"{child.get('class') or ''} {child.get('role') or ''}"
        if tag and tag not in _SKIP and not _NAV_CLASS.search(cls):
            spaced = tag in _BLOCK or tag in _HEADING or tag == "br"
            if spaced:
                yield " "
            yield from _texts(child)
            if spaced:
                yield " "
        if child.tail:
            yield child.tail


def _short_leaf(el: Any) -> bool:
    if any(True for _ in el.iter("pre", "table", "ul", "ol", "dl", *_HEADING)):
        return False
    return len(_SPACE.sub(" ", el.text_content())) <= WHOLE_CHARS


def _section_id(heading: Any) -> str:
    parent = heading.getparent()
    return str(parent.get("id") or "") if parent is not None else ""


def blocks(html: str) -> list[Block]:
    """The passages of an HTML page, in reading order, without repeats."""
    if not html.strip():
        return []
    import lxml.etree
    import lxml.html

    try:
        root = lxml.html.document_fromstring(html)
    except (lxml.etree.ParserError, ValueError):
        return []
    walk = _Walk()
    walk.visit(root)
    walk.flush()
    found = walk.out
    if not found:  # a page with no text (an image, an empty body)
        return []
    # A term followed by its definition is that definition's heading, not a passage itself.
    kept = [
        b
        for b, after in zip(found, [*found[1:], None], strict=True)
        if not (b.kind == "term" and after is not None and after.kind == "definition")
    ]
    return _unique(kept)


def blocks_from_text(text: str) -> list[Block]:
    """The passages of flattened page text (one line per paragraph, or wrapped lines)."""
    out: list[Block] = []
    heading = ""
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append(Block(normalise(" ".join(para))[:MAX_BLOCK_CHARS], heading))
            para.clear()

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            flush()
            continue
        bullet = _BULLET.match(line) is not None
        if line.endswith("¶") or (
            len(line) < MIN_WRAPPED_LINE
            and not _SENTENCE_END.search(line)
            and not para
            and not bullet
        ):
            flush()
            heading = normalise(line)
            continue
        if bullet:
            flush()
        para.append(line)
        if _SENTENCE_END.search(line) or len(line) < MIN_WRAPPED_LINE:
            flush()
    flush()
    return _unique(out)


def _unique(found: Iterable[Block]) -> list[Block]:
    seen: set[tuple[str, str]] = set()
    out = []
    for block in found:
        key = (block.heading.casefold(), block.text.casefold())
        if key not in seen:
            seen.add(key)
            out.append(block)
    return out


@functools.cache
def _segmenter() -> Any:
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


def sentences(text: str) -> list[str]:
    """The sentences of one block of normalised text."""
    if len(text) < 40 or not re.search(r"[.!?]\s", text):
        return [text] if text else []
    return [s.strip() for s in _segmenter().segment(text) if s.strip()]


def _fragment_part(text: str) -> str:
    # The directive's own delimiters (",", "-", "&") must be encoded in its terms.
    return quote(text, safe="").replace("-", "%2D")


FRAGMENT_WORDS = 5  # words of a long passage's start and end in its text fragment


def text_fragment(text: str) -> str:
    """`:~:text=...` for a passage: the whole of a short one, a start and an end otherwise."""
    words = text.rstrip("…").split()
    if not words:
        return ""
    if len(words) <= 2 * FRAGMENT_WORDS:
        return ":~:text=" + _fragment_part(" ".join(words))
    start = " ".join(words[:FRAGMENT_WORDS])
    end = " ".join(words[-FRAGMENT_WORDS:])
    return f":~:text={_fragment_part(start)},{_fragment_part(end)}"


def text_link(url: str, anchor: str, text: str) -> str:
    """A URL that opens the page at the passage: its anchor, then the text fragment."""
    base, _ = urldefrag(url)
    return f"{base}#{quote(anchor, safe='-._~')}{text_fragment(text)}"


def from_result(result: dict[str, Any]) -> list[Block]:
    """The passages of a `browser.fetch` result: its `blocks` if the worker sent them, else
    its `html`, else its extracted `text`."""
    given = list(load(result.get("blocks")))
    if given:
        return _unique(given)
    html = result.get("html")
    if isinstance(html, str) and html.strip():
        return blocks(html)
    text = result.get("text")
    return blocks_from_text(text) if isinstance(text, str) else []


def dump(found: Iterable[Block]) -> list[dict[str, str]]:
    """Blocks as a worker's result carries them."""
    return [b.to_dict() for b in found]


def load(raw: Any) -> Iterator[Block]:
    """Blocks from a worker's result (anything malformed is left out)."""
    if isinstance(raw, list):
        for item in raw:
            block = Block.from_dict(item)
            if block is not None and block.text:
                yield block


__all__ = [
    "Block",
    "blocks",
    "blocks_from_text",
    "dump",
    "from_result",
    "load",
    "normalise",
    "sentences",
    "text_fragment",
    "text_link",
]
