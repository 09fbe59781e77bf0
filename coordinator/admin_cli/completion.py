"""`deskfleet completion SHELL`: a completion script generated from the CLI's own parser.

The script is written by shtab from the argparse tree, so it always knows every command,
option and choice of the version that printed it; nothing runs Python while completing.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

SHELLS = ("bash", "zsh", "fish")

# Options and positionals whose metavar says they take a path complete as paths.
_FILE_METAVARS = frozenset({"FILE", "PLAN.json"})
_DIR_METAVARS = frozenset({"DIR"})


def completion_help() -> str:
    return (
        "Print a completion script for SHELL on stdout. Install it with:\n"
        "  bash: deskfleet completion bash > ~/.local/share/bash-completion/completions/deskfleet\n"
        "  zsh:  deskfleet completion zsh > ~/.zfunc/_deskfleet"
        "  (with fpath+=~/.zfunc before compinit)\n"
        "  fish: deskfleet completion fish > ~/.config/fish/completions/deskfleet.fish"
    )


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    seen: set[int] = set()
    stack = [parser]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for action in current._actions:
            yield action
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    import shtab  # only this command needs it

    for action in _actions(parser):
        if action.metavar in _FILE_METAVARS:
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        elif action.metavar in _DIR_METAVARS:
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    script = shtab.complete(parser, shell=shell)
    return script if script.endswith("\n") else script + "\n"
