"""`deskfleet ARGS` (and `deskfleet-worker enroll`) run in the test process: the program's own
`main`, without an interpreter start.

A CLI process costs about 0.3 s of a core to start (Python, gRPC, protobuf), and the suite
runs some hundreds of them, nearly all to set up or inspect what a test is about. In-process,
the same code parses the arguments, calls the coordinator over gRPC, renders and picks the exit
code; what differs is only the process around it, so the result is returned in the shape of
`subprocess.run`'s. Tests of the process itself (a terminal, signals, the installed entry
point) start the real program.

Only the calling thread is redirected: the test's own servers and background threads keep
writing where they did. Calls from any other thread run as a subprocess, because the
environment the CLI reads is the process's and is swapped for the call. Set
DESKFLEET_TEST_CLI_PROCESS=1 to run every call as a process of the installed `deskfleet`.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

_lock = threading.Lock()
_target = threading.local()


class _ThreadRouted(io.TextIOBase):
    """A stream that sends the redirected thread's writes to its buffer, others' onwards."""

    def __init__(self, onwards: TextIO, which: str) -> None:
        self._onwards = onwards
        self._which = which

    def _stream(self) -> TextIO:
        here: TextIO | None = getattr(_target, self._which, None)
        return here if here is not None else self._onwards

    def write(self, text: str) -> int:
        return self._stream().write(text)

    def flush(self) -> None:
        self._stream().flush()

    def isatty(self) -> bool:
        return self._stream().isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _main_of(program: str) -> Callable[[list[str]], int]:
    """The entry point of an installed console script (the test process pays its import once)."""
    if program == "deskfleet":
        from coordinator.admin_cli.main import main
    elif program == "deskfleet-worker":
        from worker_agent.cli import main
    else:
        raise ValueError(f"{program} is not run in-process")
    return main


def run_in_process(
    argv: list[str], env: Mapping[str, str], input_text: str | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`deskfleet argv[1:]` by its `main`, with this environment and standard input.
    `timeout` bounds a call run as a process; in-process, the CLI's own deadlines do."""
    if threading.current_thread() is not threading.main_thread() or os.environ.get(
        "DESKFLEET_TEST_CLI_PROCESS"
    ):
        return subprocess.run(
            argv, capture_output=True, text=True, env=dict(env), input=input_text, timeout=timeout
        )
    main = _main_of(Path(argv[0]).name)

    out, err = io.StringIO(), io.StringIO()
    streams = sys.stdin, sys.stdout, sys.stderr
    with _lock, _environment(env):
        sys.stdout = _ThreadRouted(sys.stdout, "out")
        sys.stderr = _ThreadRouted(sys.stderr, "err")
        sys.stdin = io.StringIO(input_text or "")
        _target.out, _target.err = out, err
        try:
            code: Any = main(argv[1:])
        except SystemExit as exc:  # argparse's usage errors, `--help`
            code = exc.code
        except Exception:  # what a process would print before it died
            err.write(traceback.format_exc())
            code = 1
        finally:
            _target.out = _target.err = None
            sys.stdin, sys.stdout, sys.stderr = streams
    if code is None:
        code = 0
    elif not isinstance(code, int):
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
