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

A policy (or an owner's entry) may also say how research searches when a request names no
search of its own: `"search": {"url": "https://searx.example/search?q={query}", "format":
"searxng"}` (a SearXNG instance's JSON API), or an HTML results page with `"result"`,
`"link"` and `"snippet"` CSS selectors (none: the generic extractor), or a named `"profile"`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.model import capabilities
from coordinator.runs.plan import check_url
from shared.errors import InvalidArgumentError
from shared.search import search_spec

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
    search: dict[str, str] = field(default_factory=dict)
    owner_search: dict[str, dict[str, str]] = field(default_factory=dict)

    def research_routes(self, owner_id: str, owner_name: str) -> list[dict[str, Any]]:
        routes = self.owners.get(owner_id) or self.owners.get(owner_name) or self.research
        return [dict(r) for r in routes]

    def research_search(self, owner_id: str, owner_name: str) -> dict[str, str]:
        """The search a research run uses when its request names none (may be empty)."""
        found = self.owner_search.get(owner_id) or self.owner_search.get(owner_name)
        return dict(found or self.search)


SEARCH_KEYS = {"url": "template", "format": "format", "result": "result", "link": "link"}
SEARCH_KEYS |= {"snippet": "snippet", "profile": "profile"}


def _search(data: Any, where: str) -> dict[str, str]:
    found = data.get("research", {}).get("search") if isinstance(data, dict) else None
    if found is None:
        return {}
    here = f"{where}.research.search"
    if not isinstance(found, dict):
        raise InvalidArgumentError(f"{here}: an object (url, format, result, link, snippet)")
    args: dict[str, str] = {}
    for key, value in found.items():
        if key not in SEARCH_KEYS or not isinstance(value, str):
            raise InvalidArgumentError(
                f"{here}.{key}: not a search field (a string of {', '.join(SEARCH_KEYS)})"
            )
        args[SEARCH_KEYS[key]] = value
    if "template" in args:
        check_url(f"{here}.url", args["template"], template=True)
    try:
        search_spec(args)
    except ValueError as exc:
        field_name, _, why = str(exc).partition(": ")
        name = {"template": "url"}.get(field_name, field_name)
        raise InvalidArgumentError(f"{here}.{name}: {why}") from exc
    return args


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
        _search(data, "policy"),
        {
            str(name): found
            for name, value in owners.items()
            if (found := _search(value, f"owners.{name}"))
        },
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
