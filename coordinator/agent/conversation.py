"""The conversation a goal loop keeps with a model, in provider-neutral terms.

Providers translate these to and from their wire formats; the context manager decides which
of them the next model call sees. A tool call and its results are one unit: they are kept,
archived or summarized together, never split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    media_type: str  # image/png, image/jpeg, image/webp
    data: bytes = field(repr=False)


Content = TextPart | ImagePart


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str  # computer | research | fetch | recall | ask_human | ...
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: tuple[Content, ...]
    is_error: bool = False


@dataclass(frozen=True)
class Message:
    """One turn. An assistant turn may carry tool calls; the user turn after it carries their
    results (and may carry text too, e.g. guidance)."""

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    # Why it is there: request | guidance | answer | summary | archived | "" (ordinary turn)
    kind: str = ""


@dataclass(frozen=True)
class ComputerSpec:
    """The desktop the computer tool acts on, as the model should see it (a scaled space)."""

    width: int
    height: int


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments
    # Set for the `computer` tool: providers that have a built-in computer-use tool use theirs.
    computer: ComputerSpec | None = None


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ModelTurn:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop: str  # "tool_use" | "end" | "max_tokens" | "refusal"
    usage: Usage = Usage()


class ModelError(Exception):
    """A model call failed; the message is one line a person can act on."""


class ModelTimeout(ModelError):
    """The whole call ran past its time limit (retried once by the loop)."""


class ModelPartial(ModelError):
    """A streamed response broke off part-way: never retried (its effects may be half-known)."""


class ModelConfigError(ModelError):
    """A provider is not configured (no key, unknown provider): said at submit time."""


class ModelSpecError(ModelConfigError):
    """The caller named a model this coordinator does not offer (malformed, unknown provider,
    no such script): the caller's mistake, where ModelConfigError is the operator's."""


class Model(Protocol):
    """One model behind one provider."""

    @property
    def name(self) -> str: ...

    def complete(
        self,
        system: str,
        messages: tuple[Message, ...],
        tools: tuple[ToolSpec, ...],
        *,
        timeout: float,
    ) -> ModelTurn: ...
