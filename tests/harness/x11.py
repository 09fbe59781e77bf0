"""A real X server (Xvfb) for desktop tests and benchmarks."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from tests.harness.processes import wait_until


class Xvfb:
    """A real X server on a free display number, with its own authority file."""

    def __init__(self, workdir: Path, width: int = 1280, height: int = 800) -> None:
        self.workdir = workdir
        self.size = (width, height)
        self.proc: subprocess.Popen[bytes] | None = None
        self.display = ""
        self.auth = workdir / "Xauthority"

    @staticmethod
    def available() -> bool:
        return shutil.which("Xvfb") is not None and shutil.which("xauth") is not None

    def start(self) -> Xvfb:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Parallel test processes (pytest-xdist: gw0, gw1, ...) start from their own numbers,
        # so that two of them never race for the same free display.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        first = 90 + 20 * int(worker.removeprefix("gw") or 0)
        number = next(
            n
            for n in range(first, first + 100)
            if not Path(f"/tmp/.X{n}-lock").exists() and not Path(f"/tmp/.X11-unix/X{n}").exists()
        )
        self.display = f":{number}"
        self.auth.touch()
        subprocess.run(
            ["xauth", "-f", str(self.auth), "add", self.display, ".", secrets.token_hex(16)],
            check=True,
            capture_output=True,
        )
        width, height = self.size
        self.proc = subprocess.Popen(
            [
                "Xvfb",
                self.display,
                "-screen",
                "0",
                f"{width}x{height}x24",
                "-nolisten",
                "tcp",
                "-auth",
                str(self.auth),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: Path(f"/tmp/.X11-unix/X{number}").exists(), 10, what="Xvfb socket")
        return self

    @property
    def env(self) -> dict[str, str]:
        return {"DISPLAY": self.display, "XAUTHORITY": str(self.auth)}

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
