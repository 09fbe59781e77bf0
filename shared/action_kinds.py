"""The action kinds a plan may hold, and the arguments each takes.

The worker registers a handler for each (worker_agent/); the coordinator checks a plan against
this contract when it is submitted, so an unknown kind or argument is INVALID_ARGUMENT naming
what the kind takes, not a failure later on a worker. Desktop kinds are not plan actions (they
run under an approved scope, `desktop act`). Research apps are not kinds: a worker advertises
the apps it offers (`Advertisement.research_apps`) and `app.research` names one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shared import desktop_scope
from shared.errors import InvalidArgumentError

ANY, STRING, NUMBER, INTEGER = "any", "string", "number", "integer"
BOOLEAN, OBJECT = "boolean", "object"


@dataclass(frozen=True)
class Arg:
    type: str
    required: bool = False
    nullable: bool = False
    minimum: float | None = None
    # Set by the coordinator, never by a plan (a plan that sets it is refused).
    coordinator_only: bool = False


@dataclass(frozen=True)
class Kind:
    args: dict[str, Arg]

    def takes(self) -> str:
        """`value (required), ...`: what the kind takes, for an error line."""
        shown = [
            f"{name} ({a.type}{', required' if a.required else ''})"
            for name, a in sorted(self.args.items())
            if not a.coordinator_only
        ]
        return ", ".join(shown) or "no arguments"


_POLICY = Arg(OBJECT)
KINDS: dict[str, Kind] = {
    "diag.echo": Kind({"value": Arg(ANY, nullable=True)}),
    "diag.sleep": Kind({"seconds": Arg(NUMBER, required=True, minimum=0)}),
    "diag.fail": Kind(
        {
            "message": Arg(STRING),
            "fail_attempts": Arg(INTEGER, nullable=True, minimum=0),
            "seconds": Arg(NUMBER, minimum=0),
        }
    ),
    "diag.append": Kind({"name": Arg(STRING, required=True), "line": Arg(STRING, required=True)}),
    "diag.has_line": Kind(
        {"name": Arg(STRING, required=True), "line": Arg(STRING, required=True)}
    ),
    "browser.fetch": Kind(
        {"url": Arg(STRING, required=True), "policy": _POLICY,
         "visible": Arg(BOOLEAN, coordinator_only=True)}
    ),
    "browser.screenshot": Kind(
        {"url": Arg(STRING, required=True), "policy": _POLICY, "full_page": Arg(BOOLEAN),
         "visible": Arg(BOOLEAN, coordinator_only=True)}
    ),
    "browser.check": Kind(
        {"url": Arg(STRING, required=True), "text": Arg(STRING), "policy": _POLICY}
    ),
    "browser.search": Kind(
        {"query": Arg(STRING, required=True), "template": Arg(STRING), "format": Arg(STRING),
         "profile": Arg(STRING),
         "result": Arg(STRING), "link": Arg(STRING), "snippet": Arg(STRING),
         "max_results": Arg(INTEGER, minimum=1), "policy": _POLICY,
         "visible": Arg(BOOLEAN, coordinator_only=True)}
    ),
    "app.research": Kind(
        {"app": Arg(STRING, required=True), "query": Arg(STRING, required=True),
         "max_sources": Arg(INTEGER, minimum=1), "timeout": Arg(NUMBER, minimum=0),
         "route": Arg(STRING)}
    ),
}  # fmt: skip
APP_RESEARCH = "app.research"
DESKTOP = "desktop."

# Kinds whose rerun changes nothing outside the worker: reads, fetches, screenshots, waits.
# Clicks, typing, keys and writes (`diag.append`, every other `desktop.*`) are not. The worker
# keeps a durable started record (an fsync before the effect) only for attempts that are not
# harmless to rerun; desktop runs mark exactly these desktop kinds idempotent.
# Kinds that only look and change nothing anywhere: the checks a postcondition may run (SPEC:
# postconditions). `diag.has_line` reads a scratch file, `browser.check` loads a page.
READ_ONLY_KINDS = ("diag.has_line", "browser.check")

IDEMPOTENT_KINDS = frozenset(
    {
        "diag.echo",
        "diag.sleep",
        "diag.fail",
        *READ_ONLY_KINDS,
        "browser.fetch",
        "browser.screenshot",
        "browser.search",
        APP_RESEARCH,
        *(f"{DESKTOP}{action}" for action in desktop_scope.IDEMPOTENT),
    }
)


def rerun_is_harmless(kind: str, idempotent: bool) -> bool:
    """Whether an attempt may be forgotten by a restart and simply sent again: the kind is
    harmless to repeat and the plan says so too (a plan may call a read non-idempotent, to
    have a person decide after an unknown outcome; it then keeps its started record)."""
    return idempotent and kind in IDEMPOTENT_KINDS


def _type_ok(arg: Arg, value: Any) -> bool:
    if value is None:
        return arg.nullable
    if arg.type == ANY:
        return True
    if arg.type == STRING:
        return isinstance(value, str)
    if arg.type == BOOLEAN:
        return isinstance(value, bool)
    if arg.type == OBJECT:
        return isinstance(value, dict)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if arg.type == INTEGER and not isinstance(value, int):
        return False
    if not math.isfinite(value):
        return False
    return arg.minimum is None or value >= arg.minimum


def check_args(
    field: str, kind: str, args: dict[str, Any], *, by_coordinator: bool = False
) -> None:
    """InvalidArgumentError, naming what `kind` takes, unless `args` fit its contract.

    `field` is where the action sits (`actions[0]`). `by_coordinator` lets through the
    arguments only the coordinator sets.
    """
    spec = KINDS.get(kind)
    if spec is None:
        raise InvalidArgumentError(
            f"{field}.kind: unknown kind {kind[:100]!r} (plan actions: {', '.join(sorted(KINDS))})"
        )
    takes = f"{kind} takes: {spec.takes()}"
    for name, value in args.items():
        arg = spec.args.get(name)
        if arg is None or (arg.coordinator_only and not by_coordinator):
            why = "set by the coordinator only" if arg is not None else "not an argument"
            raise InvalidArgumentError(f"{field}.args.{name[:100]}: {why} of {kind} ({takes})")
        if not _type_ok(arg, value):
            bound = f" >= {arg.minimum:g}" if arg.minimum is not None else ""
            raise InvalidArgumentError(
                f"{field}.args.{name}: must be {'an' if arg.type[0] in 'aeiou' else 'a'}"
                f" {arg.type}{bound} ({takes})"
            )
    missing = [n for n, a in sorted(spec.args.items()) if a.required and n not in args]
    if missing:
        raise InvalidArgumentError(f"{field}.args.{missing[0]}: required ({takes})")


def expected(expect: Any, found: Any) -> bool:
    """Whether `found` (a check's result) holds `expect`: every key of an expected object is
    in the found object with an equal value, objects compared so recursively; anything else
    compares equal as JSON values do (so `1` does not match `true`)."""
    if isinstance(expect, dict):
        return isinstance(found, dict) and all(
            key in found and expected(value, found[key]) for key, value in expect.items()
        )
    if isinstance(expect, bool) or isinstance(found, bool):
        return type(expect) is type(found) and expect == found
    return bool(expect == found)
