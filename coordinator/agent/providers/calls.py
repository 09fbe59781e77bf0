"""One model call over an official SDK client, held to the loop's whole-call time limit, and
its failures as the loop's one-line ModelErrors.

The SDKs retry what is worth retrying (408, 409, 429, 5xx and dropped connections, honouring
`retry-after`) and bound each attempt. The loop's limit is on the whole call, retries and their
waits included, so the call runs on an event loop of its own in the calling thread (the goal
loop calls `Model.complete` off its event loop) under `asyncio.timeout`: when the limit is hit
the request is cancelled, not left running on a thread nobody waits for. A client lives on one
event loop, so each call makes its own; that costs about 20 ms of a call that takes seconds.

Failures become one line a person can act on, carrying the provider's own message
(`anthropic: HTTP 429 rate limited (429): ...: <the provider's message>`), and the key is
scrubbed from anything that could reach a person.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from coordinator.agent.conversation import ModelError, ModelTimeout

T = TypeVar("T")

MAX_RETRIES = 2  # the SDKs' own default, said here so that tests and docs can name it
# A model error becomes a run's stop reason and a journal entry, read by people in terminals:
# what a provider says is cut to this many characters, its control characters made visible.
MAX_MESSAGE = 600

_HINTS = {
    401: "authentication failed (check the API key)",
    403: "permission denied",
    404: "not found (check the base URL and the model name)",
    408: "the server timed out",
    413: "the request is too large",
    429: "rate limited (429): slow down or raise the provider's limit",
    500: "the provider had an internal error",
    502: "bad gateway",
    503: "the provider is unavailable",
    529: "the provider is overloaded (529): try again later",
}


@dataclass(frozen=True)
class SDKErrors:
    """One SDK's exception classes (anthropic's and openai's have the same shape)."""

    status: type[BaseException]  # APIStatusError, with .status_code and the parsed .body
    timeout: type[BaseException]  # APITimeoutError: an attempt ran past its time
    connection: type[BaseException]  # APIConnectionError: no answer at all
    base: type[BaseException]  # AnthropicError / OpenAIError: anything else the SDK raises


@dataclass(frozen=True)
class Endpoint:
    """Where one provider's calls go and what must never be shown of them."""

    provider: str  # anthropic | openai | openai-chat: the first word of every message
    base_url: str
    errors: SDKErrors
    secrets: tuple[str, ...] = ()

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc


def run(endpoint: Endpoint, call: Callable[[], Awaitable[T]], *, timeout: float) -> T:
    """Run `call()` (one SDK request, retries included) to completion within `timeout` seconds.

    Raises ModelTimeout when the time runs out first, and ModelError for any other failure;
    no message contains any of the endpoint's secrets.
    """
    provider = endpoint.provider
    if timeout <= 0:
        raise ModelTimeout(f"{provider}: no time left for the call")
    result = _outcome(endpoint, call, timeout)
    if isinstance(result, ModelError):
        # Raised here, outside the handler, so that it carries neither the SDK's exception as
        # its cause nor as its context: that one's text may hold the key this one is scrubbed of.
        raise result
    if isinstance(result, str):
        # The SDKs hand back the body as text when the server says it is not JSON.
        raise ModelError(f"{provider}: the response is not JSON ({_snippet(result)})")
    return result


def _outcome(
    endpoint: Endpoint, call: Callable[[], Awaitable[T]], timeout: float
) -> T | ModelError:
    try:
        return asyncio.run(_bounded(call, limit=timeout))
    except BaseException as exc:
        error = _model_error(endpoint, exc, timeout)
        if error is None:
            raise
        return error


async def _bounded(call: Callable[[], Awaitable[T]], *, limit: float) -> T:
    async with asyncio.timeout(limit):
        return await call()


def _model_error(endpoint: Endpoint, exc: BaseException, timeout: float) -> ModelError | None:
    """The ModelError `exc` stands for, scrubbed; None for what is not a call's failure
    (KeyboardInterrupt, a defect in our own code)."""
    provider, host, errors = endpoint.provider, endpoint.host, endpoint.errors
    error: ModelError
    if isinstance(exc, ModelError):
        error = exc
    elif isinstance(exc, errors.timeout):
        error = ModelTimeout(f"{provider}: {host} did not answer within {timeout:g} s")
    elif isinstance(exc, TimeoutError):
        error = ModelTimeout(f"{provider}: no complete response within {timeout:g} s")
    elif isinstance(exc, errors.connection):
        cause = exc.__cause__ or exc
        error = ModelError(f"{provider}: cannot reach {host}: {cause}")
    elif isinstance(exc, errors.status):
        status = int(getattr(exc, "status_code", 0))
        error = ModelError(status_message(provider, status, getattr(exc, "body", None)))
    elif isinstance(exc, json.JSONDecodeError):
        error = ModelError(f"{provider}: the response is not JSON ({_snippet(exc.doc)})")
    elif isinstance(exc, errors.base):
        error = ModelError(f"{provider}: {exc}")
    else:
        return None
    return type(error)(scrub(str(error), endpoint.secrets))


def status_message(provider: str, status: int, body: object) -> str:
    """`anthropic: HTTP 429 rate limited (...): <the provider's message>`."""
    hint = _HINTS.get(status, "")
    message = _snippet(body) if isinstance(body, str | bytes) else _error_message(body)
    text = f"{provider}: HTTP {status}" + (f" {hint}" if hint else "")
    return f"{text}: {message}" if message else text


def _error_message(doc: Any) -> str:
    """Anthropic `{"error": {"type", "message"}}`, OpenAI `{"error": {"message", "code"}}`
    (its SDK hands over the inner object alone), and the bare `{"error": "..."}` /
    `{"message": "..."}` of some local servers."""
    if not isinstance(doc, dict):
        return ""
    error = doc.get("error")
    if error is None and any(k in doc for k in ("type", "code")):
        error = doc
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        kind = error.get("type") or error.get("code")
        if kind and message:
            return f"{message} ({kind})"
        return message or str(kind or "")
    if isinstance(error, str):
        return error
    found = doc.get("message") or doc.get("detail")
    return found if isinstance(found, str) else ""


def _snippet(raw: str | bytes, limit: int = 200) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = " ".join(text[: limit * 4].split())
    return text[:limit] + ("…" if len(text) > limit else "")


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """`text` on one line of printable characters, at most MAX_MESSAGE of them, with every
    secret replaced by `[key]` (before it is cut, so that no part of a key is left)."""
    text = " ".join(text.split())
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[key]")
    # An escape sequence from a hostile service must not reach a terminal, nor a NUL a column.
    text = "".join(ch if ch.isprintable() else "\ufffd" for ch in text)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
