"""Whether desktop input may happen now: the fleet's kill switches, the local one, the link.

Input fails closed: it stops when a kill switch applies (pushed by the coordinator, or the
local switch: a file in the state directory, engaged by `deskfleet-worker kill engage` or by
SIGUSR1), and when the worker has no coordinator to answer to. Handlers ask before they start
and between chunks, so a kill stops typing within one chunk.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

KILL_FILE = "KILL"


@dataclass(frozen=True)
class Kill:
    kill_id: str
    scope: str  # fleet | worker | run
    target: str
    reason: str


class InputGuard:
    def __init__(self, state_dir: Path) -> None:
        self.kill_file = state_dir / KILL_FILE
        self._lock = threading.Lock()
        self._kills: dict[str, Kill] = {}
        self._connected = False

    def set_connected(self, connected: bool) -> None:
        with self._lock:
            self._connected = connected

    def replace(self, kills: list[Kill]) -> None:
        """The full set engaged now (sent with every welcome)."""
        with self._lock:
            self._kills = {k.kill_id: k for k in kills}

    def apply(self, kill: Kill, engaged: bool) -> None:
        with self._lock:
            if engaged:
                self._kills[kill.kill_id] = kill
            else:
                self._kills.pop(kill.kill_id, None)

    def engaged(self) -> list[Kill]:
        with self._lock:
            return list(self._kills.values())

    def blocked(self, run_id: str) -> str | None:
        """Why input may not happen for this run now, or None."""
        if self.kill_file.exists():
            return (
                f"the local kill switch is engaged ({self.kill_file}); release it with"
                " `deskfleet-worker kill release`"
            )
        with self._lock:
            if not self._connected:
                return "the worker has lost its coordinator: input stops until it is back"
            for kill in self._kills.values():
                if kill.scope in ("fleet", "worker") or kill.target == run_id:
                    return f"kill switch {kill.kill_id} ({kill.scope}) is engaged: {kill.reason}"
        return None

    def engage_local(self, reason: str) -> None:
        text = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {reason}\n"
        self.kill_file.parent.mkdir(parents=True, exist_ok=True)
        self.kill_file.write_text(text)

    def release_local(self) -> bool:
        existed = self.kill_file.exists()
        self.kill_file.unlink(missing_ok=True)
        return existed

    def install_signal(self) -> None:
        """SIGUSR1 engages the local kill switch (a hotkey daemon or a script can send it)."""
        if os.name != "posix":
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            self.engage_local("engaged by SIGUSR1")

        signal.signal(signal.SIGUSR1, handler)
