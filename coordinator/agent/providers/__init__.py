"""Model providers behind the one `Model` protocol (coordinator/agent/conversation.py).

`open_model("PROVIDER:MODEL")` picks one:

    anthropic:MODEL    the Anthropic Messages API, with its computer tool: the toolset
                       computer_toolset_20260801, or computer_20251124 / computer_20250124
                       (serve --anthropic-computer-tool)
                       ANTHROPIC_API_KEY (required), ANTHROPIC_BASE_URL (https://api.anthropic.com)
    openai:MODEL       the OpenAI Responses API, with its computer tool: computer, or
                       computer_use_preview (serve --openai-computer-tool)
                       OPENAI_API_KEY (required), OPENAI_BASE_URL (https://api.openai.com/v1)
    openai-chat:MODEL  any OpenAI-compatible chat-completions server, computer as a function
                       OPENAI_BASE_URL, OPENAI_API_KEY — the key is optional when the base URL
                       is not api.openai.com: local servers (llama.cpp, vLLM, Ollama) take none
    scripted:NAME      replays the JSON script NAME from the operator's scripts directory
                       (serve --scripted-models-dir; providers/scripted.py): tests, demos

Opening a model checks its configuration and calls nothing: a missing key is a
ModelConfigError at submit time, never a surprise on the first step; a model the caller names
that is not offered (malformed, unknown provider, no such script) is a ModelSpecError. Keys,
base URLs and the scripts directory are the operator's: nothing a caller sends picks an
endpoint or a file. Opening a scripted model reads a file: call open_model off the event loop.
Every remote provider goes through its official SDK (`anthropic`, `openai`), with the SDK's
retries, under the loop's whole-call time limit (providers/calls.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from coordinator.agent.conversation import Model, ModelConfigError, ModelSpecError
from coordinator.agent.providers import anthropic, openai_responses
from coordinator.agent.providers.anthropic import AnthropicModel
from coordinator.agent.providers.openai_chat import OpenAIChatModel
from coordinator.agent.providers.openai_responses import OpenAIResponsesModel
from coordinator.agent.providers.scripted import ScriptedModel

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
OPENAI_BASE_URL = "https://api.openai.com/v1"
T = TypeVar("T", bound=str)

PROVIDERS = ("anthropic", "openai", "openai-chat", "scripted")
# The built-in computer tools each provider can be told to use (serve --*-computer-tool).
ANTHROPIC_COMPUTER_TOOLS = anthropic.COMPUTER_TOOLS
OPENAI_COMPUTER_TOOLS = openai_responses.COMPUTER_TOOLS
DEFAULT_ANTHROPIC_COMPUTER_TOOL = anthropic.DEFAULT_COMPUTER_TOOL
DEFAULT_OPENAI_COMPUTER_TOOL = openai_responses.DEFAULT_COMPUTER_TOOL

__all__ = [
    "ANTHROPIC_COMPUTER_TOOLS",
    "DEFAULT_ANTHROPIC_COMPUTER_TOOL",
    "DEFAULT_OPENAI_COMPUTER_TOOL",
    "OPENAI_COMPUTER_TOOLS",
    "PROVIDERS",
    "AnthropicModel",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "ScriptedModel",
    "open_model",
]


def open_model(
    spec: str,
    env: Mapping[str, str] = os.environ,
    *,
    scripts_dir: Path | None = None,
    anthropic_computer_tool: str = DEFAULT_ANTHROPIC_COMPUTER_TOOL,
    openai_computer_tool: str = DEFAULT_OPENAI_COMPUTER_TOOL,
) -> Model:
    """The model named by `PROVIDER:MODEL`, configured from `env` (and `scripts_dir` for
    scripted models, the computer tools for the providers that have one built in); nothing
    is called yet."""
    provider, sep, model = spec.partition(":")
    provider, model = provider.strip(), model.strip()
    if not sep or not model or len(spec) > 300 or not spec.isprintable():
        raise ModelSpecError(
            f"{spec[:80]!r}: expected PROVIDER:MODEL with PROVIDER one of {', '.join(PROVIDERS)}"
        )
    if provider == "anthropic":
        return AnthropicModel(
            model,
            api_key=_key(env, "ANTHROPIC_API_KEY"),
            base_url=_base_url(env, "ANTHROPIC_BASE_URL", ANTHROPIC_BASE_URL),
            computer_tool=_choice(anthropic_computer_tool, anthropic.COMPUTER_TOOLS),
        )
    if provider == "openai":
        return OpenAIResponsesModel(
            model,
            api_key=_key(env, "OPENAI_API_KEY"),
            base_url=_base_url(env, "OPENAI_BASE_URL", OPENAI_BASE_URL),
            computer_tool=_choice(openai_computer_tool, openai_responses.COMPUTER_TOOLS),
        )
    if provider == "openai-chat":
        base_url = _base_url(env, "OPENAI_BASE_URL", OPENAI_BASE_URL)
        key = env.get("OPENAI_API_KEY", "").strip()
        if not key and urlsplit(base_url).hostname == urlsplit(OPENAI_BASE_URL).hostname:
            raise ModelConfigError(
                f"{_missing('OPENAI_API_KEY')} (it may be left out only when the coordinator's"
                " OPENAI_BASE_URL points at a local server)"
            )
        return OpenAIChatModel(model, base_url=base_url, api_key=key)
    if provider == "scripted":
        return ScriptedModel.from_directory(scripts_dir, model)
    raise ModelSpecError(
        f"{spec[:80]!r}: unknown provider {provider[:40]!r}"
        f" (expected one of {', '.join(PROVIDERS)})"
    )


def _choice(tool: str, choices: tuple[T, ...]) -> T:
    """`tool` as one of `choices`: the operator's setting, checked again here so that a bad
    one is a configuration error, not a crash mid-run."""
    for choice in choices:
        if tool == choice:
            return choice
    raise ModelConfigError(f"computer tool {tool!r}: expected one of {', '.join(choices)}")


def _key(env: Mapping[str, str], variable: str) -> str:
    key = env.get(variable, "").strip()
    if not key:
        raise ModelConfigError(_missing(variable))
    return key


def _missing(variable: str) -> str:
    # Goals run in the coordinator: a key set only in the shell of the CLI that asks is
    # never seen, so say whose environment it belongs in.
    return (
        f"the coordinator has no {variable}: set it in the coordinator's environment (the"
        " shell or service that runs `deskfleet-coordinator serve`) and restart it"
    )


def _base_url(env: Mapping[str, str], variable: str, default: str) -> str:
    url = env.get(variable, "").strip() or default
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ModelConfigError(
            f"the coordinator's {variable}={url!r} is not an http(s) URL: fix it in the"
            " coordinator's environment and restart it"
        )
    return url.rstrip("/")
