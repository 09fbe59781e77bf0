"""How a research report reads: counts that match what is listed, and the Markdown report."""

from __future__ import annotations

from typing import Any

from coordinator.admin_cli import render


def _source(i: int, evidence: bool) -> dict[str, Any]:
    text = f"Fact number {i} [with] *markup*."
    return {
        "url": f"http://h/{i}.html",
        "final_url": f"http://h/{i}.html",
        "title": f"Page {i}",
        "receipt": f"r{i}",
        "route": "headless",
        "evidence": evidence,
        "excerpts": [text] if evidence else [],
        "passages": (
            [
                {
                    "text": text,
                    "heading": "Facts",
                    "score": 3.5,
                    "link": f"http://h/{i}.html#facts:~:text=Fact%20number",
                }
            ]
            if evidence
            else []
        ),
    }


REPORT: dict[str, Any] = {
    "query": "fact",
    "routes": [],
    # Eight URLs: six pages read (one with the answer), one failed, one skipped.
    "sources": [_source(i, i == 4) for i in range(6)],
    "failures": [{"url": "http://h/x.pdf", "outcome": "unsupported_content", "reason": "PDF"}],
    "skipped": [{"url": "http://h/late.html", "reason": "page limit"}],
    "answers": [],
    "evidence": 1,
    "passages": [
        {
            "url": "http://h/4.html",
            "title": "Page 4",
            "receipt": "r4",
            **_source(4, True)["passages"][0],
        }
    ],
    "disagreements": [],
    "totals": {"pages_fetched": 7, "bytes_read": 1234, "sources_by_status": {}},
}


def test_the_text_report_counts_what_it_lists_and_lists_evidence_first() -> None:
    text = render.research_report(REPORT)
    first = text.splitlines()[0]
    assert first == (
        "evidence for 'fact': 1 of 6 source(s) read hold matching text, 1 not evidence, 1 skipped"
    )
    listed = [line for line in text.splitlines() if line.startswith("- Page")]
    assert len(listed) == 6 and listed[0].startswith("- Page 4 ")


def test_the_markdown_report_has_passages_with_headings_links_and_reasons() -> None:
    md = render.research_markdown(REPORT, {"id": "run-1", "status": "SUCCEEDED"})
    assert md.startswith("# Research: fact\n")
    assert "Run `run-1`: SUCCEEDED" in md
    assert "1 of 6 source(s) read hold matching text" in md
    assert md.count("### [Page") == 6
    assert md.index("### [Page 4]") < md.index("### [Page 0]")
    assert "> **Facts**: Fact number 4 \\[with\\] \\*markup\\*." in md
    assert "(<http://h/4.html#facts:~:text=Fact%20number>)" in md
    assert "## Not evidence\n\n- http://h/x.pdf: unsupported_content: PDF" in md
    assert "## Skipped\n\n- http://h/late.html: page limit" in md
    assert "## Best passages" in md and "receipt `r4`" in md


def test_markdown_spells_out_control_characters_and_keeps_links_whole() -> None:
    src = {**_source(1, True), "final_url": "http://h/a>b (c).html", "title": "# not a heading"}
    report = {**REPORT, "query": "fact\x1b[2J", "sources": [src]}
    md = render.research_markdown(report)
    assert "\x1b" not in md
    assert "### [\\# not a heading](<http://h/a%3Eb%20(c).html>)" in md


NOTHING_READ: dict[str, Any] = {
    "query": "fact",
    "routes": [{"route": "headless", "outcome": "ok"}],
    "sources": [],
    "failures": [
        {
            "url": "http://127.0.0.1:9/",
            "outcome": "network_error",
            "reason": "connection refused at 127.0.0.1:9",
        }
    ],
    "skipped": [],
    "answers": [],
    "evidence": 0,
    "passages": [],
    "disagreements": [],
    "totals": {
        "pages_fetched": 1,
        "bytes_read": 0,
        "sources_by_status": {"network_error": 1, "skipped": 0},
    },
}


def test_a_report_that_read_nothing_says_no_evidence_not_a_count_of_bytes() -> None:
    text = render.research_report(NOTHING_READ).splitlines()
    assert (
        text[0]
        == "no evidence for 'fact': 0 of 0 source(s) read hold matching text, 1 not evidence"
    )
    assert "- http://127.0.0.1:9/: network_error: connection refused at 127.0.0.1:9" in text
    assert text[-1] == "no page was read (network_error 1)"
    md = render.research_markdown(NOTHING_READ)
    assert "No evidence: 0 of 0 source(s) read hold matching text, 1 not evidence." in md
    assert md.endswith("No page was read (network_error 1).\n") and "0 bytes" not in md
    # A report with some evidence counts what it read of what it fetched.
    ok = {**REPORT, "totals": {**REPORT["totals"], "sources_by_status": {"ok": 6, "x": 1}}}
    assert (
        render.research_report(ok).splitlines()[-1] == "read 6 of 7 page(s), 1234 bytes (ok 6, x 1)"
    )
