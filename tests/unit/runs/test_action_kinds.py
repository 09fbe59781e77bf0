"""Plan action kinds and their arguments (shared/action_kinds.py): refused at submit, and the
contract agrees with what a worker registers."""

from __future__ import annotations

import pytest

from shared.action_kinds import IDEMPOTENT_KINDS, KINDS, check_args, rerun_is_harmless
from shared.errors import InvalidArgumentError
from worker_agent.desktop.actions import FIELDS, INPUT_KINDS


@pytest.mark.parametrize(
    ("kind", "args", "expected"),
    [
        ("no.such.kind", {}, "actions[0].kind: unknown kind 'no.such.kind' (plan actions: "),
        ("diag.echo", {"text": "hi"},
         "actions[0].args.text: not an argument of diag.echo (diag.echo takes: value (any))"),
        ("diag.sleep", {}, "actions[0].args.seconds: required (diag.sleep takes: seconds"),
        ("diag.sleep", {"seconds": "1"}, "actions[0].args.seconds: must be a number >= 0"),
        ("diag.sleep", {"seconds": -1}, "actions[0].args.seconds: must be a number >= 0"),
        ("diag.fail", {"fail_attempts": 1.5}, "actions[0].args.fail_attempts: must be an integer"),
        ("diag.append", {"name": "x.txt", "line": 3}, "actions[0].args.line: must be a string"),
        ("diag.append", {"path": "/tmp/x", "line": "a"}, "actions[0].args.path: not an argument"),
        ("browser.fetch", {"url": "http://a", "visible": True},
         "actions[0].args.visible: set by the coordinator only of browser.fetch"),
        ("app.research", {"app": "x"}, "actions[0].args.query: required (app.research takes: "),
    ],
)  # fmt: skip
def test_each_way_a_plan_action_is_wrong_is_named(kind: str, args: dict, expected: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_args("actions[0]", kind, args)
    assert caught.value.message.startswith(expected), caught.value.message


def test_what_the_coordinator_and_the_tests_send_fits() -> None:
    check_args("a", "diag.echo", {})
    check_args("a", "diag.echo", {"value": None})
    check_args("a", "diag.fail", {"message": "m", "fail_attempts": None})
    check_args("a", "browser.fetch", {"url": "http://a", "visible": True}, by_coordinator=True)
    check_args(
        "a", "app.research",
        {"app": "n", "route": "r", "query": "q", "max_sources": 5, "timeout": 120.0},
    )  # fmt: skip


def test_the_kinds_harmless_to_rerun_are_reads_never_inputs_or_writes() -> None:
    desktop = {k.removeprefix("desktop.") for k in IDEMPOTENT_KINDS if k.startswith("desktop.")}
    assert desktop == set(FIELDS) - INPUT_KINDS  # screenshot, cursor_position, wait
    assert IDEMPOTENT_KINDS - {f"desktop.{k}" for k in desktop} == set(KINDS) - {"diag.append"}
    assert rerun_is_harmless("browser.fetch", True)
    assert not rerun_is_harmless("browser.fetch", False)  # the plan asked for a person
    assert not rerun_is_harmless("diag.append", True)  # a write, whatever the plan says
    assert not rerun_is_harmless("desktop.left_click", True)
