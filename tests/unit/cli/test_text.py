"""Text for terminals (shared/text.py): what the API refuses, and how the rest is printed."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from coordinator.admin_cli import render, top
from shared.errors import InvalidArgumentError
from shared.text import refuse_control, storable, visible

# One example of each class the rule names, with how it is spelled out.
CLASSES = {
    "C0 NUL": ("\x00", "\\x00"),
    "C0 BEL": ("\x07", "\\x07"),
    "C0 backspace": ("\x08", "\\x08"),
    "C0 ESC": ("\x1b", "\\x1b"),
    "C0 CR": ("\r", "\\r"),
    "C0 LF": ("\n", "\\n"),
    "C0 TAB": ("\t", "\\t"),
    "DEL": ("\x7f", "\\x7f"),
    "C1 NEL": ("\x85", "\\x85"),
    "C1 CSI": ("\x9b", "\\x9b"),
    "C1 OSC": ("\x9d", "\\x9d"),
    "bidi LRE": ("\u202a", "\\u202a"),
    "bidi RLE": ("\u202b", "\\u202b"),
    "bidi PDF": ("\u202c", "\\u202c"),
    "bidi LRO": ("\u202d", "\\u202d"),
    "bidi RLO": ("\u202e", "\\u202e"),
    "bidi LRI": ("\u2066", "\\u2066"),
    "bidi RLI": ("\u2067", "\\u2067"),
    "bidi FSI": ("\u2068", "\\u2068"),
    "bidi PDI": ("\u2069", "\\u2069"),
}
MULTILINE_OK = {"C0 LF", "C0 TAB"}
HOSTILE = "approve \x1b[2K\r\x1b[1Ascreenshot only\u202eevil\x9b31m"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_is_refused_in_one_line_text(name: str) -> None:
    char, _ = CLASSES[name]
    with pytest.raises(InvalidArgumentError) as caught:
        refuse_control("reason", f"ok{char}ok")
    message = caught.value.message
    assert message.startswith("reason: must not contain control")
    assert f"U+{ord(char):04X} at position 2" in message
    assert "\n" not in message and char not in message  # the error itself is one clean line


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_multiline_text_takes_line_breaks_and_tabs_only(name: str) -> None:
    char, _ = CLASSES[name]
    if name in MULTILINE_OK:
        refuse_control("text", f"first{char}second", multiline=True)
    else:
        with pytest.raises(InvalidArgumentError, match="line breaks and tabs are allowed"):
            refuse_control("text", f"first{char}second", multiline=True)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_is_spelled_out(name: str) -> None:
    char, spelled = CLASSES[name]
    assert visible(f"a{char}b") == f"a{spelled}b"
    kept = visible(f"a{char}b", multiline=True)
    assert kept == (f"a{char}b" if name in MULTILINE_OK else f"a{spelled}b")


def test_ordinary_text_passes_unchanged() -> None:
    text = "Café — 東京 ✓ 🙂 «quotes» back\\slash \u200d zero-width joiner, Ω, ß"
    refuse_control("title", text)
    assert visible(text) == text


def test_writer_spells_out_what_is_printed_and_keeps_json_exact() -> None:
    raw = io.StringIO()
    out = render.VisibleWriter(raw)
    print(f"reason: {HOSTILE}", file=out)
    assert raw.getvalue() == f"reason: {visible(HOSTILE)}\n"
    assert "\x1b" not in raw.getvalue() and "\u202e" not in raw.getvalue()

    raw = io.StringIO()
    document = {"reason": HOSTILE, "lines": "a\nb\tc"}
    json.dump(document, render.VisibleWriter(raw), indent=2)
    assert json.loads(raw.getvalue()) == document  # the exact text, for programs


def test_table_cells_show_a_hostile_reason_on_one_visible_line() -> None:
    shown = render.approval_rows(
        [{"id": "apr_1", "runId": "run_1", "workerId": "wkr_1", "status": "PENDING",
          "reason": HOSTILE + "\nfake row", "scope": {"actions": ["screenshot"]}}]
    )  # fmt: skip
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert len(shown.splitlines()) == 2  # header and one row: no forged line
    assert "\\x1b[2K\\r\\x1b[1Ascreenshot only\\u202eevil" in shown


def test_top_frame_prints_no_control_character_and_no_markup() -> None:
    doc = {
        "coordinator": "127.0.0.1:1",
        "at": "2025-01-01T00:00:00+00:00",
        "headlessOnline": 0,
        "computerUseOnline": 1,
        "workersOnline": 1,
        "workers": [
            {"id": "wkr_1", "name": "host\x1b]0;owned\x07", "state": "active", "online": True,
             "replica": "r1", "capabilities": ["computer_use"], "currentAction": None,
             "inFlight": 0},
        ],
        "runsByState": {"RUNNING": 1},
        "fleetWide": True,
        "approvalsWaiting": 1,
        "approvals": [{"id": "apr_1", "runId": "run_1", "workerId": "wkr_1",
                       "reason": HOSTILE + "[bold red]markup[/]", "requestedAt": None}],
        "killSwitchEngaged": True,
        "killSwitches": [{"scope": "fleet", "engagedBy": "x", "reason": "stop\x1b[8m"}],
    }  # fmt: skip
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(top.frame(doc, note="note\x1b[2J"))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;owned\\x07" in out
    assert "[bold red]markup[/]" in out  # shown as written, not read as style


def test_a_models_text_is_storable_with_nul_as_a_replacement_character() -> None:
    assert storable("door\x00one\x00") == "door\ufffdone\ufffd"
    assert storable("\x1b[31m\u202e\n") == "\x1b[31m\u202e\n"  # shown escaped, kept as written
