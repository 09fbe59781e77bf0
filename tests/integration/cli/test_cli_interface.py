"""Shell completion as the shells load it: bash sources, registers and completes; zsh and
fish scripts parse. The CLI's surface alone is tests/unit/cli/test_cli_interface.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.cli.test_cli_interface import completion


def test_bash_completion_sources_registers_and_completes(tmp_path: Path) -> None:
    script = completion("bash", tmp_path)
    assert subprocess.run(["bash", "-n", script], timeout=30).returncode == 0
    probe = (
        f"source {script}\n"
        "complete -p deskfleet\n"
        "COMP_WORDS=(deskfleet ru); COMP_CWORD=1; COMP_LINE='deskfleet ru'; COMP_POINT=12\n"
        '_shtab_deskfleet; echo "top: ${COMPREPLY[*]}"\n'
        "COMP_WORDS=(deskfleet runs show --); COMP_CWORD=3\n"
        '_shtab_deskfleet; echo "options: ${COMPREPLY[*]}"\n'
        "COMP_WORDS=(deskfleet tokens ''); COMP_CWORD=2\n"
        '_shtab_deskfleet; echo "tokens: ${COMPREPLY[*]}"\n'
        "COMP_WORDS=(deskfleet users ''); COMP_CWORD=2\n"
        '_shtab_deskfleet; echo "users: ${COMPREPLY[*]}"\n'
        "COMP_WORDS=(deskfleet --); COMP_CWORD=1\n"
        '_shtab_deskfleet; echo "before: ${COMPREPLY[*]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", probe], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("complete ") and lines[0].endswith(" deskfleet")
    assert lines[1] == "top: runs"
    assert "--artifacts-dir" in lines[2].split() and "--coordinator" in lines[2].split()
    assert set(lines[3].split()[1:]) == {"create", "list", "revoke"}
    assert {"create", "list", "rotate", "limits"} <= set(lines[4].split()[1:])
    # The shared options come before the command too.
    assert {"--coordinator", "--token-file", "--ca-file", "--json"} <= set(lines[5].split())


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_scripts(shell: str, tmp_path: Path) -> None:
    script = completion(shell, tmp_path)
    text = script.read_text()
    if shell == "zsh":
        assert text.startswith("#compdef deskfleet")
    else:
        assert "complete -c deskfleet" in text
    for word in ("runs", "workers", "completion", "--coordinator", "--artifacts-dir"):
        assert word in text, word
    if shutil.which(shell):  # check the syntax when the shell is installed
        assert subprocess.run([shell, "-n", script], timeout=30).returncode == 0
