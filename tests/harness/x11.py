"""A real X server (Xvfb), and a Chromium app window on it, for desktop tests and benchmarks."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.harness.processes import tail, wait_until


class Xvfb:
    """A real X server on a free display number, with its own authority file; with
    `cookie=False` a plain `Xvfb :N` (no -auth: it lets in whoever connects, and its `env`
    names no XAUTHORITY)."""

    def __init__(
        self, workdir: Path, width: int = 1280, height: int = 800, *, cookie: bool = True
    ) -> None:
        self.workdir = workdir
        self.size = (width, height)
        self.cookie = cookie
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
        if self.cookie:
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
                *(("-auth", str(self.auth)) if self.cookie else ()),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: Path(f"/tmp/.X11-unix/X{number}").exists(), 10, what="Xvfb socket")
        return self

    @property
    def env(self) -> dict[str, str]:
        if not self.cookie:
            return {"DISPLAY": self.display}
        return {"DISPLAY": self.display, "XAUTHORITY": str(self.auth)}

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class ChromiumApp:
    """A Chromium `--app` window filling an Xvfb display (no window manager: placed by flags),
    with a HOME and profile of its own; Chromium's own output goes to `home/chromium.log`."""

    # A first Chromium start on a loaded two-core machine (the suite's other process, or the
    # benchmarks before) has taken longer than 30 s.
    SHOW_TIMEOUT = 90.0

    def __init__(self, display_env: Mapping[str, str], url: str, home: Path) -> None:
        self.url = url
        self.home = home
        self.env = {
            **display_env,
            "HOME": str(home),  # Chromium writes under HOME even with --user-data-dir
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "PATH": "/usr/bin:/bin",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("chromium") is not None and shutil.which("xdotool") is not None

    def start(self, width: int = 1280, height: int = 800) -> str:
        """Shows the page; returns the window's id once it is visible."""
        chromium = shutil.which("chromium")
        if chromium is None or shutil.which("xdotool") is None:
            raise RuntimeError("chromium and xdotool must be installed")
        if self.proc is not None:
            raise RuntimeError("the chromium window is already started")
        self.home.mkdir(parents=True, exist_ok=True)
        # The child keeps its own copy of the log's descriptor; this process needs none.
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    chromium,
                    "--test-type",  # else an "unsupported flag" bar pushes the page down 56 px
                    "--no-sandbox",
                    "--no-first-run",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--password-store=basic",
                    f"--user-data-dir={self.home / 'profile'}",
                    "--window-position=0,0",
                    f"--window-size={width},{height}",
                    f"--app={self.url}",
                ],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        try:
            wid: str = wait_until(self._shown, self.SHOW_TIMEOUT, 0.2, "the chromium window")
            return wid
        except TimeoutError as exc:
            alive = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
            self.stop()
            raise TimeoutError(f"{exc} (chromium {alive}; its log: {tail(self.log, 5)})") from exc

    @property
    def log(self) -> Path:
        return self.home / "chromium.log"

    def _shown(self) -> str:
        assert self.proc is not None
        if self.proc.poll() is not None:  # gone: waiting longer shows nothing
            raise RuntimeError(
                f"chromium exited {self.proc.returncode} before showing its window;"
                f" its log: {tail(self.log, 5)}"
            )
        done = subprocess.run(
            ["xdotool", "search", "--onlyvisible", "--class", "chromium"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
        )
        found = done.stdout.split() if done.returncode == 0 else []
        return found[-1] if found else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
