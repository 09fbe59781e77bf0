"""The providers against a hostile model service on loopback: what it says in an error must
reach the run's stop reason and journal as one short line of printable text, and its waits
must not outlast the loop's whole-call limit."""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.agent.conversation import Message, ModelError
from coordinator.agent.providers import calls, open_model
from tests.harness.models import AnthropicStandIn, OpenAIResponsesStandIn

STAND_INS = [AnthropicStandIn, OpenAIResponsesStandIn]


def _model(stand_in: Any) -> Any:
    provider = "anthropic" if isinstance(stand_in, AnthropicStandIn) else "openai"
    return open_model(f"{provider}:model-test", stand_in.env)


@pytest.mark.parametrize("stand_in_type", STAND_INS)
def test_a_huge_error_with_control_characters_is_one_short_printable_line(
    stand_in_type: Any,
) -> None:
    stand_in = stand_in_type([]).start()
    try:
        hostile = "\x1b]0;owned\x07\x1b[2J\x00" + "A" * 2_000_000
        body = {"error": {"type": "invalid_request_error", "message": hostile}}
        stand_in.failures.append((400, body, {}))
        with pytest.raises(ModelError) as caught:
            _model(stand_in).complete("", (Message("user", "hi"),), (), timeout=10)
        message = str(caught.value)
        assert message.startswith(("anthropic: HTTP 400", "openai: HTTP 400"))
        assert len(message) <= calls.MAX_MESSAGE
        assert message.isprintable(), repr(message[:80])
    finally:
        stand_in.stop()


@pytest.mark.parametrize("stand_in_type", STAND_INS)
def test_endless_429s_asking_to_wait_hours_stay_within_the_call_limit(stand_in_type: Any) -> None:
    stand_in = stand_in_type([]).start()
    try:
        limited = {"error": {"type": "rate_limit_error", "message": "come back tomorrow"}}
        for _ in range(10):
            stand_in.failures.append((429, limited, {"retry-after": "36000"}))
        started = time.monotonic()
        with pytest.raises(ModelError):
            _model(stand_in).complete("", (Message("user", "hi"),), (), timeout=2)
        assert time.monotonic() - started < 3.5
    finally:
        stand_in.stop()
