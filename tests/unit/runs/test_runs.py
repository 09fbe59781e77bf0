"""Plan checks in process: limits and arguments are checked by name, and research requests
refuse local URLs and unbounded lists. Runs end to end are tests/integration/runs/test_runs.py."""

from __future__ import annotations

import json


def _plan_error(actions: list[tuple[str, str]], **limits: float) -> str:
    from coordinator.runs.plan import Plan, parse_plan_actions, validate, with_network_policy
    from shared.errors import InvalidArgumentError

    try:
        parsed = parse_plan_actions([(k, a, True, {}, "") for k, a in actions])
        checked = tuple(
            with_network_policy(p, False, f"actions[{i}].args") for i, p in enumerate(parsed)
        )
        validate(Plan(checked, **limits))  # type: ignore[arg-type]
    except InvalidArgumentError as exc:
        return exc.message
    return ""


def test_plan_limits_and_arguments_are_checked_by_name() -> None:
    echo = ("diag.echo", "{}")
    assert _plan_error([echo], max_seconds=float("nan")).startswith("limits.max_seconds:")
    assert _plan_error([echo], action_timeout=float("inf")).startswith(
        "limits.action_timeout_seconds:"
    )
    assert _plan_error([echo], max_actions=10**9).startswith("limits.max_actions:")
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert _plan_error([echo, ("diag.echo", deep)]).startswith("actions[1].args: not valid JSON")
    assert _plan_error([("diag.echo\n", "{}")]).startswith("actions[0].kind:")
    assert _plan_error([("desktop.left_click", '{"x": 1, "y": 1}')]).startswith(
        "actions[0].args: desktop.left_click is not a plan action"
    )
    for url in ("file:///etc/passwd", "javascript:alert(1)", "chrome://settings", "data:,x"):
        fetch = ("browser.fetch", json.dumps({"url": url}))
        assert _plan_error([echo, fetch]).startswith("actions[1].args.url: scheme"), url
    visible = ("browser.fetch", json.dumps({"url": "https://example.com/", "visible": True}))
    assert "set by the coordinator only" in _plan_error([visible])
    bad_policy = (
        "browser.fetch",
        json.dumps({"url": "https://e.com/", "policy": {"timeout": 1e9}}),
    )
    assert _plan_error([bad_policy]).startswith("actions[0].args.policy.timeout:")
    assert _plan_error([echo, ("browser.fetch", '{"url": "https://example.com/"}')]) == ""


def test_research_requests_refuse_local_urls_and_unbounded_lists() -> None:
    from coordinator.runs.research.runs import ResearchRequest, research_plan
    from shared.errors import InvalidArgumentError

    def error(**fields: object) -> str:
        try:
            research_plan(ResearchRequest(**{"query": "varn", **fields}))  # type: ignore[arg-type]
        except InvalidArgumentError as exc:
            return exc.message
        return ""

    assert error(urls=("https://e.com/", "file:///etc/passwd")).startswith("urls[1]: scheme")
    assert error(search_url="chrome://x/?q={query}").startswith("search_url: scheme")
    assert error(urls=tuple(f"https://e.com/{i}" for i in range(5000))).startswith("urls: at most")
    assert error(urls=("https://e.com/" + "x" * 10_000,)).startswith("urls[0]: at most")
    assert error(query="a\x00b").startswith("query: must not contain control")
    assert error(urls=("https://e.com/",), search_url="https://e.com/?q={query}") == ""
