"""JSON over HTTPS for the provider adapters, on the standard library only.

One POST per model call with a whole-call time limit: the request runs on a daemon thread and
the caller stops waiting when the limit is hit (ModelTimeout), whatever the server does — a
socket timeout alone bounds each read, not a server that trickles bytes. HTTP errors become
one-line ModelErrors carrying the provider's own message; the key is scrubbed from anything
that could reach a person.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from coordinator.agent.conversation import ModelError, ModelTimeout

USER_AGENT = "deskfleet-agent"
# Enough of an error body to find the provider's message; the rest is not read.
MAX_ERROR_BODY = 64 * 1024
MAX_RESPONSE_BODY = 64 * 1024 * 1024

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


def post_json(
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    timeout: float,
    provider: str,
    secrets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """POST `body` as JSON and return the JSON object that comes back.

    Raises ModelTimeout when `timeout` seconds pass before the whole response is read, and
    ModelError for anything else; no message contains any of `secrets`.
    """
    if timeout <= 0:
        raise ModelTimeout(f"{provider}: no time left for the call")
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={
            "content-type": "application/json",
            "accept": "application/json",
            "user-agent": USER_AGENT,
            **headers,
        },
    )
    outcome: list[dict[str, Any] | BaseException] = []
    done = threading.Event()

    def call() -> None:
        try:
            outcome.append(_send(request, timeout=timeout, provider=provider))
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.set()

    # A daemon thread: a stalled server must not hold the process open after we gave up on it;
    # its socket timeout ends the thread soon after.
    threading.Thread(target=call, name=f"{provider}-call", daemon=True).start()
    if not done.wait(timeout):
        raise ModelTimeout(f"{provider}: no complete response within {timeout:g} s")
    result = outcome[0]
    if isinstance(result, ModelError):
        raise type(result)(_scrub(str(result), secrets)) from None
    if isinstance(result, BaseException):
        raise ModelError(_scrub(f"{provider}: {result}", secrets)) from None
    return result


def _send(request: urllib.request.Request, *, timeout: float, provider: str) -> dict[str, Any]:
    host = urlsplit(request.full_url).netloc
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read(MAX_RESPONSE_BODY + 1)
    except urllib.error.HTTPError as exc:
        try:
            detail = exc.read(MAX_ERROR_BODY)
        except OSError:
            detail = b""
        finally:
            exc.close()
        raise ModelError(_http_error(provider, exc.code, detail)) from exc
    except TimeoutError as exc:
        raise ModelTimeout(f"{provider}: {host} did not answer within {timeout:g} s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise ModelTimeout(f"{provider}: {host} did not answer within {timeout:g} s") from exc
        raise ModelError(f"{provider}: cannot reach {host}: {exc.reason}") from exc
    except OSError as exc:
        raise ModelError(f"{provider}: connection to {host} failed: {exc}") from exc
    if len(raw) > MAX_RESPONSE_BODY:
        raise ModelError(f"{provider}: the response is larger than {MAX_RESPONSE_BODY} bytes")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ModelError(f"{provider}: the response is not JSON ({_snippet(raw)})") from exc
    if not isinstance(doc, dict):
        raise ModelError(f"{provider}: the response is not a JSON object")
    return doc


def _http_error(provider: str, status: int, body: bytes) -> str:
    """`anthropic: HTTP 429 rate limited (...): <the provider's message>`."""
    hint = _HINTS.get(status, "")
    message = ""
    try:
        doc = json.loads(body)
    except ValueError:
        message = _snippet(body)
    else:
        message = _error_message(doc) or _snippet(body)
    parts = [f"{provider}: HTTP {status}"]
    if hint:
        parts.append(hint)
    text = " ".join(parts)
    return f"{text}: {message}" if message else text


def _error_message(doc: Any) -> str:
    """Anthropic `{"error": {"type", "message"}}`, OpenAI `{"error": {"message", "code"}}`,
    and the bare `{"error": "..."}` / `{"message": "..."}` of some local servers."""
    if not isinstance(doc, dict):
        return ""
    error = doc.get("error")
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


def _snippet(raw: bytes, limit: int = 200) -> str:
    text = " ".join(raw[: limit * 4].decode("utf-8", "replace").split())
    return text[:limit] + ("…" if len(text) > limit else "")


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    text = " ".join(text.split())  # one line
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[key]")
    return text
