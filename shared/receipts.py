"""Action results as canonical ASCII JSON, and the hashes both sides compute over them.

Canonical means one text per value (sorted keys, no spaces), so the coordinator and a worker
agree on hashes. ASCII means NUL and lone surrogates travel as escapes: protobuf strings must be
valid UTF-8 and PostgreSQL text cannot hold NUL, but both carry `\\u0000` and `\\ud800`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from typing import Any

from shared.errors import InvalidArgumentError
from shared.text import visible


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


def decode_result(text: str, where: str = "") -> Any:
    """The value of a JSON text; NaN and Infinity are refused as `encode_result` refuses them,
    and so is a number too large for a float (`1e400`, which Python would read as infinity),
    and an object that gives a key twice, named by its path (`actions[0].idempotent: given
    twice`). `where` names the text in the errors (`actions[0].args`), and begins the path.

    A key given twice is refused wherever the coordinator reads JSON, a worker's results as
    much as an owner's plans. JSON leaves open which of the two counts (RFC 8259: many readers
    keep the last, others refuse the object or keep both), so such a text can mean one thing
    to the program that wrote or checked it and another here, and its canonical form
    (`encode_result`), which is what is hashed and stored, would silently keep one of the two.
    Nothing deskfleet writes has one (`encode_result` cannot), so the refusal costs an honest
    sender nothing; the check costs under a microsecond per object read (a 115 KB research
    result: 0.22 ms instead of 0.15).
    """
    twice: list[bool] = []
    try:
        value = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite,
            object_pairs_hook=functools.partial(_pairs, twice),
        )
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(
            f"{where}: not valid JSON: {exc}" if where else f"not valid JSON: {exc}"
        ) from exc
    if twice:
        raise GivenTwiceError(_path_given_twice(value, where))
    return value


class GivenTwiceError(InvalidArgumentError):
    """A JSON object gave a key twice; `path` names it (`actions[0].idempotent`)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: given twice")
        self.path = path


def given_twice(text: str) -> str | None:
    """The path of the first key some object of the JSON text `text` gives twice
    (`params.arguments.plan.limits.max_actions`); None when none does, or the text is not
    JSON: for a reader that parses the text itself (the MCP server's)."""
    twice: list[bool] = []
    try:
        value = json.loads(text, object_pairs_hook=functools.partial(_pairs, twice))
    except (ValueError, RecursionError):
        return None
    return _path_given_twice(value, "") if twice else None


class _GivenTwice(dict[str, Any]):
    """An object read from JSON that gave `key` twice (kept: the last value)."""

    key = ""


def _pairs(twice: list[bool], pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, marked (and `twice` told) when it gives a key twice."""
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    marked = _GivenTwice(found)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.key = key
            break
        seen.add(key)
    twice.append(True)
    return marked


def _path_given_twice(value: Any, where: str) -> str:
    """The path to the first key given twice in `value` (read with `_pairs`), in document
    order. Walked without recursion: the parser itself took nesting as deep as its limit.
    An object that gave a key twice may have been dropped (its own key given twice, the
    other value kept): then the object holding it is marked too, and is found."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _GivenTwice):
            return _joined(path, node.key)
        if isinstance(node, dict):
            stack.extend(reversed([(_joined(path, k), v) for k, v in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(node)]))
    return where or "(the document)"  # not reached: a mark is always found


def _joined(path: str, key: str) -> str:
    shown = visible(key[:100])
    return f"{path}.{shown}" if path else shown


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
