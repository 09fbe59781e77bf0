"""The plan document, read strictly: the one reading the CLI (`runs submit PLAN.json`), MCP
(`submit_plan`) and the coordinator (`SubmitRun`) share.

    {"title": "...",
     "limits": {"max_actions": N, "max_seconds": S, "estimate_actions": N,
                "estimate_seconds": S, "action_timeout_seconds": S},
     "actions": [{"kind": "diag.echo", "args": {...}, "idempotent": false, "intent": "...",
                  "route": {"worker": ID, "labels": {"k": "v"}, "capability": "headless"},
                  "postcondition": {"kind": "diag.has_line", "args": {...},
                                    "expect": {"present": true}}}]}

Every field has one JSON type and nothing else stands in for it: `"idempotent": "false"` is a
string, not a boolean, and is refused rather than read as true (a non-idempotent effect taken
for one the recovery sweep may rerun); `3.0` is not an integer, `null` is not an object. A key
the document does not define is refused with its path and the nearest known key
(`actions[0].arg: unknown field; did you mean args?`): a misspelled `args` or `max_actions`
would otherwise run with empty arguments or the default budget. Each action's arguments are
checked against its kind (`shared/action_kinds.py`). A postcondition is a read-only check
(`action_kinds.READ_ONLY_KINDS`) that tells, after an unknown outcome, whether the action took
effect: any other kind is refused.

The coordinator receives the plan as a typed `SubmitRunRequest` and checks again what a
message can still get wrong with the same rules (`check_text`, `check_route`,
`check_limits`), so a client that builds requests itself meets the same bounds.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared import action_kinds
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import runs_pb2
from shared.text import refuse_control

MAX_TITLE_CHARS = 1000
MAX_INTENT_CHARS = 4000
MAX_ID_CHARS = 64
MAX_LABELS = 32
MAX_LABEL_CHARS = 256
MAX_LIMIT_ACTIONS = 100_000
MAX_LIMIT_SECONDS = 30 * 24 * 3600.0
MAX_ACTION_TIMEOUT = 24 * 3600.0
# Each limit: whole numbers or not, and its highest value (0 asks for the default).
LIMITS: dict[str, tuple[bool, float]] = {
    "max_actions": (True, MAX_LIMIT_ACTIONS),
    "max_seconds": (False, MAX_LIMIT_SECONDS),
    "estimate_actions": (True, MAX_LIMIT_ACTIONS),
    "estimate_seconds": (False, MAX_LIMIT_SECONDS),
    "action_timeout_seconds": (False, MAX_ACTION_TIMEOUT),
}
PLAN_FIELDS = ("title", "actions", "limits")
ACTION_FIELDS = ("kind", "args", "idempotent", "intent", "route", "postcondition")
POSTCONDITION_FIELDS = ("kind", "args", "expect")
MAX_EXPECT_CHARS = 4096
ROUTE_FIELDS = ("worker", "labels", "capability")
DESKTOP_KIND = (
    "{kind} is not a plan action: desktop input needs an approved scope (`deskfleet desktop"
    " request`, then `desktop act`)"
)


@dataclass(frozen=True)
class PlanRoute:
    worker: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    capability: str = ""


@dataclass(frozen=True)
class Postcondition:
    """A read-only check that tells whether its action took effect: its result must hold
    `expect` (`action_kinds.expected`)."""

    kind: str
    args: dict[str, Any]
    expect: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "args": self.args, "expect": self.expect}


@dataclass(frozen=True)
class PlanAction:
    kind: str
    args: dict[str, Any]
    idempotent: bool = False
    intent: str = ""
    route: PlanRoute = PlanRoute()
    postcondition: Postcondition | None = None


@dataclass(frozen=True)
class PlanDocument:
    actions: tuple[PlanAction, ...]
    title: str = ""
    limits: dict[str, float] = field(default_factory=dict)  # only the limits it sets


def check_text(path: str, text: str, limit: int) -> None:
    """One line of at most `limit` characters: shown in terminals (shared/text.py) and stored
    as text, which on PostgreSQL cannot hold NUL."""
    refuse_control(path, text)
    if len(text) > limit:
        raise InvalidArgumentError(f"{path}: at most {limit} characters (this is {len(text)})")


def check_route(
    path: str,
    worker: str,
    labels: Mapping[str, str],
    capability: str,
    capabilities: Collection[str] | None = None,
) -> None:
    """A route's worker id, labels and capability (one of `capabilities` when given: the
    coordinator knows them, a client leaves that to it)."""
    check_text(f"{path}.worker", worker, MAX_ID_CHARS)
    if len(labels) > MAX_LABELS:
        raise InvalidArgumentError(f"{path}.labels: at most {MAX_LABELS} labels")
    for key, value in labels.items():
        check_text(f"{path}.labels key", key, MAX_LABEL_CHARS)
        check_text(f"{path}.labels[{key!r}]", value, MAX_LABEL_CHARS)
    if capabilities is not None and capability and capability not in capabilities:
        raise InvalidArgumentError(
            f"{path}.capability: unknown {capability[:40]!r} (known: {', '.join(capabilities)})"
        )


def check_postcondition(path: str, kind: str, args: dict[str, Any], expect: Any) -> None:
    """A postcondition's kind (read-only), its arguments for that kind, and what it expects
    (a JSON object with at least one key, small)."""
    if kind not in action_kinds.READ_ONLY_KINDS:
        raise InvalidArgumentError(
            f"{path}.kind: {kind[:40]!r} is not a read-only check; a postcondition runs one of"
            f" {', '.join(action_kinds.READ_ONLY_KINDS)}"
        )
    action_kinds.check_args(path, kind, args)
    if not isinstance(expect, dict) or not expect:
        raise InvalidArgumentError(
            f'{path}.expect: an object the check\'s result must hold, e.g. {{"present": true}},'
            f" not {_a(expect) if expect else 'an empty one'}"
        )
    if _deeper_than(expect, MAX_EXPECT_DEPTH):
        # Checked before any recursive walk (json.dumps would raise RecursionError first).
        raise InvalidArgumentError(f"{path}.expect: nested at most {MAX_EXPECT_DEPTH} deep")
    if len(json.dumps(expect)) > MAX_EXPECT_CHARS:
        raise InvalidArgumentError(f"{path}.expect: at most {MAX_EXPECT_CHARS} characters of JSON")


MAX_EXPECT_DEPTH = 32


def _deeper_than(value: Any, depth: int) -> bool:
    """Whether objects and lists nest in `value` more than `depth` deep (iteratively)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict | list):
            if level > depth:
                return True
            todo.extend(
                (child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return False


def check_limits(limits: Mapping[str, float]) -> None:
    """Each limit finite, in its range (0: the default), whole where it counts actions."""
    for name, value in limits.items():
        whole, high = LIMITS[name]
        # NaN passes every comparison, so finiteness is asked first; a huge integer is
        # compared as it is (it has no float to be made into).
        finite = isinstance(value, int) or math.isfinite(value)
        if not finite or not 0 <= value <= high or (whole and value % 1):
            raise InvalidArgumentError(
                f"limits.{name}: {'a whole number ' if whole else ''}between 0 and {high:g}"
                " (0 = default)"
            )


def read_plan(doc: Any, where: str = "plan") -> PlanDocument:
    """The plan in `doc` (parsed JSON), or InvalidArgumentError naming the first field at
    fault by its path; `where` names the document when its shape as a whole is wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get("actions"), list):
        raise InvalidArgumentError(f'{where}: expected {{"actions": [...]}}')
    _known_keys("", doc, PLAN_FIELDS)
    title = _string("title", doc.get("title", ""))
    check_text("title", title, MAX_TITLE_CHARS)
    actions = tuple(_action(f"actions[{i}]", a) for i, a in enumerate(doc["actions"]))
    return PlanDocument(actions, title, _limits(doc.get("limits", {})))


def _action(path: str, action: Any) -> PlanAction:
    if not isinstance(action, dict):
        raise InvalidArgumentError(
            f'{path}: must be an object ({{"kind": ..., "args": {{...}}}}), not {_a(action)}'
        )
    _known_keys(path, action, ACTION_FIELDS)
    if "kind" not in action:
        raise InvalidArgumentError(f'{path}: needs a "kind"')
    kind = _string(f"{path}.kind", action["kind"])
    args = _object(f"{path}.args", action.get("args", {}))
    if kind.startswith(action_kinds.DESKTOP):
        raise InvalidArgumentError(f"{path}.kind: {DESKTOP_KIND.format(kind=kind[:40])}")
    action_kinds.check_args(path, kind, args)
    idempotent = action.get("idempotent", False)
    if not isinstance(idempotent, bool):
        raise InvalidArgumentError(
            f"{path}.idempotent: must be true or false, not {_a(idempotent)}"
        )
    intent = _string(f"{path}.intent", action.get("intent", ""))
    check_text(f"{path}.intent", intent, MAX_INTENT_CHARS)
    check = None
    if "postcondition" in action:
        check = _postcondition(f"{path}.postcondition", action["postcondition"])
    return PlanAction(kind, args, idempotent, intent, _route(f"{path}.route", action), check)


def _postcondition(path: str, value: Any) -> Postcondition:
    found = _object(path, value)
    _known_keys(path, found, POSTCONDITION_FIELDS)
    if "kind" not in found:
        raise InvalidArgumentError(
            f'{path}: needs a "kind" (one of {", ".join(action_kinds.READ_ONLY_KINDS)})'
        )
    kind = _string(f"{path}.kind", found["kind"])
    args = _object(f"{path}.args", found.get("args", {}))
    check_postcondition(path, kind, args, found.get("expect"))
    return Postcondition(kind, args, dict(found["expect"]))


def _route(path: str, action: dict[str, Any]) -> PlanRoute:
    route = _object(path, action.get("route", {}))
    _known_keys(path, route, ROUTE_FIELDS)
    labels = _object(f"{path}.labels", route.get("labels", {}))
    for key, value in labels.items():
        _string(f"{path}.labels.{key[:100]}", value)
    worker = _string(f"{path}.worker", route.get("worker", ""))
    capability = _string(f"{path}.capability", route.get("capability", ""))
    check_route(path, worker, labels, capability)
    return PlanRoute(worker, labels, capability)


def _limits(limits: Any) -> dict[str, float]:
    found = _object("limits", limits)
    _known_keys("limits", found, tuple(LIMITS))
    for name, value in found.items():
        whole, _ = LIMITS[name]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (whole and not isinstance(value, int)):
            kind = "an integer" if whole else "a number"
            raise InvalidArgumentError(f"limits.{name}: must be {kind}, not {_a(value)}")
    check_limits(found)
    return dict(found)


def _known_keys(path: str, found: dict[str, Any], known: tuple[str, ...]) -> None:
    for key in found:
        if key not in known:
            where = f"{path}.{key[:100]}" if path else key[:100]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
            raise InvalidArgumentError(f"{where}: unknown field; {hint}")


def _string(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{path}: must be a string, not {_a(value)}")
    return value


def _object(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{path}: must be an object, not {_a(value)}")
    return value


def _a(value: Any) -> str:
    """What a JSON value is, for an error line: `the string "false"`, `null`, `a number`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {'true' if value else 'false'}"
    if isinstance(value, str):
        shown = value if len(value) <= 20 else value[:20] + "..."
        return f"the string {shown!r}"
    if isinstance(value, int) and not -(10**15) < value < 10**15:
        return "a number of more than 15 digits"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    return "a list" if isinstance(value, list) else "an object"


def submit_request(plan: Any, where: str = "plan") -> runs_pb2.SubmitRunRequest:
    """A plan document (`{"actions": [...], "limits": {...}}`) as a request, read strictly
    (`shared/plans.py`); `where` names the document in errors about its shape as a whole."""
    doc = read_plan(plan, where)
    limits = doc.limits
    request = runs_pb2.SubmitRunRequest(
        title=doc.title,
        limits=runs_pb2.Limits(
            max_actions=int(limits.get("max_actions", 0)),
            max_seconds=limits.get("max_seconds", 0.0),
            estimate_actions=int(limits.get("estimate_actions", 0)),
            estimate_seconds=limits.get("estimate_seconds", 0.0),
            action_timeout_seconds=limits.get("action_timeout_seconds", 0.0),
        ),
    )
    for action in doc.actions:
        request.actions.append(
            runs_pb2.PlannedAction(
                kind=action.kind,
                args_json=json.dumps(action.args, ensure_ascii=True),
                idempotent=action.idempotent,
                intent=action.intent,
                route=runs_pb2.RouteConstraint(
                    worker=action.route.worker,
                    labels=action.route.labels,
                    capability=action.route.capability,
                ),
                postcondition=(
                    runs_pb2.Postcondition(
                        kind=action.postcondition.kind,
                        args_json=json.dumps(action.postcondition.args, ensure_ascii=True),
                        expect_json=json.dumps(action.postcondition.expect, ensure_ascii=True),
                    )
                    if action.postcondition is not None
                    else None
                ),
            )
        )
    return request
