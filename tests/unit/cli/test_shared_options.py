"""The options every command shares (the coordinator, the credential, the CA, the timeout and
--json) mean the same before the command as after it, as the README writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.admin_cli import main as cli
from tests.unit.cli.test_cli_interface import clean_env, run_cli

__all__ = ["clean_env"]  # the fixture, used by name

SHARED = ("coordinator", "token_file", "ca_file", "timeout", "json")


def shared(argv: list[str]) -> dict[str, object]:
    args = vars(cli._parser().parse_args(argv))
    return {name: args[name] for name in SHARED}


@pytest.mark.parametrize(
    "command",
    [["status"], ["tokens", "create"], ["runs", "list", "--status", "RUNNING"], ["whoami"]],
)
def test_shared_options_parse_the_same_before_and_after_the_command(command: list[str]) -> None:
    given = [
        "--coordinator",
        "coord.example:50051",
        "--token-file",
        "admin.token",
        "--ca-file",
        "ca.pem",
        "--timeout",
        "3",
        "--json",
    ]
    before, after = shared([*given, *command]), shared([*command, *given])
    assert before == after
    assert before == {
        "coordinator": "coord.example:50051",
        "token_file": "admin.token",
        "ca_file": "ca.pem",
        "timeout": 3.0,
        "json": True,
    }
    # Given nowhere: the defaults, whichever parser holds them.
    assert shared(command) == {
        "coordinator": None,
        "token_file": None,
        "ca_file": None,
        "timeout": cli.DEFAULT_TIMEOUT,
        "json": False,
    }


def test_after_the_command_wins_over_before() -> None:
    argv = ["--coordinator", "a:1", "status", "--coordinator", "b:2"]
    assert shared(argv)["coordinator"] == "b:2"


def test_the_readme_ca_file_before_the_command_reaches_the_ca(
    clean_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deskfleet --ca-file ca.pem status` was `invalid choice: 'ca.pem'`: now the CA file is
    read, so a missing one is refused alike in both positions."""
    missing = str(tmp_path / "ca.pem")
    token = tmp_path / "admin.token"
    token.write_text("dfa_x\n")
    answers = []
    for argv in (
        ["--ca-file", missing, "--token-file", str(token), "status"],
        ["status", "--ca-file", missing, "--token-file", str(token)],
    ):
        code, out, err = run_cli(argv, capsys)
        assert "invalid choice" not in err
        answers.append((code, out, err))
    assert answers[0] == answers[1]
    code, out, err = answers[0]
    assert code != 0 and out == "" and missing in err and len(err.splitlines()) == 1


def test_a_bad_address_before_the_command_is_refused_as_after(
    clean_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    before = run_cli(["--coordinator", "h:99999", "status"], capsys)
    after = run_cli(["status", "--coordinator", "h:99999"], capsys)
    assert before == after
    assert before == (
        cli.EXIT_USAGE,
        "",
        "deskfleet: --coordinator h:99999: the port must be 1-65535\n",
    )


def test_mcp_refuses_json_before_the_command_as_after(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["--json", "mcp"], capsys)
    assert code == 2 and "mcp prints no JSON document" in err
    code, _, err = run_cli(["mcp", "--json"], capsys)
    assert code == 2 and "unrecognized arguments: --json" in err


def test_help_says_the_options_may_follow_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and "--ca-file" in out
    assert "may also come after the command" in " ".join(out.split())
