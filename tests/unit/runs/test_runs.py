"""Plan checks in process: limits and arguments are checked by name, and research requests
refuse local URLs and unbounded lists. Runs end to end are tests/integration/runs/test_runs.py."""

from __future__ import annotations

import json


def _plan_error(
    actions: list[tuple[str, str]],
    check: tuple[str, str, str] | None = None,
    **limits: float,
) -> str:
    from coordinator.runs.plan import (
        Plan,
        RawAction,
        parse_plan_actions,
        validate,
        with_network_policy,
    )
    from shared.errors import InvalidArgumentError

    try:
        parsed = parse_plan_actions([RawAction(k, a, True, {}, "", check) for k, a in actions])
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


def test_a_postcondition_is_a_read_only_check_with_an_expectation() -> None:
    append = ("diag.append", json.dumps({"name": "a.txt", "line": "x"}))
    has = json.dumps({"name": "a.txt", "line": "x"})
    assert _plan_error([append], ("diag.has_line", has, '{"present": true}')) == ""
    assert _plan_error([append], ("diag.append", has, '{"present": true}')) == (
        "actions[0].postcondition.kind: 'diag.append' is not a read-only check; a"
        " postcondition runs one of diag.has_line, browser.check"
    )
    assert _plan_error([append], ("diag.has_line", has, "{}")).startswith(
        "actions[0].postcondition.expect: an object the check's result must hold"
    )
    assert _plan_error([append], ("diag.has_line", has, "[true]")) == (
        "actions[0].postcondition.expect: must be a JSON object"
    )
    assert _plan_error([append], ("diag.has_line", "{}", '{"present": true}')).startswith(
        "actions[0].postcondition.args.line: required"
    )
    assert "NaN" in _plan_error([append], ("diag.has_line", has, '{"present": NaN}'))
    # A check that loads a page meets the browser's own rules: no file: URL.
    page = json.dumps({"url": "file:///etc/passwd"})
    assert _plan_error([append], ("browser.check", page, '{"contains": true}')).startswith(
        "actions[0].postcondition.args.url: scheme 'file' is not allowed"
    )


def test_a_check_matches_its_expectation_as_a_json_subset() -> None:
    from shared.action_kinds import expected

    found = {"url": "http://x/", "status": 200, "contains": True, "page": {"a": 1, "b": [1, 2]}}
    assert expected({"contains": True}, found)
    assert expected({"status": 200, "page": {"a": 1}}, found)  # objects compared recursively
    assert expected({"page": {"b": [1, 2]}}, found)  # anything else compared whole
    assert not expected({"page": {"b": [1]}}, found)
    assert not expected({"contains": 1}, found)  # 1 is not true in JSON
    assert not expected({"status": True}, {"status": 1})
    assert not expected({"missing": None}, found)
    assert not expected({"page": {"a": 1}}, {"page": "a"})
    assert expected({"status": 200}, {"status": 200.0})  # numbers compare as numbers
