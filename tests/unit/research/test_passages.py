"""Passages and their ranking: pure functions on small HTML, and a few real corpus pages."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from bench import research_answers
from coordinator.runs.research.report import line_excerpts
from shared import passages, relevance

DOC = """<!doctype html><html><head><title>t</title><script>var x = "timeout";</script></head>
<body><nav><a href="/">Home</a> Timeouts everywhere</nav>
<div class="sphinxsidebar" role="navigation"><p>Timeouts sidebar text</p></div>
<section id="timeouts"><h2>Timeouts<a class="headerlink" href="#timeouts"
 title="Permalink to this headline">¶</a></h2>
<p>The asyncio.TaskGroup class provides a more modern
alternative. If a timeout occurs, it cancels the task
and raises TimeoutError.</p>
<p>The asyncio.TaskGroup class provides a more modern
alternative. If a timeout occurs, it cancels the task
and raises TimeoutError.</p>
<ul><li>First item of a list.</li><li><p>Second,</p><p>in two paragraphs.</p></li></ul>
<dl><dt id="RETRIES">RETRIES</dt><dd><p>How often to retry.</p><p>Default: 3</p></dd></dl>
<table><tr><td>cell one</td><td>cell two</td></tr></table>
<pre>code   line
  two</pre>
</section><footer>Copyright</footer></body></html>"""


def test_blocks_follow_the_document_and_drop_navigation_residue_and_repeats() -> None:
    found = passages.blocks(DOC)
    texts = [b.text for b in found]
    assert texts == [
        "The asyncio.TaskGroup class provides a more modern alternative. If a timeout occurs,"
        " it cancels the task and raises TimeoutError.",
        "First item of a list.",
        "Second, in two paragraphs.",
        "How often to retry. Default: 3",
        "cell one",
        "cell two",
        "code line two",
    ]
    assert {b.heading for b in found} == {"Timeouts", "Timeouts \u203a RETRIES"}
    retries = found[3]
    assert (retries.kind, retries.anchor) == ("definition", "RETRIES")
    assert found[0].anchor == "timeouts" and found[-1].kind == "code"
    assert not any("¶" in t or "Permalink" in t or "sidebar" in t for t in texts)


def test_flattened_text_is_joined_where_the_source_wrapped_its_lines() -> None:
    text = (
        "Timeouts¶\n"
        "The asyncio.TaskGroup class provides a more modern\n"
        "alternative. If a timeout occurs, it cancels the task\n"
        "and raises TimeoutError.\n"
        "- a list item\n"
        "Short Heading\n"
        "A paragraph under it."
    )
    found = passages.blocks_from_text(text)
    assert [(b.heading, b.text) for b in found] == [
        (
            "Timeouts",
            "The asyncio.TaskGroup class provides a more modern alternative. If a timeout"
            " occurs, it cancels the task and raises TimeoutError.",
        ),
        ("Timeouts", "- a list item"),
        ("Short Heading", "A paragraph under it."),
    ]


def test_sentences_are_split_by_a_segmenter_not_at_every_period() -> None:
    assert passages.sentences("Use e.g. app.config.update() here. Version 2.2 works. Done!") == [
        "Use e.g. app.config.update() here.",
        "Version 2.2 works.",
        "Done!",
    ]


def test_a_text_fragment_link_encodes_its_terms_and_uses_start_and_end_when_long() -> None:
    short = passages.text_link("http://h/p.html#old", "sec-1", "a-b, c & d")
    assert short == "http://h/p.html#sec-1:~:text=a%2Db%2C%20c%20%26%20d"
    words = " ".join(f"w{i}" for i in range(30))
    long = passages.text_link("http://h/p.html", "", words)
    fragment = long.split(":~:text=", 1)[1]
    start, end = fragment.split(",")
    assert unquote(start) == "w0 w1 w2 w3 w4" and unquote(end) == "w25 w26 w27 w28 w29"


def test_ranking_stems_joins_compounds_and_counts_the_heading() -> None:
    found = passages.blocks(DOC)
    [top] = relevance.rank([found], "what happens when a task times out")
    assert top and "raises TimeoutError" in top[0].text
    [top] = relevance.rank([found], "how many retries by default")
    assert top[0].text == "How often to retry. Default: 3"
    # The line method misses both: exact words only, and lines cut mid-sentence.
    flat = "\n".join(
        ["The asyncio.TaskGroup class provides a more modern", "alternative. If a timeout occurs"]
    )
    assert line_excerpts(flat, "what happens when a task times out") == []


def test_weak_mentions_are_not_listed_beside_the_answer_and_scores_are_ordered() -> None:
    blocks = [
        passages.Block("Its last keeper, Ada Morrow, left the tower in 1962."),
        passages.Block("Visitors often ask about keepers and the archive."),
        passages.Block("Nothing about it here."),
    ]
    [found] = relevance.rank([blocks], "keeper 1962")
    assert [p.text for p in found] == ["Its last keeper, Ada Morrow, left the tower in 1962."]
    other = [passages.Block("The keeper of 1962 and the keeper of 1963.")]
    ranked = relevance.rank([blocks, other], "keeper 1962")
    best = relevance.across(ranked, 5)
    assert [p.score for p in best] == sorted((p.score for p in best), reverse=True)
    assert {p.source for p in best} == {0, 1}


def test_a_long_passage_is_cut_to_its_best_sentences() -> None:
    filler = " ".join(f"Filler sentence number {i} says nothing." for i in range(30))
    block = passages.Block(filler + " The lighthouse keeper left in 1962. " + filler)
    [[p]] = relevance.rank([[block]], "when did the keeper leave")
    assert "The lighthouse keeper left in 1962." in p.text
    assert len(p.text) <= relevance.EXCERPT_CHARS


def test_a_worker_result_gives_blocks_then_html_then_text() -> None:
    given = {"blocks": [{"text": "from  blocks", "heading": "h"}], "html": DOC, "text": "x"}
    assert [b.text for b in passages.from_result(given)] == ["from blocks"]
    assert passages.from_result({"html": DOC, "text": "x"})[0].heading == "Timeouts"
    assert [b.text for b in passages.from_result({"text": "one line."})] == ["one line."]
    assert passages.from_result({"blocks": "garbage", "text": ""}) == []


CORPUS = Path(research_answers.load()["corpus"]["root"])


@pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"the answer corpus {CORPUS} is absent (python-flask-doc)"
)
def test_real_corpus_pages_answer_their_questions_in_the_top_three() -> None:
    questions = research_answers.load()["questions"][:40:5]  # 8 questions over 6 pages
    with research_answers.served(CORPUS) as base:
        found = research_answers.evaluate(questions, base)
    methods = found["methods"]
    assert methods["passages"]["top3"] >= 0.75, methods["passages"]["not_in_top3"]
    assert methods["passages"]["top3"] > methods["lines"]["top3"]


def test_a_page_without_text_has_no_passages() -> None:
    assert passages.blocks("<html><body><img src=x></body></html>") == []
    assert passages.blocks("<html></html>") == []
