"""The README's commands, as written: its ```sh {test} blocks, in order, in one bash.

A newcomer follows them from a checkout: the demo, then the first steps (a coordinator, a
worker on a display of its own, a research answer, a screenshot under an approval). They run
here on a fresh HOME with no `.venv` on the PATH and none of deskfleet's variables, so a block
that leans on something the README did not say fails. Each block's time is printed (the
newcomer's path, timed). Real coordinator, worker, Chromium and Xvfb; nothing is stubbed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import require
from tests.unit.project.test_doc_commands import ROOT, blocks

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
# What the blocks take as written: a coordinator's default port, the local site's, a display.
PORTS = (50051, 8765)
DISPLAY = 57


def _taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _display_taken(number: int) -> bool:
    """An X server holds the display: its lock names a live process (Xvfb replaces a stale one)."""
    try:
        pid = int(Path(f"/tmp/.X{number}-lock").read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _script(texts: list[str]) -> str:
    """The blocks in one script, each preceded by a mark with the time it starts."""
    parts = ["set -e -o pipefail", 'mark() { echo "@@ block $1 $(date +%s.%N)"; }']
    for n, text in enumerate(texts):
        parts += [f"mark {n}", text]
    parts.append(f"mark {len(texts)}")
    return "\n".join(parts) + "\n"


def _env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DESKFLEET_", "VIRTUAL_ENV", "XDG_"))
        and k not in ("DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY", "PYTHONPATH")
    }
    venv = str(ROOT / ".venv")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(venv)
    )
    env["HOME"] = str(home)
    return env


# The blocks' own limit is the shell's 420 s wait below; the suite's 120 s per test is for
# tests that start one thing, and a fresh machine's setup, demo and first commands take longer.
@pytest.mark.timeout(480)
def test_the_readmes_first_steps_run_as_written(tmp_path: Path) -> None:
    require(shutil.which("Xvfb") is not None, "Xvfb is not installed")
    require(Path("/usr/bin/chromium").exists(), "Debian's chromium is not installed")
    for port in PORTS:
        assert not _taken(port), f"127.0.0.1:{port} is taken here: the README's commands use it"
    assert not _display_taken(DISPLAY), f"display :{DISPLAY} is taken here"
    texts = [b.text for b in blocks(README) if b.language == "sh" and b.tag == "test"]
    assert len(texts) >= 5 and "make demo" in texts[0]
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        shell = subprocess.Popen(
            ["bash", "-c", _script(texts)],
            cwd=ROOT,
            env=_env(home),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # every process a block starts is in its group
        )
        lingering: list[int] = []
        try:
            code = shell.wait(timeout=420)
            # `kill $(jobs -p)` stops what the blocks started: nothing answers on their ports.
            deadline = time.monotonic() + 10
            while any(_taken(p) for p in PORTS) and time.monotonic() < deadline:
                time.sleep(0.2)
            lingering = [p for p in PORTS if _taken(p)]
        except subprocess.TimeoutExpired:
            code = None
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # TERM first: Xvfb takes its lock away
                try:
                    os.killpg(shell.pid, sig)
                except ProcessLookupError:
                    break
                time.sleep(0.5)
            shell.wait()
    printed = out.read_text(errors="replace")
    tail = "\n".join(printed.splitlines()[-40:])
    assert code == 0, f"the README's commands stopped (exit {code}):\n{tail}"
    marks = [float(m) for m in re.findall(r"^@@ block \d+ ([\d.]+)$", printed, re.M)]
    assert len(marks) == len(texts) + 1, tail
    for n, text in enumerate(texts):
        first = next(line for line in text.splitlines() if line.strip())
        print(f"block {n}: {marks[n + 1] - marks[n]:6.1f} s  {first[:70]}")
    print(f"all:     {marks[-1] - marks[0]:6.1f} s")

    assert "demo finished" in printed
    # The research answer, quoted from the page the worker's Chromium read.
    assert '"The North Light of Varn was first lit in 1847."' in printed, tail
    # The screenshot, of the worker's whole display, taken under the approval.
    shot = home / "deskfleet" / "screen.png"
    with Image.open(shot) as image:
        assert (image.format, image.size) == ("PNG", (1280, 800))
    assert re.search(r"computer use online: 1", printed), tail
    assert "Traceback" not in printed
    assert lingering == [], "the README's last block leaves these ports served"
