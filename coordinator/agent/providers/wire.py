"""Small pieces the OpenAI-style wire formats share: data URLs, JSON-string arguments, usage."""

from __future__ import annotations

import base64
import json
from typing import Any

from coordinator.agent.conversation import ImagePart, Usage

# Arguments that are not a JSON object reach the tool under this one name: the tool refuses
# them and the refusal goes back to the model, which is how it corrects itself (local models
# do send broken JSON now and then). Failing the whole call would end the run instead.
UNPARSED = "unparsed_arguments"


def data_url(image: ImagePart) -> str:
    return f"data:{image.media_type};base64,{base64.b64encode(image.data).decode('ascii')}"


def parse_arguments(raw: object) -> dict[str, Any]:
    """A function call's `arguments` (a JSON string, or already an object) -> a dict."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(str(raw))
    except ValueError:
        return {UNPARSED: str(raw)}
    return value if isinstance(value, dict) else {UNPARSED: str(raw)}


def dump_arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def usage(doc: object, input_name: str, output_name: str) -> Usage:
    if not isinstance(doc, dict):
        return Usage()
    return Usage(
        input_tokens=int(doc.get(input_name) or 0), output_tokens=int(doc.get(output_name) or 0)
    )
