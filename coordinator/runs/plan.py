"""A plan as the coordinator accepts it: its actions, limits and routes, each checked and
bounded before anything is written (the document's shape is `shared/plans.py`, which the CLI
and MCP check too), and the network policy a browser action carries."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from coordinator.model import capabilities
from shared import action_kinds, plans
from shared.errors import InvalidArgumentError
from shared.receipts import decode_result, encode_result
from shared.search import search_spec

MAX_ACTIONS_PER_PLAN = 1000
MAX_ARGS_CHARS = 4 * 1024 * 1024  # the server takes messages up to 16 MiB
MAX_PLAN_CHARS = 8 * 1024 * 1024  # all of a plan's arguments, intents, routes and title
DEFAULT_MAX_SECONDS = 3600.0
DEFAULT_ACTION_TIMEOUT = 60.0
# Explicit bounds on everything a plan carries (`shared/plans.py`, which clients check too):
# past them a request is a mistake or an attack, and a clear INVALID_ARGUMENT beats a store
# error or a run that can never finish.
KIND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}")
# Where a browser may be sent. Every other scheme (file:, chrome:, javascript:, data:, ...)
# reads the worker's own machine or runs code instead of fetching a page: it is refused here,
# before anything is written, and again by the worker's policy on every hop.
URL_SCHEMES = ("http", "https")
MAX_URL_CHARS = 4096
MAX_CHECK_TEXT = 1000
# Browser arguments a plan may set; `visible` (a headed browser on a person's desktop) is set
# by the coordinator only, under a research approval.
BROWSER_ARGS = {
    "browser.fetch": {"url", "policy"},
    "browser.screenshot": {"url", "policy", "full_page"},
    "browser.check": {"url", "text", "policy"},
    "browser.search": {
        "query", "template", "format", "profile", "result", "link", "snippet", "max_results",
        "policy",
    },
}  # fmt: skip
# A plan narrows the operator's policy: each number at most the worker's own default.
POLICY_NUMBERS: dict[str, tuple[type, float, float]] = {
    "max_redirects": (int, 0, 5),
    "max_bytes": (int, 1, 2 * 1024 * 1024),
    "timeout": (float, 0.1, 120.0),
    "max_text": (int, 0, 100_000),
    "max_links": (int, 0, 100),
}
POLICY_DOMAINS = 100


@dataclass(frozen=True)
class PlannedAction:
    kind: str
    args: dict[str, Any]
    idempotent: bool
    route: dict[str, Any]
    intent: str = ""
    # {"kind", "args", "expect"}: the read-only check that settles an unknown outcome.
    postcondition: dict[str, Any] | None = None


@dataclass(frozen=True)
class Plan:
    actions: tuple[PlannedAction, ...]
    title: str = ""
    max_actions: int = 0
    max_seconds: float = 0.0
    estimate_actions: int = 0
    estimate_seconds: float = 0.0
    action_timeout: float = 0.0
    kind: str = "plan"
    spec: dict[str, Any] | None = None
    # Stage of each action; None: one after another (a plan runs in order).
    stages: tuple[int, ...] | None = None


_text = plans.check_text


def _route_checked(field: str, route: dict[str, Any]) -> None:
    plans.check_route(
        field,
        str(route.get("worker", "")),
        {str(k): str(v) for k, v in (route.get("labels") or {}).items()},
        str(route.get("capability", "")),
        capabilities.ALL,
    )


def _limits_checked(plan: Plan) -> None:
    plans.check_limits(
        {
            "max_actions": plan.max_actions,
            "max_seconds": plan.max_seconds,
            "estimate_actions": plan.estimate_actions,
            "estimate_seconds": plan.estimate_seconds,
            "action_timeout_seconds": plan.action_timeout,
        }
    )


def validate(plan: Plan) -> tuple[dict[str, Any], int]:
    """The run's limits, and the bytes its plan stores (ASCII JSON arguments and routes,
    intents, title, and the spec of a research run)."""
    _text("title", plan.title, plans.MAX_TITLE_CHARS)
    if not plan.actions:
        raise InvalidArgumentError("actions: a plan needs at least one action")
    if len(plan.actions) > MAX_ACTIONS_PER_PLAN:
        raise InvalidArgumentError(f"actions: at most {MAX_ACTIONS_PER_PLAN} per plan")
    size = len(plan.title.encode())
    for i, action in enumerate(plan.actions):
        if not KIND.fullmatch(action.kind):
            raise InvalidArgumentError(
                f"actions[{i}].kind: 1-100 letters, digits, '_', '.', ':', '-' (got"
                f" {action.kind[:40]!r})"
            )
        # Unknown kinds and arguments are refused here, not on a worker later.
        action_kinds.check_args(
            f"actions[{i}]", action.kind, action.args, by_coordinator=plan.kind != "plan"
        )
        _text(f"actions[{i}].intent", action.intent, plans.MAX_INTENT_CHARS)
        try:
            args = len(encode_result(action.args))
        except InvalidArgumentError as exc:  # 1e400 parses, as infinity, which JSON cannot hold
            raise InvalidArgumentError(f"actions[{i}].args: {exc.message}") from exc
        if args > MAX_ARGS_CHARS:
            raise InvalidArgumentError(f"actions[{i}].args: larger than {MAX_ARGS_CHARS} bytes")
        _route_checked(f"actions[{i}].route", action.route)
        route = len(encode_result(action.route)) if action.route else 0  # stored per action
        check = 0
        if action.postcondition is not None:
            where = f"actions[{i}].postcondition"
            pc = action.postcondition
            plans.check_postcondition(where, pc["kind"], pc["args"], pc["expect"])
            check = len(encode_result(pc))
        size += args + len(action.intent.encode()) + route + check
        if size > MAX_PLAN_CHARS:
            raise InvalidArgumentError(
                f"actions: the plan is larger than {MAX_PLAN_CHARS} bytes at actions[{i}]"
                " (arguments, intents, routes and title together): split it into several runs"
            )
    size += len(encode_result(plan.spec)) if plan.spec else 0  # a research run's request
    _limits_checked(plan)
    n = len(plan.actions)
    max_actions = plan.max_actions or max(3 * n, n + 10)
    if max_actions < n:
        raise InvalidArgumentError(
            f"limits.max_actions: {max_actions} is fewer than the {n} actions"
        )
    max_seconds = plan.max_seconds or DEFAULT_MAX_SECONDS
    limits = {
        "max_actions": max_actions,
        "max_seconds": max_seconds,
        "estimate_actions": min(plan.estimate_actions or max_actions, max_actions),
        "estimate_seconds": min(plan.estimate_seconds or max_seconds, max_seconds),
        "action_timeout_seconds": plan.action_timeout or DEFAULT_ACTION_TIMEOUT,
    }
    return limits, size


def check_url(field: str, url: object, *, template: bool = False) -> str:
    """`url` if a browser may be sent there: http or https with a host, bounded, no NUL."""
    if not isinstance(url, str) or not url:
        raise InvalidArgumentError(f"{field}: a URL is required (a non-empty string)")
    _text(field, url, MAX_URL_CHARS)
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise InvalidArgumentError(f"{field}: a URL has no spaces or control characters")
    probe = url.replace("{query}", "q") if template else url
    try:
        parts = urlsplit(probe)
        host = parts.hostname
    except ValueError as exc:
        raise InvalidArgumentError(f"{field}: not a URL ({exc})") from exc
    if parts.scheme.lower() not in URL_SCHEMES:
        raise InvalidArgumentError(
            f"{field}: scheme {parts.scheme or '(none)'!r} is not allowed"
            f" ({' and '.join(URL_SCHEMES)} only): {url[:80]!r}"
        )
    if not host:
        raise InvalidArgumentError(f"{field}: the URL has no host: {url[:80]!r}")
    return url


def _policy_checked(field: str, policy: object) -> dict[str, Any]:
    if not isinstance(policy, dict):
        raise InvalidArgumentError(f"{field}: must be an object")
    known = {"allow_domains", "deny_domains", "allow_private", *POLICY_NUMBERS}
    for key, value in policy.items():
        if key not in known:
            raise InvalidArgumentError(
                f"{field}.{key}: not a policy field (known: {', '.join(sorted(known))})"
            )
        if key == "allow_private":  # replaced by the operator's setting whatever it says
            if not isinstance(value, bool):
                raise InvalidArgumentError(f"{field}.{key}: true or false")
        elif key in POLICY_NUMBERS:
            kind, low, high = POLICY_NUMBERS[key]
            ok_type = isinstance(value, int | float) if kind is float else isinstance(value, int)
            if isinstance(value, bool) or not ok_type or not math.isfinite(value):
                raise InvalidArgumentError(f"{field}.{key}: a number between {low:g} and {high:g}")
            if not low <= value <= high:
                raise InvalidArgumentError(f"{field}.{key}: between {low:g} and {high:g}")
        elif not isinstance(value, list) or len(value) > POLICY_DOMAINS:
            raise InvalidArgumentError(f"{field}.{key}: a list of at most {POLICY_DOMAINS} domains")
        else:
            for j, domain in enumerate(value):
                if not isinstance(domain, str) or not domain:
                    raise InvalidArgumentError(f"{field}.{key}[{j}]: a domain name (a string)")
                _text(f"{field}.{key}[{j}]", domain, 253)
    return policy


def _browser_args_checked(field: str, kind: str, args: dict[str, Any]) -> None:
    allowed = BROWSER_ARGS.get(kind)
    if allowed is None:
        return  # a browser kind this coordinator does not know: the worker refuses it
    for key in args:
        if key not in allowed:
            why = "set by the coordinator only" if key == "visible" else "not an argument"
            raise InvalidArgumentError(
                f"{field}.{key}: {why} of {kind} (it takes: {', '.join(sorted(allowed))})"
            )
    if "url" in allowed:
        check_url(f"{field}.url", args.get("url"))
    if kind == "browser.search":
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError(f"{field}.query: a non-empty string")
        _text(f"{field}.query", query, 500)
        if "template" in args:
            template = check_url(f"{field}.template", args["template"], template=True)
            if "{query}" not in template:
                raise InvalidArgumentError(f"{field}.template: needs {{query}}")
        for key in ("format", "profile", "result", "link", "snippet"):
            if key in args and (not isinstance(args[key], str) or len(args[key]) > 200):
                raise InvalidArgumentError(f"{field}.{key}: a string of at most 200 characters")
        try:
            search_spec(args)  # the worker checks the same: a bad profile never gets there
        except ValueError as exc:
            raise InvalidArgumentError(f"{field}.{exc}") from exc
        count = args.get("max_results", 10)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 100:
            raise InvalidArgumentError(f"{field}.max_results: an integer between 1 and 100")
    if "text" in args:  # browser.check: a text the page is looked for in
        _text(f"{field}.text", str(args["text"]), MAX_CHECK_TEXT)
    if "full_page" in args and not isinstance(args["full_page"], bool):
        raise InvalidArgumentError(f"{field}.full_page: true or false")
    if "policy" in args:
        _policy_checked(f"{field}.policy", args["policy"])


def with_network_policy(
    action: PlannedAction, allow_private: bool, field: str = "args"
) -> PlannedAction:
    """Browser actions carry the coordinator's network policy, whatever the plan asked for.

    An owner may narrow where the browser goes (allowed and denied domains) but never open
    loopback or private networks: that is the operator's `--allow-private-networks`.
    """
    if action.kind.startswith("desktop."):
        raise InvalidArgumentError(f"{field}: {plans.DESKTOP_KIND.format(kind=action.kind[:40])}")
    check = action.postcondition
    if check is not None and check["kind"].startswith("browser."):
        # A check that loads a page is held to the same network policy as any other.
        where = field.removesuffix(".args") + ".postcondition.args"
        _browser_args_checked(where, check["kind"], check["args"])
        asked = check["args"].get("policy") or {}
        args = {**check["args"], "policy": {**asked, "allow_private": allow_private}}
        action = replace(action, postcondition={**check, "args": args})
    if not action.kind.startswith("browser."):
        return action
    _browser_args_checked(field, action.kind, action.args)
    asked = action.args.get("policy") or {}
    policy = {**asked, "allow_private": allow_private}
    return replace(action, args={**action.args, "policy": policy})


@dataclass(frozen=True)
class RawAction:
    """A planned action as a request carries it: its arguments (and its postcondition's) as
    JSON text, not read yet."""

    kind: str
    args_json: str
    idempotent: bool
    route: dict[str, Any]
    intent: str = ""
    check: tuple[str, str, str] | None = None  # a postcondition's (kind, args_json, expect_json)


def _json_object(field: str, text: str) -> dict[str, Any]:
    if len(text) > MAX_ARGS_CHARS:
        raise InvalidArgumentError(f"{field}: larger than {MAX_ARGS_CHARS} bytes")
    # decode_result also refuses NaN and Infinity, a key given twice (naming its path,
    # `actions[0].args.name: given twice`), and nesting deeper than the parser's recursion
    # limit (a RecursionError would be a crash, not an answer).
    found = decode_result(text, field) if text else {}
    if not isinstance(found, dict):
        raise InvalidArgumentError(f"{field}: must be a JSON object")
    return found


def parse_plan_actions(raw: Sequence[RawAction]) -> list[PlannedAction]:
    """Plan actions from requests, their arguments and postconditions checked as objects."""
    out = []
    for i, a in enumerate(raw):
        args = _json_object(f"actions[{i}].args", a.args_json)
        check = None
        if a.check is not None:
            kind, check_args, expect = a.check
            where = f"actions[{i}].postcondition"
            check = {
                "kind": kind,
                "args": _json_object(f"{where}.args", check_args),
                "expect": _json_object(f"{where}.expect", expect),
            }
        out.append(PlannedAction(a.kind, args, a.idempotent, a.route, a.intent, check))
    return out
