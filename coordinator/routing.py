"""The routing policy: where research runs, in order, loaded from `serve --policy FILE`.

    {"research": {"routes": [
        {"name": "deep", "app": "deep-research", "timeout": 120},
        {"name": "lab-browsers", "capability": "headless", "labels": {"site": "lab"}},
        {"name": "any-browser", "capability": "headless"},
        {"name": "desktop", "capability": "computer_use", "needs_approval": true}]},
     "owners": {"alice": {"research": {"routes": [...]}}}}

Routes are tried in order for every work unit; a route with no eligible worker is named in
the run's waiting reason and the next is tried. A route that `needs_approval` (Computer Use
on a desktop) is never taken without an approved desktop scope: until one exists the run
waits for authority. An owner's routes (by user id or name) replace the default ones.

An `app` route (optional; `timeout` in seconds, default 120, at most 3600) is an external
research command that a worker offers (`deskfleet-worker run --research-app NAME=COMMAND`).
It is its own branch of the run, never a fallback for a work unit: without `--thorough`
it is tried before the browsers and, when it answers, its sources are the report; with
`--thorough` it runs beside them and the report merges both. Its failures (no worker offers
the app, time-out, credit limit, bad output) are journaled under its branch and never stop
the other routes. The default policy has no app route.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator import capabilities
from shared.errors import InvalidArgumentError

DEFAULT: dict[str, Any] = {
    "research": {
        "routes": [
            {"name": "headless", "capability": "headless"},
            {"name": "desktop", "capability": "computer_use", "needs_approval": True},
        ]
    }
}


APP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # as the worker's flag takes it
APP_TIMEOUT = 120.0
MAX_APP_TIMEOUT = 3600.0


@dataclass(frozen=True)
class RoutingPolicy:
    research: tuple[dict[str, Any], ...]
    owners: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)

    def research_routes(self, owner_id: str, owner_name: str) -> list[dict[str, Any]]:
        routes = self.owners.get(owner_id) or self.owners.get(owner_name) or self.research
        return [dict(r) for r in routes]


def _routes(data: Any, where: str) -> tuple[dict[str, Any], ...]:
    routes = (data or {}).get("research", {}).get("routes") if isinstance(data, dict) else None
    if not isinstance(routes, list) or not routes:
        raise InvalidArgumentError(f"{where}.research.routes: a non-empty list of routes")
    out = []
    for i, route in enumerate(routes):
        here = f"{where}.research.routes[{i}]"
        if not isinstance(route, dict) or not isinstance(route.get("name"), str):
            raise InvalidArgumentError(f'{here}: needs a "name"')
        if "app" in route:
            out.append(_app_route(route, here))
            continue
        if route.get("capability") not in capabilities.ALL:
            raise InvalidArgumentError(f"{here}.capability: one of {', '.join(capabilities.ALL)}")
        labels = route.get("labels", {})
        if not isinstance(labels, dict):
            raise InvalidArgumentError(f"{here}.labels: an object of label values")
        out.append(
            {
                "name": route["name"],
                "capability": route["capability"],
                "labels": {str(k): str(v) for k, v in labels.items()},
                "needs_approval": bool(
                    route.get("needs_approval", route["capability"] == "computer_use")
                ),
            }
        )
    return tuple(out)


def _app_route(route: dict[str, Any], here: str) -> dict[str, Any]:
    if "capability" in route or "labels" in route:
        raise InvalidArgumentError(f"{here}: an app route takes no capability or labels")
    app = route["app"]
    if not isinstance(app, str) or not APP_NAME.match(app):
        raise InvalidArgumentError(
            f"{here}.app: the name a worker gives with --research-app NAME=COMMAND"
        )
    timeout = route.get("timeout", APP_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout <= MAX_APP_TIMEOUT
    ):
        raise InvalidArgumentError(f"{here}.timeout: seconds, more than 0 and at most 3600")
    return {"name": route["name"], "app": app, "timeout": float(timeout)}


def parse(data: Any) -> RoutingPolicy:
    owners = data.get("owners", {}) if isinstance(data, dict) else {}
    if not isinstance(owners, dict):
        raise InvalidArgumentError("owners: an object of owner name or id to routes")
    return RoutingPolicy(
        _routes(data, "policy"),
        {str(name): _routes(value, f"owners.{name}") for name, value in owners.items()},
    )


def load(path: Path | None) -> RoutingPolicy:
    """The policy in `path`, or the documented default."""
    if path is None:
        return parse(DEFAULT)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"--policy {path}: {exc}") from exc
    try:
        return parse(data)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"--policy {path}: {exc.message}") from exc
