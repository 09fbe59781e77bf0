"""The CLI's surface, without a coordinator: help on every argument, the same metavar for the
same kind of id, completion scripts, the default address, address and credential refusals,
tables cut to the terminal (whole in --json)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.admin_cli import main as cli, render, runs_commands
from coordinator.admin_cli.completion import SHELLS
from shared.config import DEFAULT_COORDINATOR
from shared.gen.deskfleet.v1 import runs_pb2
from tests.harness import BIN

ROOT = Path(__file__).resolve().parents[3]


def leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the tree with its command path, the root included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from leaves(child, (*path, name))


def arguments(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for path, p in leaves(parser):
        for action in p._actions:
            if not isinstance(action, argparse._HelpAction | argparse._VersionAction):
                yield path, action


def name_of(path: tuple[str, ...], action: argparse.Action) -> str:
    return " ".join(
        [
            "deskfleet",
            *path,
            action.option_strings[0]
            if action.option_strings
            else (str(action.metavar or action.dest)),
        ]
    )


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No coordinator, credential or CA from the environment or a config file."""
    for name in ("DESKFLEET_COORDINATOR", "DESKFLEET_TOKEN_FILE", "DESKFLEET_CA_FILE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# --- help and metavars -------------------------------------------------------------------


def test_every_argument_of_every_command_has_help() -> None:
    missing = [
        name_of(path, action)
        for path, action in arguments(cli._parser())
        if not isinstance(action, argparse._SubParsersAction)
        and (not action.help or action.help == argparse.SUPPRESS)
    ]
    assert missing == []


def test_every_command_has_help_in_its_parents_list() -> None:
    missing = []
    for path, p in leaves(cli._parser()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {c.dest for c in action._choices_actions if c.help}
                missing += [" ".join([*path, n]) for n in action.choices if n not in helped]
    assert missing == []


def test_ids_are_named_the_same_everywhere() -> None:
    expected = {"runs": "RUN_ID", "journal": "RUN_ID", "desktop": "RUN_ID"}
    expected |= {"workers": "WORKER_ID", "approvals": "APPROVAL_ID", "questions": "QUESTION_ID"}
    expected |= {"tokens": "TOKEN_ID"}
    seen: dict[str, str] = {}
    for path, action in arguments(cli._parser()):
        name = name_of(path, action)
        if not action.option_strings and action.dest in ("id", "run_id"):
            seen[name] = str(action.metavar)
            assert action.metavar == expected[path[0]], name
        if action.option_strings and action.dest in ("run_target", "worker", "desktop"):
            want = "RUN_ID" if action.dest == "run_target" else "WORKER_ID"
            assert action.metavar == want, name
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            # Positionals read as placeholders, never as a lower-case dest.
            assert action.metavar and str(action.metavar) != action.dest, name
    assert len(seen) >= 15  # the walk really found the id positionals


def test_help_names_the_default_coordinator(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and DEFAULT_COORDINATOR in out and "completion" in out
    code, out, _ = run_cli(["runs", "list", "--help"], capsys)
    assert code == 0 and f"default {DEFAULT_COORDINATOR}" in " ".join(out.split())


def test_mcp_takes_no_json_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["mcp", "--json"], capsys)
    assert code == 2 and "unrecognized arguments: --json" in err
    code, out, _ = run_cli(["mcp", "--help"], capsys)
    assert code == 0 and "--json" not in out and "--coordinator" in out


# --- the coordinator's address and the credential ------------------------------------------


@pytest.mark.parametrize(
    ("address", "error"),
    [
        ("h:99999", "--coordinator h:99999: the port must be 1-65535"),
        ("h:0", "--coordinator h:0: the port must be 1-65535"),
        ("h:5x", "--coordinator h:5x: the port must be 1-65535"),
        ("h", "--coordinator h: expected HOST:PORT"),
        ("::1", "--coordinator ::1: expected HOST:PORT"),
    ],
)
def test_a_bad_coordinator_address_is_one_line(
    address: str, error: str, clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["status", "--coordinator", address], capsys)
    assert (code, out, err) == (cli.EXIT_USAGE, "", f"deskfleet: {error}\n")


def test_a_bad_port_from_the_environment_or_the_file_names_its_source(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DESKFLEET_COORDINATOR", "h:70000")
    code, _, err = run_cli(["status"], capsys)
    assert (code, err) == (
        2,
        "deskfleet: DESKFLEET_COORDINATOR h:70000: the port must be 1-65535\n",
    )
    monkeypatch.delenv("DESKFLEET_COORDINATOR")
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "deskfleet" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"coordinator": "h:65536"}))
    code, _, err = run_cli(["status"], capsys)
    assert (code, err) == (2, f"deskfleet: {config} h:65536: the port must be 1-65535\n")


