"""The framework adapters' own rules, in process: the screen size a model is sent, the key
names and wheel clicks of the Agents SDK, and what a model is told about a refused action.
(tests/e2e/client/test_integrations.py runs the adapters on a real desktop.)"""

from __future__ import annotations

import io

import pytest
from PIL import Image

from deskfleet.integrations import _images
from deskfleet.integrations._outcomes import explain
from deskfleet.integrations.openai_agents import _wheel, key_combo
from deskfleet.types import ActResult


@pytest.mark.parametrize(
    ("size", "fitted"),
    [
        ((1280, 800), (1280, 800)),  # fits: the real pixels
        ((1920, 1080), (1429, 804)),  # the pixel budget binds
        ((3000, 400), (1568, 209)),  # the long edge binds
        ((800, 600), (800, 600)),  # never grown for a screenshot
    ],
)
def test_a_screen_is_fitted_to_the_model_keeping_its_shape(
    size: tuple[int, int], fitted: tuple[int, int]
) -> None:
    got = _images.fitted_size(*size, _images.MAX_LONG_EDGE, _images.MAX_PIXELS)
    assert got == fitted
    assert _images.within(got, _images.MAX_LONG_EDGE, _images.MAX_PIXELS)
    assert abs(got[0] / got[1] - size[0] / size[1]) < 0.01


def test_a_zoomed_crop_grows_to_the_budget() -> None:
    grown = _images.fitted_size(200, 100, 1568, 1_150_000, grow=True)
    assert grown == (1516, 758) and _images.within(grown, 1568, 1_150_000)


def test_the_note_goes_below_the_screen_and_leaves_it_as_it_was() -> None:
    screen = Image.new("RGB", (320, 200), (10, 20, 30))
    raw = io.BytesIO()
    screen.save(raw, "PNG")
    noted = Image.open(io.BytesIO(_images.with_notice(raw.getvalue(), ["left_click was refused"])))
    assert noted.width == 320 and noted.height > 200
    assert noted.convert("RGB").getpixel((319, 199)) == (10, 20, 30)
    assert noted.convert("RGB").getpixel((1, noted.height - 1)) == _images.NOTICE_BACKGROUND


@pytest.mark.parametrize(
    ("keys", "combo"),
    [
        (["CTRL", "A"], "ctrl+a"),  # a letter is its key, not shift+letter
        (["ENTER"], "enter"),
        (["shift", "+"], "shift+plus"),
        (["a", "ctrl"], "ctrl+a"),  # modifiers first
        (["CMD", "SPACE"], "cmd+space"),
        (["option", "tab"], "alt+tab"),
    ],
)
def test_the_agents_sdk_key_names_become_the_desktops(keys: list[str], combo: str) -> None:
    assert key_combo(keys) == combo


def test_scrolled_pixels_become_wheel_clicks() -> None:
    assert [_wheel(p) for p in (0, 30, 100, -250, 100_000)] == [0, 1, 1, -2, 100]


def _outcome(status: str, code: str, error: str) -> ActResult:
    return ActResult("left_click", "act_1", status, code, error, None, "", (), {})


def test_a_model_is_told_what_happened_and_what_to_do() -> None:
    killed = explain(_outcome("refused", "kill_switch", "kill_switch: engaged for run_1"))
    assert killed.startswith("left_click was refused and nothing was done: kill_switch:")
    assert "stop now" in killed
    unknown = explain(_outcome("unknown", "", "the worker went away"))
    assert unknown.startswith("left_click may or may not have happened")
    assert explain(_outcome("refused", "out_of_scope", "")).endswith("do not try it again.")
