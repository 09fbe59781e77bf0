"""The context manager: budgets, pinned messages, whole tool exchanges, archive and checkpoint."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from coordinator.agent.context import (
    SUMMARY_INSTRUCTION,
    ContextManager,
    FitResult,
    message_tokens,
    references_in,
)
from coordinator.agent.conversation import (
    Content,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from coordinator.agent.tokens import estimate_tokens

SYSTEM = "You operate machines of the fleet for the owner. Use the tools."
TOOLS = (
    ToolSpec("fetch", "Fetch a URL as text.", {"type": "object", "properties": {}}),
    ToolSpec("recall", "Read the journal.", {"type": "object", "properties": {}}),
)


class Journal:
    """An in-memory run journal: `archive` stores, `recall` reads back by reference."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Content, ...]] = {}
        self.calls: list[str] = []

    def archive(self, content: tuple[Content, ...], call_id: str) -> str:
        reference = f"journal:run_t#{len(self.entries) + 1}"
        self.entries[reference] = content
        self.calls.append(call_id)
        return reference

    def recall(self, reference: str) -> tuple[Content, ...]:
        return self.entries[reference]


class Summarizer:
    def __init__(self, text: str = "Facts: pages read. Open work: fill the form.") -> None:
        self.text = text
        self.inputs: list[tuple[Message, ...]] = []

    def __call__(self, messages: tuple[Message, ...]) -> str:
        self.inputs.append(messages)
        return self.text


def png(width: int = 1280, height: int = 800, size: int = 4000) -> ImagePart:
    header = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + width.to_bytes(4, "big")
    header += height.to_bytes(4, "big")
    return ImagePart("image/png", header + bytes(size))


