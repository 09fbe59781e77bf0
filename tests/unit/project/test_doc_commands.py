"""The documentation's shell blocks say what they are, and its command references name commands
and options that exist.

Every shell block of README.md and docs/INSTALL-*.md is fenced ```sh {test} (run as written by
tests/e2e/project/test_readme_commands.py), ```sh {synopsis} (placeholders: checked here against
the programs' own parsers) or ```sh {not-run-here: WHY}. A synopsis naming a command that was
renamed, or an option it does not take, fails here: the README's `deskfleet --ca-file ca.pem
status` was refused by the parser it documents.
"""

from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator.admin_cli.main import _parser as admin_parser
from coordinator.app.cli import _parser as coordinator_parser
from worker_agent.cli import _parser as worker_parser

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("INSTALL-*.md"))]
SHELLS = {"sh", "bash", "shell", "console", "powershell"}
FENCE = re.compile(r"^```(\S*)\s*(?:\{([^}]*)\})?\s*$")
PROGRAMS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "deskfleet": admin_parser,
    "deskfleet-coordinator": coordinator_parser,
    "deskfleet-worker": worker_parser,
}
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    tag: str
    text: str


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        yield Block(path, start + 1, m.group(1), (m.group(2) or "").strip(), "\n".join(body))
        i += 1


def shell_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks(path) if b.language in SHELLS]


def _where(block: Block) -> str:
    return f"{block.path.relative_to(ROOT)}:{block.line}"


def test_every_shell_block_says_whether_it_runs_here() -> None:
    found = shell_blocks()
    assert sum(b.tag == "test" for b in found) >= 4, "the README's first steps are {test} blocks"
    untagged = [
        _where(b)
        for b in found
        if not (
            b.tag in ("test", "synopsis")
            or (b.tag.startswith("not-run-here:") and b.tag.split(":", 1)[1].strip())
        )
    ]
    assert untagged == [], (
        f"each shell block is ```sh {{test}}, {{synopsis}} or {{not-run-here: WHY}}: {untagged}"
    )


def test_blocks_of_other_languages_are_not_commands() -> None:
    """A block with no language is read as nothing: one holding a command must say sh."""
    for path in DOCS:
        for b in blocks(path):
            if b.language == "" and b.tag == "":
                lines = [ln.strip() for ln in b.text.splitlines()]
                assert not any(ln.startswith(tuple(PROGRAMS)) for ln in lines), _where(b)


def commands(text: str) -> Iterator[str]:
    """The command lines of a block: continuations joined, comments and `VAR=$(` taken off."""
    joined: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        joined.append(line)
    for line in joined:
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        line = re.sub(r"^[A-Z_]+=\$\(", "", line).rstrip(")")
        line = line.removeprefix("$ ")
        if line.split(" ", 1)[0] in PROGRAMS:
            yield line


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for child in _choices(parser).values():
        yield from _all_parsers(child)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def check_command(line: str) -> list[str]:
    """What in one synopsis line the program does not know."""
    words = line.split()
    parser = PROGRAMS[words[0]]()
    known = _options(parser)
    flags = {  # options that take no value, wherever they are
        s
        for p in _all_parsers(parser)
        for a in p._actions
        if a.nargs == 0
        for s in a.option_strings
    }
    level = parser  # the parser whose subcommands the next words may name
    problems: list[str] = []
    alternative = False
    for previous, word in itertools.pairwise(words):
        option = previous.strip("[]")
        if option.startswith("--") and option not in flags and not word.startswith("-"):
            continue  # an option's value (`--max-active-runs N|none|default`)
        if word == "|":
            alternative = True
            continue
        pieces = [p for p in word.strip("[]").split("|") if p]
        choices = _choices(level)
        names = [p for p in pieces if re.fullmatch(r"[a-z][a-z0-9-]*", p)]
        if choices and names and names[0] in choices:
            for name in names:
                if name not in choices:
                    problems.append(f"no command {name!r} beside {names[0]!r}")
            chosen = choices[names[0]]
            known |= set().union(*(_options(choices[n]) for n in names if n in choices))
            if _choices(chosen):
                level = chosen
            alternative = False
            continue
        if alternative and choices and names and not word.startswith("-"):
            problems.append(f"no command {names[0]!r}")
        alternative = False
        # `W|revoke W|drain`: the command's alternatives come after a placeholder.
        if choices and len(pieces) > 1 and not re.fullmatch(r"[a-z][a-z0-9-]*", pieces[0]):
            for name in names:
                if name in choices:
                    known |= _options(choices[name])
                else:
                    problems.append(f"no command {name!r}")
    for option in OPTION.findall(re.sub(r"'[^']*'|\"[^\"]*\"", "", line)):
        if option not in known:
            problems.append(f"no option {option}")
    return problems


def synopsis_lines() -> list[tuple[str, str]]:
    return [
        (f"{_where(b)}: {line}", line)
        for b in shell_blocks()
        if b.tag in ("synopsis", "test")
        for line in commands(b.text)
    ]


@pytest.mark.parametrize(("where", "line"), synopsis_lines(), ids=lambda v: v[:60])
def test_documented_commands_and_options_exist(where: str, line: str) -> None:
    assert check_command(line) == [], where


def test_the_check_finds_a_missing_command_and_option() -> None:
    """The check itself can fail: a renamed command, an option nobody takes."""
    assert check_command("deskfleet workers list|show W|erase W") == ["no command 'erase'"]
    assert check_command("deskfleet runs watch ID --after-seq N --replay") == ["no option --replay"]
    assert check_command("deskfleet tokens create --ttl 1h | revoke ID") == []
    assert check_command("deskfleet tokens create | burn ID") == ["no command 'burn'"]
    assert check_command("deskfleet --ca-file ca.pem status") == []
    assert check_command("deskfleet --json status --limit 5") == []
    assert check_command("deskfleet --json status --page 5") == ["no option --page"]
    assert check_command("deskfleet-coordinator serve --db X --listen 127.0.0.1:1") == []
    assert check_command("deskfleet-worker run --state-dir D --chromium C --no-such") == [
        "no option --no-such"
    ]
