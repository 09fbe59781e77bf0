"""The neutral `computer` tool every adapter speaks, whatever its provider calls it.

A computer ToolCall's arguments are `{"action": NAME, ...}` with NAME from the Computer Use
vocabulary the workers run (shared/desktop_scope.py ACTIONS) and, as each action needs them:

    x, y          the point acted on (clicks, mouse_move, scroll, a drag's start)
    to_x, to_y    a drag's end
    text          what `type` types
    key           `key`'s combos in xdotool notation: "ctrl+a", "Return", "ctrl+a Delete"
    dx, dy        scroll clicks; positive dy scrolls down, positive dx scrolls right
    seconds       how long `wait` waits

Provider actions with no neutral counterpart keep their own name and fields: the worker
refuses them by name and the refusal goes back to the model, which then picks another action.
"""

from __future__ import annotations

from typing import Any

from coordinator.agent.conversation import ToolSpec
from shared import desktop_scope

ACTIONS = desktop_scope.ACTIONS

# For providers without a built-in computer tool, when the ToolSpec brings no schema itself.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "x": {"type": "integer", "description": "point acted on, in screen pixels from the left"},
        "y": {"type": "integer", "description": "point acted on, in screen pixels from the top"},
        "to_x": {"type": "integer", "description": "left_click_drag: where the drag ends"},
        "to_y": {"type": "integer", "description": "left_click_drag: where the drag ends"},
        "text": {"type": "string", "description": "type: the text to type"},
        "key": {
            "type": "string",
            "description": "key: xdotool combos such as 'ctrl+a', 'Return', 'ctrl+a Delete'",
        },
        "dx": {"type": "integer", "description": "scroll: clicks to the right (negative: left)"},
        "dy": {"type": "integer", "description": "scroll: clicks down (negative: up)"},
        "seconds": {"type": "number", "description": "wait: how long"},
    },
    "required": ["action"],
    "additionalProperties": False,
}


def computer_tool(tools: tuple[ToolSpec, ...]) -> ToolSpec | None:
    """The tool that drives the desktop, if the request offers one."""
    return next((tool for tool in tools if tool.computer is not None), None)


def neutral(action: str, **fields: Any) -> dict[str, Any]:
    """`{"action": action, ...}` without the fields that are None."""
    return {"action": action, **{k: v for k, v in fields.items() if v is not None}}