def test_valid_addresses_pass(clean_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    for address in ("localhost:1", "127.0.0.1:65535", "[::1]:50051", "unix:/tmp/sock"):
        code, _, err = run_cli(["status", "--coordinator", address], capsys)
        # Past the address: the refusal is the missing credential.
        assert (code, err) == (
            2,
            "deskfleet: no credential: pass --token-file PATH or set DESKFLEET_TOKEN_FILE\n",
        ), address


def test_neither_coordinator_nor_credential_names_both(
    clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["status"], capsys)
    assert (code, out) == (cli.EXIT_USAGE, "")
    assert err == (
        "deskfleet: no coordinator and no credential given: pass --coordinator HOST:PORT"
        f" (or set DESKFLEET_COORDINATOR; default {DEFAULT_COORDINATOR}) and --token-file PATH"
        " (or set DESKFLEET_TOKEN_FILE)\n"
    )


# --- completion ----------------------------------------------------------------------------


def completion(shell: str, tmp_path: Path) -> Path:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [BIN / "deskfleet", "completion", shell],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    script = tmp_path / f"deskfleet.{shell}"
    script.write_text(done.stdout)
    return script


def test_completion_refuses_other_shells(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["completion", "tcsh"], capsys)
    assert code == 2 and "invalid choice: 'tcsh'" in err
    assert SHELLS == ("bash", "zsh", "fish")


# --- tables cut to the terminal, whole in --json -------------------------------------------

REASON = "budget_exhausted: " + "the run used every attempt it was given " * 4


class FakeRuns:
    def ListRuns(self) -> None:  # only its identity matters: FakeClient.call answers
        raise AssertionError


class FakeClient:
    runs = FakeRuns()

    def call(self, method: object, request: object) -> runs_pb2.ListRunsResponse:
        updated = Timestamp(seconds=1_700_000_000)
        return runs_pb2.ListRunsResponse(
            runs=[
                runs_pb2.Run(
                    id="run_0123456789abcdef",
                    title="a title long enough to need cutting as well, surely",
                    status="FAILED",
                    stop_reason=REASON,
                    updated_at=updated,
                    actions_total=3,
                    actions_succeeded=1,
                )
            ]
        )


def list_runs(json_out: bool) -> None:
    args = argparse.Namespace(
        json=json_out, status=None, kind=None, owner=None, limit=50, parent=None
    )
    runs_commands.list_runs(FakeClient(), args)  # type: ignore[arg-type]


def test_wide_columns_are_cut_to_the_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "140")
    list_runs(json_out=False)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(len(line) <= 140 for line in lines), lines
    assert "budget_exhausted: the run" in lines[1] and render.ELLIPSIS in lines[1]
    assert lines[1].split()[-1].startswith("2023-11-14T")  # the column after the cut ones stays
    # Too narrow for the other columns: a cut column keeps its header's width, or 12.
    monkeypatch.setenv("COLUMNS", "20")
    list_runs(json_out=False)
    row = capsys.readouterr().out.splitlines()[1]
    assert "a title lon" + render.ELLIPSIS in row
    assert "budget_exhausted: th" + render.ELLIPSIS in row


def test_json_and_pipes_get_the_whole_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    list_runs(json_out=True)
    assert json.loads(capsys.readouterr().out)["runs"][0]["stopReason"] == REASON
    monkeypatch.delenv("COLUMNS")  # not a terminal (captured) and no COLUMNS: whole cells
    list_runs(json_out=False)
    assert REASON.rstrip() in capsys.readouterr().out


def test_the_cut_keeps_narrow_columns_whole() -> None:
    widths = render._fit([10, 30, 80, 5], [2, 6, 6, 5], cut=(1, 2), limit=80)
    assert widths[0] == 10 and widths[3] == 5
    assert sum(widths) + 2 * 3 <= 80 and widths[1] >= render.MIN_CUT_WIDTH
