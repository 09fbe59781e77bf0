"""Desktop actions on a real X server with a real Chromium window (the scope check alone is
tests/unit/desktop/test_desktop_actions.py).

The page (tests/harness/sites.py) reports what the browser received, so these tests assert
what reached the window: typed text, clicks, wheel turns, a drag, pixels on the screen.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from shared.desktop_scope import Grant, Region
from shared.gen.deskfleet.v1 import worker_pb2
from shared.receipts import encode_result
from tests.harness import ChromiumApp, Xvfb, wait_until
from tests.harness.sites import FIELD, MARKER, DesktopSite
from worker_agent.actions import (
    CANCELLED,
    FAILED,
    REFUSED,
    SUCCEEDED,
    ActionContext,
    ActionRegistry,
    Outcome,
    run_action,
)
from worker_agent.desktop import DesktopActions, DesktopSession
from worker_agent.desktop.text import CHUNK

ALL_ACTIONS = [
    "screenshot",
    "mouse_move",
    "left_click",
    "right_click",
    "middle_click",
    "double_click",
    "left_click_drag",
    "scroll",
    "type",
    "key",
]
SCOPE = Grant(tuple(ALL_ACTIONS), (0,), None, 300.0, 50).to_proto()
# The actions today's computer tools added, with the rest.
TODAYS = Grant(
    (*ALL_ACTIONS, "triple_click", "left_mouse_down", "left_mouse_up", "hold_key", "zoom"),
    (0,),
    None,
    300.0,
    50,
).to_proto()
SPACE = {"width": 1024, "height": 640}  # the 1280x800 screen, scaled by 0.8
SENTENCE = "Grüße, Zoë! 3 \u00d7 4 = 12; naïve café \u2014 ok?"  # times sign, em dash


def in_space(x: int, y: int) -> tuple[int, int]:
    return int(x * 0.8), int(y * 0.8)


FIELD_CENTER = (FIELD[0] + FIELD[2] // 2, FIELD[1] + FIELD[3] // 2)
MARKER_CENTER = (MARKER[0] + MARKER[2] // 2, MARKER[1] + MARKER[3] // 2)

display = pytest.mark.display


# Pure checks: no display ----------------------------------------------------------------------


def scope_with(**changes: Any) -> worker_pb2.ScopeGrant:
    """SCOPE with some fields changed, as the coordinator would send it."""
    return replace(Grant.from_proto(SCOPE), **changes).to_proto()


# The real desktop -----------------------------------------------------------------------------


@dataclass
class Desk:
    site: DesktopSite
    actions: DesktopActions
    registry: ActionRegistry
    window: str
    env: dict[str, str]
    contexts: list[ActionContext] = field(default_factory=list)

    def act(
        self,
        kind: str,
        *,
        secrets: dict[str, str] | None = None,
        input_blocked: Callable[[], str | None] | None = None,
        cancelled: threading.Event | None = None,
        scope: worker_pb2.ScopeGrant | None = None,
        run_id: str = "run-1",
        **args: Any,
    ) -> tuple[Outcome, dict[str, Any], ActionContext]:
        extra: dict[str, Any] = {"run_id": run_id}
        if input_blocked is not None:
            extra["input_blocked"] = input_blocked
        ctx = ActionContext(
            "act-1",
            1,
            secrets=secrets or {},
            cancelled=cancelled or threading.Event(),
            scope=scope,
            **extra,
        )
        outcome = run_action(self.registry, f"desktop.{kind}", encode_result(args), ctx)
        result = json.loads(outcome.result_json) if outcome.result_json else {}
        return outcome, result, ctx

    def ok(self, kind: str, **args: Any) -> tuple[dict[str, Any], ActionContext]:
        outcome, result, ctx = self.act(kind, **args)
        assert outcome.status == SUCCEEDED, outcome.error
        return result, ctx

    def xdotool(self, *args: str) -> None:
        subprocess.run(["xdotool", *args], env=self.env, check=True, timeout=10)

    def submitted(self, count: int = 1) -> list[str]:
        wait_until(lambda: len(self.site.snapshot()[0]) >= count, 5, what="the page's submit")
        return self.site.snapshot()[0]

    def events(self, kind: str, count: int = 1) -> list[dict[str, Any]]:
        def found() -> list[dict[str, Any]]:
            matching = [e for e in self.site.snapshot()[1] if e["type"] == kind]
            return matching if len(matching) >= count else []

        return wait_until(found, 5, what=f"{kind} events on the page")  # type: ignore[no-any-return]


def red(pixel: Any) -> bool:
    r, g, b = pixel[:3]
    return bool(r > 220 and g < 40 and b < 40)


def decode(ctx: ActionContext, index: int = -1) -> Image.Image:
    return Image.open(io.BytesIO(ctx.artifacts[index].data))


@pytest.fixture(scope="module")
def desk_module(xvfb: Xvfb) -> Iterator[Desk]:
    if not ChromiumApp.available():
        pytest.skip("chromium and xdotool are not installed")
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as home:
        # pyautogui and python-xlib read these when first imported / connected.
        patch.setenv("DISPLAY", xvfb.display)
        patch.setenv("XAUTHORITY", str(xvfb.auth))
        site = DesktopSite().start()
        app = ChromiumApp(xvfb.env, site.url, Path(home))
        env = {**os.environ, **app.env}
        actions = DesktopActions(DesktopSession())
        try:
            window = app.start()
            desk = Desk(site, actions, ActionRegistry(), window, env)
            actions.register(desk.registry)
            _wait_for_marker(desk)
            desk.xdotool("windowfocus", "--sync", window)  # no window manager gives focus
            yield desk
        finally:
            actions.close()
            app.stop()
            site.stop()


def _wait_for_marker(desk: Desk) -> None:
    def painted() -> bool:
        outcome, _, ctx = desk.act("screenshot", scope=SCOPE, format="jpeg")
        return outcome.status == SUCCEEDED and red(decode(ctx).getpixel(MARKER_CENTER))

    wait_until(painted, 30, 0.1, what="the page's red marker on the screen")


@pytest.fixture
def desk(desk_module: Desk) -> Desk:
    """The module's desk with the page's records emptied and a fresh presence state."""
    desk_module.site.reset()
    desk_module.actions.session.paused = None
    desk_module.actions.session.last_position = None
    if desk_module.actions.session.held is not None:
        desk_module.ok("left_mouse_up", scope=TODAYS)
    return desk_module


@display
def test_screenshot_is_the_real_screen_with_the_marker_red(desk: Desk) -> None:
    result, ctx = desk.ok("screenshot", scope=SCOPE)
    image = decode(ctx)
    assert image.format == "PNG" and image.size == (1280, 800)
    x, y, w, h = MARKER
    for px in [(x, y), (x + w - 1, y + h - 1), MARKER_CENTER]:
        assert red(image.getpixel(px)), px
    assert not red(image.getpixel((x - 5, y - 5)))
    artifact = ctx.artifacts[0]
    assert result["screenshot"] == artifact.ref() and result["format"] == "png"
    assert result["screenshot"]["media_type"] == "image/png"
    assert result["display"] == {"index": 0, "width": 1280, "height": 800}
    assert set(result["timings"]) == {"input_ms", "capture_ms", "encode_ms"}


@display
def test_screenshot_scaled_to_a_space_keeps_the_marker_where_the_space_puts_it(
    desk: Desk,
) -> None:
    desk.xdotool("mousemove", "640", "400")
    result, ctx = desk.ok("screenshot", scope=SCOPE, space=SPACE)
    image = decode(ctx)
    assert image.size == (1024, 640)
    assert red(image.getpixel(in_space(*MARKER_CENTER)))
    assert red(image.getpixel(in_space(MARKER[0] + 3, MARKER[1] + 3)))
    assert not red(image.getpixel(in_space(MARKER[0] - 5, MARKER[1])))
    assert result["space"] == SPACE and result["cursor"] == {"x": 512, "y": 320}


@display
@pytest.mark.parametrize(("fmt", "pil"), [("jpeg", "JPEG"), ("webp", "WEBP")])
def test_jpeg_and_webp_screenshots_decode(desk: Desk, fmt: str, pil: str) -> None:
    result, ctx = desk.ok("screenshot", scope=SCOPE, format=fmt, quality=60)
    image = decode(ctx)
    assert image.format == pil and image.size == (1280, 800)
    assert red(image.convert("RGB").getpixel(MARKER_CENTER))
    assert result["screenshot"]["media_type"] == f"image/{fmt}"


@display
def test_click_in_a_scaled_space_then_type_unicode_and_return_reach_the_page(desk: Desk) -> None:
    fx, fy = in_space(*FIELD_CENTER)
    result, _ = desk.ok("left_click", x=fx, y=fy, space=SPACE, scope=SCOPE)
    assert result["at"] == {"x": fx, "y": fy} and result["cursor"] == {"x": fx, "y": fy}
    click = desk.events("click")[0]
    assert abs(click["x"] - FIELD_CENTER[0]) <= 1 and abs(click["y"] - FIELD_CENTER[1]) <= 1

    started = time.perf_counter()
    result, _ = desk.ok("type", text=SENTENCE, scope=SCOPE)
    elapsed = time.perf_counter() - started
    assert result["text"] == SENTENCE and result["typed_chars"] == len(SENTENCE)
    desk.ok("key", key="Return", scope=SCOPE)
    assert desk.submitted() == [SENTENCE]
    print(f"typed {len(SENTENCE)} chars in {elapsed * 1000:.1f} ms")


@display
def test_secret_references_type_the_value_and_results_show_only_the_reference(
    desk: Desk,
) -> None:
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE)
    outcome, result, _ = desk.act(
        "type", text="login {{secret:pw}}!", secrets={"pw": "hunter2-ø"}, scope=SCOPE
    )
    assert outcome.status == SUCCEEDED
    assert result["text"] == "login {{secret:pw}}!"
    assert "hunter2" not in outcome.result_json
    desk.ok("key", key="Return", scope=SCOPE)
    assert desk.submitted() == ["login hunter2-ø!"]

    outcome, _, _ = desk.act("type", text="{{secret:nope}}", secrets={"pw": "x"}, scope=SCOPE)
    assert outcome.status == REFUSED and outcome.error.startswith("unknown_secret:")


@display
def test_scope_is_checked_again_on_the_worker_before_any_input(desk: Desk) -> None:
    region = scope_with(region=Region(0, 0, 640, 400))
    outcome, _, _ = desk.act("left_click", x=700, y=100, scope=region)
    assert outcome.status == REFUSED and outcome.error.startswith("outside_region:")
    outcome, _, _ = desk.act("left_click_drag", x=10, y=10, to_x=700, to_y=10, scope=region)
    assert outcome.status == REFUSED and outcome.error.startswith("outside_region:")
    # In a scaled space, (600, 300) is the real (750, 375): outside the region.
    outcome, _, _ = desk.act("left_click", x=600, y=300, space=SPACE, scope=region)
    assert outcome.status == REFUSED and outcome.error.startswith("outside_region:")
    outcome, _, _ = desk.act("left_click", x=10, y=10)
    assert outcome.status == REFUSED and outcome.error.startswith("no_scope:")
    outcome, _, _ = desk.act("left_click", x=10, y=10, scope=scope_with(actions=("type",)))
    assert outcome.status == REFUSED and outcome.error.startswith("out_of_scope:")
    outcome, _, _ = desk.act("screenshot", scope=scope_with(displays=(1,)))
    assert outcome.status == REFUSED and outcome.error.startswith("out_of_scope:")
    outcome, _, _ = desk.act("type", text="x", scope=scope_with(expires_in=0.0))
    assert outcome.status == REFUSED and outcome.error.startswith("expired:")
    outcome, _, _ = desk.act("key", key="a", scope=scope_with(remaining=0))
    assert outcome.status == REFUSED and outcome.error.startswith("max_actions:")
    time.sleep(0.3)
    assert desk.site.snapshot()[1] == []  # not one of them reached the page


@display
def test_type_presses_no_key_that_was_not_approved(desk: Desk) -> None:
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE)
    desk.ok("key", key="ctrl+a", scope=SCOPE)  # whatever an earlier test left in the field
    desk.ok("key", key="BackSpace", scope=SCOPE)
    typing_only = scope_with(actions=("type", "screenshot"))
    for text in ("ls\nexit\t", "tab\tonly"):
        outcome, _, _ = desk.act("type", text=text, scope=typing_only)
        assert outcome.status == REFUSED and outcome.error.startswith("out_of_scope:"), outcome
        assert "needs key" in outcome.error
    # A secret whose value holds a newline presses Return just the same: refused unseen.
    outcome, _, _ = desk.act(
        "type", text="pw {{secret:pw}}", secrets={"pw": "a\nb"}, scope=typing_only
    )
    assert outcome.status == REFUSED and outcome.error.startswith("out_of_scope:"), outcome
    assert "a\nb" not in outcome.error and "U+" not in outcome.error
    time.sleep(0.3)
    assert desk.site.snapshot()[0] == []  # no Return reached the form: nothing was submitted
    # With key approved as well, the newline is Return: the form is submitted, and with only
    # "ls" in it (no Tab moved the focus away, no earlier text went in).
    desk.ok("type", text="ls\n", scope=SCOPE)
    assert desk.submitted() == ["ls"]


@display
@pytest.mark.parametrize(
    ("kind", "args", "field_name"),
    [
        ("left_click", {"x": 1300, "y": 5}, "x"),
        ("left_click", {"x": 1100, "y": 5, "space": SPACE}, "x"),
        ("left_click", {"x": 5}, "y"),
        ("left_click", {"X": 5, "Y": 5}, "X"),
        ("scroll", {"dx": 0, "dy": 0}, "dy"),
        ("screenshot", {"format": "png", "quality": 50}, "quality"),
        ("screenshot", {"format": "gif"}, "format"),
        ("key", {"key": "ctrl+nope"}, "key"),
        ("type", {"text": "bell \x07"}, "text"),
        ("wait", {"seconds": 61}, "seconds"),
        ("screenshot", {"display": 3}, "display"),
        # Huge and negative numbers the coordinator leaves to the worker's contract (30, held).
        ("wait", {"seconds": -1}, "seconds"),
        ("wait", {"seconds": 1e300}, "seconds"),
        ("scroll", {"dy": 10**9}, "dy"),
        ("scroll", {"dx": -(2**63)}, "dx"),
        ("type", {"text": "a", "interval": -1}, "interval"),
        ("type", {"text": "a", "interval": 1e300}, "interval"),
        ("left_click", {"x": -1, "y": 5}, "x"),
        ("left_click", {"x": 2**63, "y": 5}, "x"),
        ("screenshot", {"display": -1}, "display"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(
    desk: Desk, kind: str, args: dict[str, Any], field_name: str
) -> None:
    outcome, _, _ = desk.act(kind, scope=SCOPE, **args)
    assert outcome.status == REFUSED, outcome
    assert outcome.error.startswith("invalid_argument:") and f"'{field_name}'" in outcome.error


@display
def test_kill_switch_stops_typing_within_one_chunk_and_says_how_much_went_out(
    desk: Desk,
) -> None:
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE)
    text = "kill switch: this sentence must never be typed to its end, not even close."
    looks = 0

    def blocked() -> str | None:
        # The first look is before any input, the next before each chunk: engage after one.
        nonlocal looks
        looks += 1
        return "engaged by the test" if looks > 2 else None

    outcome, _, _ = desk.act("type", text=text, scope=SCOPE, input_blocked=blocked)
    assert outcome.status == FAILED
    assert f"typed {CHUNK} of {len(text)} characters" in outcome.error
    assert "engaged by the test" in outcome.error
    desk.ok("key", key="Return", scope=SCOPE)
    assert desk.submitted() == [text[:CHUNK]]

    # Engaged before the action: nothing is typed and the receipt says refused.
    outcome, _, _ = desk.act("type", text=text, scope=SCOPE, input_blocked=lambda: "engaged")
    assert outcome.status == REFUSED and outcome.error.startswith("kill_switch:")
    outcome, _, _ = desk.act("left_click", x=5, y=5, scope=SCOPE, input_blocked=lambda: "on")
    assert outcome.status == REFUSED and outcome.error.startswith("kill_switch:")
    # Not input: screenshots still work while the kill switch is engaged.
    outcome, _, _ = desk.act("screenshot", scope=SCOPE, input_blocked=lambda: "on")
    assert outcome.status == SUCCEEDED


@display
def test_kill_switch_from_another_thread_stops_a_long_type(desk: Desk) -> None:
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE)
    text = "ab" * 5000  # long enough to be typing when the switch flips
    engaged = threading.Event()
    flipped_after: list[str] = []

    def blocked() -> str | None:
        return "engaged from another thread" if engaged.is_set() else None

    def flip() -> None:
        time.sleep(0.05)
        engaged.set()
        flipped_after.append("set")

    flipper = threading.Thread(target=flip)
    flipper.start()
    outcome, _, _ = desk.act("type", text=text, scope=SCOPE, input_blocked=blocked)
    flipper.join()
    if outcome.status == "refused":  # a loaded machine flipped it before the action began
        assert outcome.error.startswith("kill_switch: "), outcome
        desk.ok("key", key="Return", scope=SCOPE)
        assert desk.submitted() in ([], [""])
        return
    assert outcome.status == FAILED, outcome
    typed = int(outcome.error.split("typed ")[1].split(" of")[0])
    # On a loaded machine the switch may flip before the first chunk: none typed is a stop too.
    assert 0 <= typed < len(text)
    desk.ok("key", key="Return", scope=SCOPE)
    # Exactly what the receipt says went out, not a character more.
    assert desk.submitted() == [text[:typed]] or (typed == 0 and desk.submitted() == [])


@display
def test_a_scope_that_expires_while_typing_stops_it(desk: Desk) -> None:
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE)
    text = "cd" * 1000  # ~0.1-3 s of typing here: it cannot be done in 0.02 s
    outcome, _, _ = desk.act("type", text=text, scope=scope_with(expires_in=0.02))
    assert outcome.status == FAILED and "the approved scope expired" in outcome.error
    typed = int(outcome.error.split("typed ")[1].split(" of")[0])
    desk.ok("key", key="Return", scope=SCOPE)
    assert desk.submitted() == [text[:typed]]


@display
def test_a_person_moving_the_pointer_pauses_input_until_resume(desk: Desk) -> None:
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE)
    desk.xdotool("mousemove", "50", "60")  # as a person would
    outcome, _, _ = desk.act("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE)
    assert outcome.status == REFUSED and outcome.error.startswith("human_active:")
    assert "50,60" in outcome.error and f"{FIELD_CENTER[0]},{FIELD_CENTER[1]}" in outcome.error
    outcome, _, _ = desk.act("type", text="no", scope=SCOPE)
    assert outcome.status == REFUSED and outcome.error.startswith("human_active:")
    # Looking is not input: allowed while paused.
    result, _ = desk.ok("cursor_position")
    assert result["cursor"] == {"x": 50, "y": 60}
    desk.ok("screenshot", scope=SCOPE)
    assert len(desk.events("click")) == 1  # only the first click reached the page

    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=SCOPE, resume=True)
    assert len(desk.events("click", 2)) == 2
    desk.ok("type", text="after resume", scope=SCOPE)
    desk.ok("key", key="Return", scope=SCOPE)
    assert desk.submitted() == ["after resume"]


@display
def test_other_pointer_actions_reach_the_page(desk: Desk) -> None:
    # The drag comes first: after a double click has selected something, pressing on the
    # selection would start drag-and-drop instead.
    result, _ = desk.ok("left_click_drag", x=700, y=600, to_x=900, to_y=650, scope=SCOPE)
    assert result["from"] == {"x": 700, "y": 600} and result["to"] == {"x": 900, "y": 650}
    down, up = desk.events("mousedown")[0], desk.events("mouseup")[0]
    assert (down["x"], down["y"], up["x"], up["y"]) == (700, 600, 900, 650)

    mx, my = MARKER_CENTER
    result, _ = desk.ok("mouse_move", x=mx, y=my, scope=SCOPE)
    assert result["cursor"] == {"x": mx, "y": my}
    desk.ok("right_click", scope=SCOPE)  # at the pointer
    menu = desk.events("contextmenu")[0]
    assert (menu["x"], menu["y"], menu["button"]) == (mx, my, 2)
    desk.ok("double_click", x=mx + 10, y=my, scope=SCOPE)
    assert desk.events("dblclick")[0]["x"] == mx + 10

    desk.ok("scroll", x=mx, y=my, dy=3, scope=SCOPE)
    # Chromium may coalesce wheel turns that arrive together: at least one, all downwards.
    assert all(e["dy"] > 0 and e["dx"] == 0 for e in desk.events("wheel"))
    desk.ok("scroll", dx=-2, scope=SCOPE)  # at the pointer, to the left
    wait_until(lambda: any(e["dx"] < 0 for e in desk.events("wheel")), 5, what="a left wheel")


@display
def test_screenshots_before_and_after_an_action_are_attached_as_refs(desk: Desk) -> None:
    result, ctx = desk.ok(
        "mouse_move",
        x=10,
        y=10,
        scope=SCOPE,
        space=SPACE,
        screenshot_before=True,
        screenshot_after=True,
        format="jpeg",
    )
    assert [a.ref() for a in ctx.artifacts] == [
        result["screenshot_before"],
        result["screenshot_after"],
    ]
    assert decode(ctx).size == (1024, 640)
    assert result["timings"]["capture_ms"] > 0
    # Taking a picture is a permission of its own.
    outcome, _, _ = desk.act(
        "mouse_move", x=10, y=10, scope=scope_with(actions=("mouse_move",)), screenshot_after=True
    )
    assert outcome.status == REFUSED and outcome.error.startswith("out_of_scope:")


@display
def test_wait_is_interrupted_by_cancellation(desk: Desk) -> None:
    result, _ = desk.ok("wait", seconds=0.05)
    assert result["seconds"] == 0.05
    cancelled = threading.Event()
    threading.Timer(0.1, cancelled.set).start()
    started = time.monotonic()
    outcome, _, _ = desk.act("wait", seconds=30, cancelled=cancelled)
    assert outcome.status == CANCELLED and time.monotonic() - started < 5


_NO_DISPLAY_SCRIPT = """
import json
from shared.desktop_scope import Grant
from shared.receipts import encode_result
from worker_agent.actions import ActionContext, ActionRegistry, run_action
from worker_agent.desktop import DesktopActions

