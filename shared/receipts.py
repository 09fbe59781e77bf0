"""Action results as canonical ASCII JSON, and the hashes both sides compute over them.

Canonical means one text per value (sorted keys, no spaces), so the coordinator and a worker
agree on hashes. ASCII means NUL and lone surrogates travel as escapes: protobuf strings must be
valid UTF-8 and PostgreSQL text cannot hold NUL, but both carry `\\u0000` and `\\ud800`.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from shared.errors import InvalidArgumentError


def encode_result(value: Any) -> str:
    """The canonical JSON text of `value`; InvalidArgumentError if JSON cannot hold it."""
    try:
        return json.dumps(
            value, ensure_ascii=True, sort_keys=True, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"value cannot be encoded as JSON: {exc}") from exc


def encode_with(fields: dict[str, Any], key: str, encoded: str) -> str:
    """`encode_result({**fields, key: value})` where `encoded` is `encode_result(value)`: a
    value encoded once for several texts (a receipt's result) is not encoded again."""
    before = {k: v for k, v in fields.items() if k < key}
    after = {k: v for k, v in fields.items() if k > key}
    parts = [encode_result(before)[1:-1] if before else "", f'"{key}":{encoded}']
    if after:
        parts.append(encode_result(after)[1:-1])
    return "{" + ",".join(p for p in parts if p) + "}"


def decode_result(text: str) -> Any:
    """The value of a JSON text; NaN and Infinity are refused as `encode_result` refuses them,
    and so is a number too large for a float (`1e400`, which Python would read as infinity)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"not valid JSON: {exc}") from exc


def content_hash(text: str) -> str:
    """sha256 hex of the UTF-8 bytes of `text` (canonical JSON is ASCII, so always encodable)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"text holds a lone surrogate at {exc.start}: hash its encode_result() form"
        ) from exc
    return hashlib.sha256(data).hexdigest()


def content_sha256(data: bytes) -> str:
    """sha256 hex of raw bytes (artifacts are stored and fetched by it)."""
    return hashlib.sha256(data).hexdigest()


def artifact_refs(result: Any) -> list[tuple[str, str]]:
    """(field, sha256) of every artifact a result names: `{"sha256", "media_type", ...}` values."""
    refs: list[tuple[str, str]] = []
    if isinstance(result, dict):
        for key, value in result.items():
            named = isinstance(value, dict) and isinstance(value.get("sha256"), str)
            if named and "media_type" in value:
                refs.append((key, value["sha256"]))
    return refs


def fingerprint(kind: str, args: Any) -> str:
    """What an action does, as a hash: equal for equal kind and args, whatever the key order."""
    return content_hash(encode_result({"kind": kind, "args": args}))


def safe_text(text: str) -> str:
    """`text` with NUL and lone surrogates escaped, fit for a protobuf string and SQL text."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value
