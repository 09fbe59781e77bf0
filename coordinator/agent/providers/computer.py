"""The neutral `computer` tool every adapter speaks, whatever its provider calls it.

A computer ToolCall's arguments are `{"action": NAME, ...}` with NAME from the Computer Use
vocabulary the workers run (shared/desktop_scope.py ACTIONS: the members of Anthropic's
`computer_toolset_20260801`) and, as each action needs them:

    x, y          the point acted on (clicks, mouse_move, scroll, a drag's start); optional for
                  the clicks, triple_click, left_mouse_down and left_mouse_up (the cursor's place)
    to_x, to_y    a drag's end
    text          what `type` types
    key           `key`'s and `hold_key`'s combos in xdotool notation: "ctrl+a", "Return",
                  "ctrl+a Delete" (hold_key holds one combo)
    dx, dy        scroll clicks; positive dy scrolls down, positive dx scrolls right
    seconds       how long `wait` waits and `hold_key` holds (> 0, bounded by the contract)
    region        zoom's rectangle [x0, y0, x1, y1], in the same space as the points; the
                  worker answers with that region at full resolution

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
            "description": "key: xdotool combos such as 'ctrl+a', 'Return', 'ctrl+a Delete';"
            " hold_key: the one combo to hold",
        },
        "dx": {"type": "integer", "description": "scroll: clicks to the right (negative: left)"},
        "dy": {"type": "integer", "description": "scroll: clicks down (negative: up)"},
        "seconds": {"type": "number", "description": "wait: how long; hold_key: how long"},
        "region": {
            "type": "array",
            "items": {"type": "integer"},
            "minItems": 4,
            "maxItems": 4,
            "description": "zoom: the rectangle [x0, y0, x1, y1] to see at full resolution",
        },
    },
    "required": ["action"],
    "additionalProperties": False,
}


def computer_tool(tools: tuple[ToolSpec, ...]) -> ToolSpec | None:
    """The tool that drives the desktop, if the request offers one."""
    return next((tool for tool in tools if tool.computer is not None), None)


def allowed_actions(tool: ToolSpec) -> frozenset[str]:
    """The actions `tool` offers: its schema's `action` enum when it names one (the goal's
    tools list what the coordinator and its approval allow), else the whole vocabulary."""
    properties = tool.parameters.get("properties")
    action = properties.get("action") if isinstance(properties, dict) else None
    enum = action.get("enum") if isinstance(action, dict) else None
    if isinstance(enum, list) and enum:
        return frozenset(str(name) for name in enum)
    return frozenset(ACTIONS)


def neutral(action: str, **fields: Any) -> dict[str, Any]:
    """`{"action": action, ...}` without the fields that are None."""
    return {"action": action, **{k: v for k, v in fields.items() if v is not None}}