registry = ActionRegistry()
DesktopActions().register(registry)
scope = Grant(("screenshot", "left_click"), (0,), None, 60.0, 5).to_proto()
for kind, args in [("screenshot", {}), ("left_click", {"x": 1, "y": 1})]:
    outcome = run_action(registry, "desktop." + kind, encode_result(args),
                         ActionContext("a", 1, scope=scope))
    print(json.dumps([outcome.status, outcome.error]))
"""


@pytest.mark.parametrize(
    ("display_value", "says"),
    [(None, "DISPLAY is not set"), (":249", "cannot open display ':249'")],
    ids=["unset", "nothing-there"],
)
def test_without_a_display_actions_are_refused_no_display(
    display_value: str | None, says: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "XAUTHORITY")}
    if display_value:
        env["DISPLAY"] = display_value
    done = subprocess.run(
        [sys.executable, "-c", _NO_DISPLAY_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[3],
    )
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        status, error = json.loads(line)
        assert status == REFUSED and error.startswith("no_display:") and says in error, error


# ------------------------------------------------ the coordinator's side of the same checks


# The actions of today's computer tools ------------------------------------------------------


@display
def test_triple_click_is_three_clicks_the_page_counts_as_one_triple(desk: Desk) -> None:
    mx, my = MARKER_CENTER
    result, _ = desk.ok("triple_click", x=mx, y=my, scope=TODAYS)
    assert result["clicks"] == 3 and result["button"] == "left"
    clicks = desk.events("click", 3)
    assert [c["detail"] for c in clicks] == [1, 2, 3]


@display
def test_mouse_down_move_up_is_a_drag_the_page_sees(desk: Desk) -> None:
    # A click on nothing first: pressing on a selection an earlier test made would start
    # drag-and-drop, which ends without a mouseup.
    desk.ok("left_click", x=50, y=750, scope=TODAYS)
    desk.events("mouseup")
    desk.site.reset()
    desk.ok("left_mouse_down", x=700, y=600, scope=TODAYS)
    assert desk.actions.session.held is not None
    for x in range(720, 901, 60):  # applications see a drag from motion with the button down
        desk.ok("mouse_move", x=x, y=640, scope=TODAYS)
    result, _ = desk.ok("left_mouse_up", x=900, y=650, scope=TODAYS)
    assert result["was_down"] is True and desk.actions.session.held is None
    down, up = desk.events("mousedown")[0], desk.events("mouseup")[0]
    assert (down["x"], down["y"], up["x"], up["y"]) == (700, 600, 900, 650)
    # Letting go of nothing is harmless.
    result, _ = desk.ok("left_mouse_up", scope=TODAYS)
    assert result["was_down"] is False


@display
def test_a_held_button_is_let_go_when_the_kill_switch_engages(desk: Desk) -> None:
    engaged = threading.Event()

    def blocked() -> str | None:
        return "kill switch k1 (run) is engaged: stop" if engaged.is_set() else None

    desk.ok("left_mouse_down", x=700, y=600, scope=TODAYS, input_blocked=blocked)
    time.sleep(0.2)
    assert not desk.site.snapshot()[1] or not [
        e for e in desk.site.snapshot()[1] if e["type"] == "mouseup"
    ]
    engaged.set()
    up = desk.events("mouseup")[0]  # no left_mouse_up was sent: the worker let go
    assert (up["x"], up["y"]) == (700, 600)
    assert desk.actions.session.held is None
    assert "kill switch k1" in desk.actions.session.let_go_because[-1]


@display
def test_a_held_button_is_let_go_before_another_runs_input(desk: Desk) -> None:
    desk.ok("left_mouse_down", x=700, y=600, scope=TODAYS, run_id="run-a")
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=TODAYS, run_id="run-b")
    ups = desk.events("mouseup", 2)
    assert (ups[0]["x"], ups[0]["y"]) == (700, 600)  # run-a's press ended where it was
    assert desk.actions.session.let_go_because[-1] == "input of another run (run-b)"


@display
def test_hold_key_holds_then_lets_go_and_stops_at_the_kill_switch(desk: Desk) -> None:
    desk.ok("left_click", x=FIELD_CENTER[0], y=FIELD_CENTER[1], scope=TODAYS)
    result, _ = desk.ok("hold_key", key="shift", seconds=0.3, scope=TODAYS)
    assert result["key"] == "Shift_L" and 0.28 <= result["held_seconds"] < 1.5
    desk.ok("type", text="a", scope=TODAYS)  # shift is up again: a small a
    desk.ok("key", key="Return", scope=TODAYS)
    assert desk.submitted() == ["a"]

    engaged = threading.Event()
    threading.Timer(0.2, engaged.set).start()
    outcome, _, _ = desk.act(
        "hold_key",
        key="shift",
        seconds=5,
        scope=TODAYS,
        input_blocked=lambda: "kill switch k2 (worker) is engaged" if engaged.is_set() else None,
    )
    assert outcome.status == FAILED and "then let it go" in outcome.error, outcome
    held = float(outcome.error.split("Shift_L ")[1].split(" of")[0])
    assert held < 2
    outcome, _, _ = desk.act("hold_key", key="shift Return", seconds=1, scope=TODAYS)
    assert outcome.status == REFUSED and "one combo" in outcome.error
    outcome, _, _ = desk.act("hold_key", key="shift", seconds=60, scope=TODAYS)
    assert outcome.status == REFUSED and outcome.error.startswith("invalid_argument:")


@display
def test_zoom_is_the_region_at_full_resolution_and_keeps_to_the_scope(desk: Desk) -> None:
    x, y, w, h = MARKER
    result, ctx = desk.ok("zoom", region=[x, y, x + w, y + h], scope=TODAYS)
    image = decode(ctx)
    assert image.size == (w, h) and result["region"] == [x, y, x + w, y + h]
    assert all(red(image.getpixel(p)) for p in ((0, 0), (w - 1, h - 1), (w // 2, h // 2)))
    # In a scaled space the region is the space's; the image is still the real pixels.
    sx, sy = in_space(x, y)
    _, ctx = desk.ok("zoom", region=[sx, sy, sx + 160, sy + 160], space=SPACE, scope=TODAYS)
    assert decode(ctx).size == (200, 200)
    inside = scope_with(actions=("screenshot", "zoom"), region=Region(0, 0, 700, 800))
    outcome, _, _ = desk.act("zoom", region=[x, y, x + w, y + h], scope=inside)
    assert outcome.status == REFUSED and outcome.error.startswith("outside_region:")
    outcome, _, _ = desk.act("zoom", region=[x, y, x + w, y + h], scope=SCOPE)
    assert outcome.status == REFUSED and outcome.error.startswith("out_of_scope:")
    for bad in ([x, y, x, y + 5], [0, 0, 10], "0,0,10,10", [0, 0, 99999, 10]):
        outcome, _, _ = desk.act("zoom", region=bad, scope=TODAYS)
        assert outcome.status == REFUSED and outcome.error.startswith("invalid_argument:"), bad
