"""A table cell's words are cut at 40 characters as the page shows them: text a worker or a
page wrote may hold control and bidi characters, which the page spells out (`\\u202e` is six
characters), so a word of 39 of them was 234 characters no cell could wrap."""

from __future__ import annotations

import pytest

from coordinator.console.model import short_words


@pytest.mark.parametrize(
    "text",
    ["\u202e" * 39, "ok " + "\x1b[2J" * 30 + " end", "a\tb\nc" * 20, "W" * 10_000],
)
def test_no_word_longer_than_forty_characters_as_shown(text: str) -> None:
    shown = short_words(text)
    assert all(len(word) <= 40 for word in shown.split(" ")), shown
    assert "\u202e" not in shown and "\x1b" not in shown


def test_short_words_are_kept_and_spelled_out_once() -> None:
    assert short_words("a \u202eb c") == "a \\u202eb c"