def page(n: int, chars: int) -> str:
    words = f"page {n} evidence line. "
    return (words * (chars // len(words) + 1))[:chars]


def exchange(call_id: str, name: str, *content: Content, text: str = "") -> tuple[Message, Message]:
    call = ToolCall(call_id, name, {"url": f"https://site.test/{call_id}"})
    return (
        Message("assistant", text=text, tool_calls=(call,)),
        Message("user", tool_results=(ToolResult(call_id, tuple(content)),)),
    )


def request(text: str = "Find the opening hours and fill the form.") -> Message:
    return Message("user", text=text, kind="request")


def conversation(pages: int = 6, shots: int = 6) -> list[Message]:
    messages = [request()]
    for i in range(max(pages, shots)):
        if i < shots:
            messages += exchange(f"shot{i}", "computer", png())
        if i < pages:
            messages += exchange(f"page{i}", "fetch", TextPart(page(i, 20_000 + 5_000 * i)))
    return messages


def small_exchanges(n: int) -> list[Message]:
    """Results each too small to archive that together overflow the budget."""
    messages = [request()]
    for i in range(n):
        messages += exchange(f"c{i}", "fetch", TextPart(page(i, 800)), text=f"plan {i} " * 30)
    return messages


def fit(
    messages: Sequence[Message],
    journal: Journal | None = None,
    summarize: Summarizer | None = None,
    budget: int = 20_000,
) -> FitResult:
    manager = ContextManager(
        (journal or Journal()).archive, summarize or Summarizer(), budget=budget
    )
    return manager.fit(SYSTEM, messages, TOOLS)


def results_by_id(messages: Sequence[Message]) -> dict[str, ToolResult]:
    return {r.call_id: r for m in messages for r in m.tool_results}


def assert_whole_exchanges(original: Sequence[Message], out: Sequence[Message]) -> None:
    """Every call in the output has all its results in the next message, and every result
    follows its call, unless the exchange was already incomplete in the input."""
    incomplete = set()
    for i, m in enumerate(original):
        nxt = original[i + 1] if i + 1 < len(original) else None
        got = {r.call_id for r in nxt.tool_results} if nxt and nxt.role == "user" else set()
        if not {c.id for c in m.tool_calls} <= got:
            incomplete |= {c.id for c in m.tool_calls}
    for i, m in enumerate(out):
        ids = {c.id for c in m.tool_calls} - incomplete
        if ids:
            assert i + 1 < len(out)
            assert ids <= {r.call_id for r in out[i + 1].tool_results}
        for r in m.tool_results:
            if r.call_id in incomplete:
                continue
            assert i > 0 and r.call_id in {c.id for c in out[i - 1].tool_calls}
    kept_calls = {c.id for m in out for c in m.tool_calls}
    kept_results = {r.call_id for m in out for r in m.tool_results}
    assert kept_calls - incomplete == kept_results - incomplete


def assert_pinned_exact(original: Sequence[Message], out: Sequence[Message]) -> None:
    pinned = [m for m in original if m.kind == "request"]
    corrections = [m for m in original if m.kind in ("guidance", "answer")]
    if corrections:
        pinned.append(corrections[-1])
    for m in pinned:
        assert any(o is m for o in out)
        assert m.text == next(o for o in out if o is m).text


def test_a_conversation_under_budget_is_returned_as_is() -> None:
    messages = [request(), *exchange("c1", "fetch", TextPart("short page"))]
    result = fit(messages)
    assert result.messages == tuple(messages)
    assert all(a is b for a, b in zip(result.messages, messages, strict=True))
    assert not result.report.changed
    assert result.report.tokens_before == result.report.tokens_after


def test_many_large_results_fit_under_the_budget_by_archiving() -> None:
    messages = conversation(pages=8, shots=6)
    journal = Journal()
    result = fit(messages, journal)
    report = result.report
    assert report.tokens_before > 60_000
    assert report.tokens_after <= report.budget == 20_000
    assert estimate_tokens(result.messages, SYSTEM, TOOLS) <= report.tokens_after
    assert not report.over_budget and report.checkpoint is None
    assert len(result.messages) == len(messages)  # archiving needs no summary
    assert_whole_exchanges(messages, result.messages)
    assert_pinned_exact(messages, result.messages)


def test_old_screenshots_go_first_then_the_largest_pages() -> None:
    messages = [request()]
    for i in range(10):
        messages += exchange(f"shot{i}", "computer", png())
    messages += exchange("small", "fetch", TextPart(page(0, 15_000)))
    messages += exchange("big", "fetch", TextPart(page(1, 24_000)))
    result = fit(messages)
    archived = [a.call_id for a in result.report.archived]
    assert archived and archived == [f"shot{i}" for i in range(len(archived))]
    assert "shot9" not in archived and "big" not in archived  # it fit before reaching them

    # With no room for screenshots at all, pages follow them, the largest first.
    result = fit(messages, budget=4_000)
    archived = [a.call_id for a in result.report.archived]
    assert archived == [f"shot{i}" for i in range(10)] + ["big", "small"]


def test_archive_gets_the_exact_originals_and_recall_returns_them() -> None:
    messages = conversation(pages=5, shots=4)
    journal = Journal()
    result = fit(messages, journal)
    originals = results_by_id(messages)
    kept = results_by_id(result.messages)
    assert result.report.archived
    for entry in result.report.archived:
        assert journal.recall(entry.reference) == originals[entry.call_id].content
        preview = kept[entry.call_id]
        assert len(preview.content) == 1 and isinstance(preview.content[0], TextPart)
        text = preview.content[0].text
        assert "incomplete" in text and f"recall ref {entry.reference}" in text
        assert references_in(next(m for m in result.messages if preview in m.tool_results)) == [
            entry.reference
        ]
        if entry.images:
            assert "image/png 1280x800" in text
        else:
            assert f"{entry.chars} chars" in text and "page" in text
        assert entry.tool in ("computer", "fetch") and entry.tokens_after < entry.tokens_before
    assert sorted(journal.calls) == sorted(a.call_id for a in result.report.archived)


def test_pinned_messages_stay_byte_exact_through_a_checkpoint() -> None:
    big_request = request("Fill the form with these details:\n" + page(99, 12_000))
    old_guidance = Message("user", text="Use the staging site.", kind="guidance")
    answer = Message("user", text="The account is ops@example.test.", kind="answer")
    messages = [big_request]
    for i in range(60):
        messages += exchange(f"c{i}", "fetch", TextPart(page(i, 900)), text=f"step {i} " * 40)
        if i == 5:
            messages.append(old_guidance)
        if i == 40:
            messages.append(answer)
    # An exchange still waiting for one of its two results closes the conversation.
    calls = (ToolCall("p1", "fetch", {}), ToolCall("p2", "research", {"q": "hours"}))
    pending = [
        Message("assistant", tool_calls=calls),
        Message("user", tool_results=(ToolResult("p1", (TextPart(page(7, 9_000)),)),)),
    ]
    messages += pending
    summarizer = Summarizer()
    result = fit(messages, summarize=summarizer)
    out = result.messages
    assert result.report.checkpoint is not None
    assert result.report.tokens_after <= result.report.budget
    assert_pinned_exact(messages, out)
    assert out[-2] is pending[0] and out[-1] is pending[1]  # never archived or summarized
    assert out[0] is big_request
    assert old_guidance not in out  # only the newest correction is pinned
    for sent in summarizer.inputs:
        assert big_request not in sent and answer not in sent and pending[1] not in sent
    assert_whole_exchanges(messages, out)


def test_a_checkpoint_replaces_older_exchanges_when_archiving_is_not_enough() -> None:
    messages = small_exchanges(100)
    summarizer = Summarizer("Facts: hours are 9-17 (recall ref journal:run_t#3).")
    result = fit(messages, summarize=summarizer)
    report = result.report
    assert not report.archived
    assert report.checkpoint is not None and not report.checkpoint.incomplete
    assert report.tokens_after <= report.budget
    assert len(summarizer.inputs) == 1
    sent = summarizer.inputs[0]
    assert sent == tuple(messages[1 : 1 + len(sent)])  # the oldest exchanges, whole
    assert report.checkpoint.messages == len(sent)
    summaries = [m for m in result.messages if m.kind == "summary"]
    assert len(summaries) == 1 and summaries[0].role == "user"
    assert summarizer.text in summaries[0].text
    assert result.messages[1] is summaries[0]
    assert result.messages[2:] == tuple(messages[1 + len(sent) :])  # the newer ones exact
    assert_whole_exchanges(messages, result.messages)
    assert "Failed approaches" in SUMMARY_INSTRUCTION and "Open work" in SUMMARY_INSTRUCTION


def test_an_oversized_summary_keeps_whole_entries_and_is_labelled_incomplete() -> None:
    messages = [request()]
    for i in range(100):
        result_text = page(i, 30_000 if i % 5 == 0 else 800)
        messages += exchange(f"c{i}", "fetch", TextPart(result_text), text=f"plan {i} " * 30)
    journal = Journal()
    result = fit(messages, journal, Summarizer("Facts: " + "x" * 100_000))
    checkpoint = result.report.checkpoint
    assert checkpoint is not None and checkpoint.incomplete
    assert result.report.tokens_after <= result.report.budget
    summary = next(m for m in result.messages if m.kind == "summary")
    assert summary.text.startswith("[checkpoint, incomplete")
    assert "x" * 100 not in summary.text
    # Kept entries are whole original exchanges, the newest of those summarized.
    assert checkpoint.kept_messages > 0
    index = result.messages.index(summary)
    kept = result.messages[index + 1 : index + 1 + checkpoint.kept_messages]
    kept_ids = [c.id for m in kept for c in m.tool_calls]
    dropped_ids = [i for i in checkpoint.call_ids if i not in kept_ids]
    assert dropped_ids and kept_ids == list(checkpoint.call_ids[len(dropped_ids) :])
    # Dropped archived results stay reachable: their references are listed.
    dropped_refs = [a.reference for a in result.report.archived if a.call_id in dropped_ids]
    assert dropped_refs and list(checkpoint.references) == dropped_refs
    for reference in dropped_refs:
        assert f"recall ref {reference}" in summary.text
        assert journal.recall(reference)
    assert all(f"fetch {i}" in summary.text for i in dropped_ids)
    assert_whole_exchanges(messages, result.messages)


def test_a_failed_summary_leaves_the_conversation_unchanged() -> None:
    messages = small_exchanges(100)

    def broken(_: tuple[Message, ...]) -> str:
        raise TimeoutError("model call timed out")

    manager = ContextManager(Journal().archive, broken)
    result = manager.fit(SYSTEM, messages, TOOLS)
    assert all(a is b for a, b in zip(result.messages, messages, strict=True))
    assert len(result.messages) == len(messages)
    assert result.report.over_budget and not result.report.changed
    assert result.report.error is not None and "timed out" in result.report.error

    empty = ContextManager(Journal().archive, Summarizer("  ")).fit(SYSTEM, messages, TOOLS)
    assert empty.messages == tuple(messages) and empty.report.error


def test_a_failed_archive_leaves_the_conversation_unchanged() -> None:
    messages = conversation(pages=4, shots=2)

    def broken(content: tuple[Content, ...], call_id: str) -> str:
        raise OSError("journal unavailable")

    result = ContextManager(broken, Summarizer()).fit(SYSTEM, messages, TOOLS)
    assert result.messages == tuple(messages)
    assert result.report.over_budget and "journal unavailable" in (result.report.error or "")


def test_pinned_authority_always_leaves_4000_tokens_of_working_room() -> None:
    huge = request("Translate this document:\n" + page(1, 76_000))  # ~19,000 tokens
    messages = [huge]
    for i in range(12):
        messages += exchange(f"c{i}", "fetch", TextPart(page(i, 2_000)), text=f"step {i} " * 20)
    result = fit(messages)
    report = result.report
    authority = estimate_tokens((), SYSTEM, TOOLS) + message_tokens(huge)
    assert report.budget == authority + 4_000
    assert report.tokens_after <= report.budget
    assert result.messages[0] is huge
    # The working room holds the newest exchanges exact, not just a summary.
    assert result.messages[-1] is messages[-1] and result.messages[-2] is messages[-2]

    # Tool results do not enlarge the allowance: the budget stays at 20,000.
    result = fit(conversation(pages=8, shots=8))
    assert result.report.budget == 20_000


def test_an_incomplete_exchange_is_pinned_with_the_turn_after_it() -> None:
    call = ToolCall("wait", "ask_human", {"question": "Which account?"})
    asked = Message("assistant", tool_calls=(call,))
    guidance = Message("user", text="Keep going.", kind="")
    messages = [request(), *conversation(pages=6, shots=0)[1:], asked, guidance]
    result = fit(messages)
    assert result.messages[-2] is asked and result.messages[-1] is guidance
    assert result.report.tokens_after <= result.report.budget


def random_conversation(rng: random.Random) -> list[Message]:
    messages = [request("Goal: " + "x" * rng.randrange(10, 40_000))]
    n = 0
    for _ in range(rng.randrange(0, 40)):
        kind = rng.random()
        if kind < 0.1:
            messages.append(Message("user", text=rng.choice(["a", "b" * 3_000]), kind="guidance"))
            continue
        if kind < 0.15:
            messages.append(Message("assistant", text="thinking " * rng.randrange(1, 400)))
            continue
        calls = []
        results = []
        for _ in range(rng.randrange(1, 4)):
            n += 1
            calls.append(ToolCall(f"c{n}", rng.choice(["fetch", "computer"]), {"n": n}))
            content: list[Content] = []
            if rng.random() < 0.4:
                content.append(png(size=rng.randrange(10, 200)))
            if rng.random() < 0.8:
                content.append(TextPart(page(n, rng.choice([10, 500, 3_000, 30_000]))))
            results.append(ToolResult(f"c{n}", tuple(content)))
        messages.append(Message("assistant", tool_calls=tuple(calls)))
        messages.append(Message("user", tool_results=tuple(results)))
    if rng.random() < 0.3 and messages[-1].tool_results:
        messages.pop()  # the last exchange is still waiting for its results
    return messages


@pytest.mark.parametrize("seed", range(4))
def test_random_conversations_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        messages = random_conversation(rng)
        journal = Journal()
        summarizer = Summarizer(rng.choice(["Facts: short.", "Facts: " + "y" * 40_000]))
        budget = rng.choice([2_000, 8_000, 20_000, 50_000])
        result = fit(messages, journal, summarizer, budget=budget)
        report = result.report
        out = result.messages
        assert report.error is None
        assert report.over_budget == (report.tokens_after > report.budget)
        assert estimate_tokens(out, SYSTEM, TOOLS) <= report.tokens_after
        assert report.budget >= budget
        assert_pinned_exact(messages, out)
        assert_whole_exchanges(messages, out)
        originals = results_by_id(messages)
        for entry in report.archived:
            assert journal.recall(entry.reference) == originals[entry.call_id].content
        for sent in summarizer.inputs:  # the summarizer sees whole exchanges only
            assert_whole_exchanges(sent, sent)
            assert not any(m.kind == "request" for m in sent)
        # Every output message is an original, an archived copy of one, or the checkpoint.
        ids = {id(m) for m in messages}
        for m in out:
            if id(m) in ids or m.kind == "summary":
                continue
            assert m.kind == "archived" and m.tool_results
        # A conversation that could fit does: only incomplete exchanges can overflow.
        if report.over_budget:
            assert any(
                m.tool_calls and not (i + 1 < len(out) and out[i + 1].tool_results)
                for i, m in enumerate(out)
            ) or any(
                m.tool_calls
                and {c.id for c in m.tool_calls} - {r.call_id for r in out[i + 1].tool_results}
                for i, m in enumerate(out[:-1])
            )
