"""The desktop scope check alone, in process: what an approval allows and refuses, keys and
their combos, secret text, scaled coordinates, and the coordinator's refusals of malformed
scopes. The actions on a real X server are tests/e2e/desktop/test_desktop_actions.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shared.desktop_scope import Region
from tests.e2e.desktop.test_desktop_actions import scope_with
from worker_agent.actions import (
    ActionRefused,
)
from worker_agent.desktop.keys import parse_keys
from worker_agent.desktop.scope import DesktopScope, check_scope, check_text_keys
from worker_agent.desktop.screen import DisplayGeometry, Space
from worker_agent.desktop.text import SecretText


def scope_of(now: float = 100.0, **changes: Any) -> DesktopScope:
    return DesktopScope.received(scope_with(**changes), received_at=now)


def refusal(call: Callable[[], object]) -> ActionRefused:
    with pytest.raises(ActionRefused) as info:
        call()
    return info.value


def test_scope_allows_what_was_approved() -> None:
    scope = scope_of(region=Region(100, 100, 200, 50))
    check_scope(scope, "left_click", 0, [(100, 100), (299, 149)], now=100.0)


@pytest.mark.parametrize(
    ("overrides", "action", "display_index", "points", "now", "code"),
    [
        ({}, "left_click", 0, [], 100.0, None),
        ({"actions": ("screenshot",)}, "left_click", 0, [], 100.0, "out_of_scope"),
        ({}, "left_click", 1, [], 100.0, "out_of_scope"),
        ({"region": Region(0, 0, 100, 100)}, "left_click", 0, [(100, 5)], 100.0,
         "outside_region"),
        ({"region": Region(0, 0, 100, 100)}, "left_click_drag", 0, [(5, 5), (5, 400)], 100.0,
         "outside_region"),
        ({"expires_in": 0}, "left_click", 0, [], 100.0, "expired"),
        ({"expires_in": 5}, "left_click", 0, [], 105.0, "expired"),
        ({"remaining": 0}, "left_click", 0, [], 100.0, "max_actions"),
    ],
    ids=["ok", "action", "display", "region", "drag-end", "expired", "expired-since",
         "max-actions"],
)  # fmt: skip
def test_scope_refusals(
    overrides: dict[str, Any],
    action: str,
    display_index: int,
    points: list[tuple[int, int]],
    now: float,
    code: str | None,
) -> None:
    scope = scope_of(**overrides)
    if code is None:
        check_scope(scope, action, display_index, points, now=now)
        return
    assert refusal(lambda: check_scope(scope, action, display_index, points, now=now)).code == code


def test_no_scope_is_refused() -> None:
    assert refusal(lambda: DesktopScope.received(None, 0.0)).code == "no_scope"
    assert refusal(lambda: check_scope(None, "type", 0, now=0.0)).code == "no_scope"


@pytest.mark.parametrize("ch", ["\n", "\t", "\r", "\x1b", "\x7f", "\x85"])
def test_type_text_with_a_control_character_needs_key_in_scope(ch: str) -> None:
    typing_only = scope_of(actions=("type", "screenshot"))
    refused = refusal(lambda: check_text_keys(typing_only, f"ls{ch}exit"))
    assert refused.code == "out_of_scope"
    assert f"(U+{ord(ch):04X} at index 2)" in str(refused) and "needs key" in str(refused)
    # A secret's value: refused too, without saying what or where.
    refused = refusal(lambda: check_text_keys(typing_only, f"pw{ch}", "a secret 'text' refers to"))
    assert refused.code == "out_of_scope" and "U+" not in str(refused)
    check_text_keys(typing_only, "plain text, accents é and emoji \U0001f600")
    check_text_keys(scope_of(actions=("type", "key")), f"ls{ch}exit")


def test_key_combos_parse_to_keysyms_and_unknown_keys_are_refused() -> None:
    assert [str(c) for c in parse_keys("ctrl+a")] == ["Control_L+a"]
    assert [str(c) for c in parse_keys("ctrl+shift+t Return F5 shift+Tab space")] == [
        "Control_L+Shift_L+t",
        "Return",
        "F5",
        "Shift_L+Tab",
        "space",
    ]
    assert [str(c) for c in parse_keys("enter esc ctrl+minus ctrl+/ PageDown")] == [
        "Return",
        "Escape",
        "Control_L+minus",
        "Control_L+slash",
        "Next",
    ]
    for bad, hint in [
        ("ctrl+bogus", "unknown key 'bogus'"),
        ("ctrl++", "plus"),
        ("a+b", "not a modifier"),
        ("", "key combo"),
        ("ctrl+é", "unknown key"),
    ]:
        error = refusal(lambda bad=bad: parse_keys(bad))  # type: ignore[misc]
        assert error.code == "invalid_argument" and hint in str(error), (bad, str(error))


def test_secret_text_maps_progress_back_to_the_template() -> None:
    text = SecretText.resolve("id {{secret:pw}} end", {"pw": "hunter2"})
    assert text.value == "id hunter2 end"
    assert "hunter2" not in repr(text)
    assert text.progress(3) == (3, None)  # "id " typed, the secret not begun
    assert text.progress(5) == (3, "{{secret:pw}}")  # stopped inside it: no length told
    assert text.progress(10) == (len("id {{secret:pw}}"), None)
    assert text.progress(len(text.value)) == (len(text.template), None)
    assert refusal(lambda: SecretText.resolve("{{secret:x}}", {})).code == "unknown_secret"
    assert refusal(lambda: SecretText.resolve("{{secret:a b}}", {})).code == "invalid_argument"
    leak = refusal(lambda: SecretText.resolve("{{secret:k}}", {"k": "ab\x00cd"}))
    assert leak.code == "invalid_argument" and "U+" not in str(leak)


def test_a_space_maps_to_real_pixels_and_back_to_the_same_point() -> None:
    screen = DisplayGeometry(index=0, left=0, top=0, width=1920, height=1200)
    for space in (Space(1280, 800), Space(1024, 768), Space(1920, 1200)):
        corners = [(0, 0), (space.width - 1, space.height - 1)]
        assert [screen.to_real(x, y, space) for x, y in corners] == [(0, 0), (1919, 1199)]
        for x, y in [*corners, (space.width // 3, space.height // 7), (17, space.height - 2)]:
            real = screen.to_real(x, y, space)
            assert screen.contains(*real) and screen.to_space(*real, space) == (x, y)
    second = DisplayGeometry(index=1, left=1920, top=0, width=1280, height=800)
    assert second.to_root(10, 20) == (1930, 20) and second.from_root(1930, 20) == (10, 20)


def test_the_coordinator_refuses_malformed_scopes_coordinates_and_keys() -> None:
    from coordinator.runs.desktop import scope as coordinator_scope
    from shared.errors import InvalidArgumentError

    region = coordinator_scope.Region
    with pytest.raises(InvalidArgumentError, match=r"^scope\.ttl"):
        coordinator_scope.requested(["screenshot"], [], None, float("nan"), 0)
    with pytest.raises(InvalidArgumentError, match=r"^scope\.region"):
        coordinator_scope.requested(["screenshot"], [], region(0, 0, 2**31 - 1, 10), 0, 0)
    with pytest.raises(InvalidArgumentError, match=r"^scope\.displays"):
        coordinator_scope.requested(["screenshot"], [2**31 - 1], None, 0, 0)
    asked = coordinator_scope.requested(["screenshot"], [], None, 600, 0)
    with pytest.raises(InvalidArgumentError, match=r"^scope\.ttl"):
        coordinator_scope.narrowed(asked, [], [], None, float("nan"), 0)
    with pytest.raises(InvalidArgumentError, match=r"^scope\.region"):
        coordinator_scope.narrowed(asked, [], [], region(-5, -5, 10, 10), 0, 0)
    with pytest.raises(InvalidArgumentError, match=r"^x: .* is not a pixel"):
        coordinator_scope.points_of({"x": 10**20, "y": 1})
    with pytest.raises(InvalidArgumentError, match=r"^to_y: -1"):
        coordinator_scope.points_of({"to_x": 1, "to_y": -1})
    with pytest.raises(InvalidArgumentError, match=r"^space"):
        coordinator_scope.to_real((1, 1), [800, 600], (1280, 800))
    for bad in ("", "ctrl+", "ctrl++a", "a\x00", "é", " ".join(["a"] * 17), 5):
        with pytest.raises(InvalidArgumentError, match=r"^key"):
            coordinator_scope.check_keys(bad)
    assert coordinator_scope.check_keys("ctrl+shift+t Return") == "ctrl+shift+t Return"
    keyed = coordinator_scope.requested(["key"], [], None, 0, 0)
    with pytest.raises(InvalidArgumentError, match=r"^key"):
        coordinator_scope.check(keyed, "key", {"key": "ctrl+\x00"}, (1280, 800))
    assert coordinator_scope.check(keyed, "key", {"key": "ctrl+a"}, (1280, 800)) is None


@pytest.mark.parametrize("ch", ["\n", "\t", "\r", "\x1b", "\x9b"])
def test_the_coordinator_refuses_type_text_that_presses_keys_without_key(ch: str) -> None:
    from coordinator.runs.desktop import scope as coordinator_scope

    typing_only = coordinator_scope.requested(["type", "screenshot"], [], None, 0, 0)
    refused = coordinator_scope.check(typing_only, "type", {"text": f"ls{ch}exit"}, None)
    assert refused is not None and refused.code == "out_of_scope"
    assert f"U+{ord(ch):04X} at index 2" in refused.message and "needs key" in refused.message
    assert coordinator_scope.check(typing_only, "type", {"text": "ls exit"}, None) is None
    both = coordinator_scope.requested(["type", "key"], [], None, 0, 0)
    assert coordinator_scope.check(both, "type", {"text": f"ls{ch}exit"}, None) is None
    secret = coordinator_scope.keys_in_text(typing_only, f"pw{ch}", "a secret 'text' refers to")
    assert secret is not None and secret.code == "out_of_scope" and "U+" not in secret.message
