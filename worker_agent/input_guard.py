"""Whether desktop input may happen now: the fleet's kill switches, the local one, the link.

Input fails closed: it stops when a kill switch applies (pushed by the coordinator, or the
local switch: a file in the state directory, engaged by `deskfleet-worker kill engage`, by
SIGUSR1 or by the hotkey), and when the worker has no coordinator to answer to. Handlers ask
before they start and between chunks, so a kill stops typing within one chunk.

The local switch's file says since when, by which means and why (`{"since", "means",
"reason"}`): the worker reports that to its coordinator (`local_state`), so admins see it. Any
other file named KILL (a person's `touch`, an older worker's line of text) engages it just the
same, reported as engaged by a file since the file's time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import FrameType

from shared.files import replace_atomically
from shared.local_kill import MEANS, LocalKill, clean_reason

KILL_FILE = "KILL"
MAX_KILL_FILE = 4096  # bytes read of it: what it says, not what it could hold


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
        self._local: tuple[tuple[int, int, int], LocalKill] | None = None

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

    def stopped(self) -> str | None:
        """Why nothing of this desktop may be shown or touched for anyone now, or None: the
        local kill switch, or any kill switch engaged here, a run's included (a person who
        stopped one run may be at the machine, and a peek, a watch or a takeover serves no
        run of its own to tell apart)."""
        if self.kill_file.exists():
            return f"the local kill switch is engaged ({self.kill_file})"
        for kill in self.engaged():
            return f"kill switch {kill.kill_id} ({kill.scope}) is engaged"
        return None

    def engage_local(self, reason: str, means: str = "command") -> LocalKill:
        """Engage the local switch (kept as it is when already engaged: since when is the
        first engagement's); returns the switch as it now stands."""
        current = self.local_state()
        if current.engaged:
            return current
        state = LocalKill(True, time.time(), means, clean_reason(reason))
        self.kill_file.parent.mkdir(parents=True, exist_ok=True)
        text = {"since": state.since, "means": state.means, "reason": state.reason}
        replace_atomically(self.kill_file, json.dumps(text) + "\n", 0o600)
        return state

    def release_local(self) -> bool:
        existed = self.kill_file.exists()
        self.kill_file.unlink(missing_ok=True)
        return existed

    def local_state(self) -> LocalKill:
        """The local switch as its file says (the file is read again only when it changed)."""
        try:
            info = self.kill_file.stat()
        except FileNotFoundError:
            return LocalKill()
        except OSError:
            # A file that cannot be looked at still blocks input (`blocked`): say so.
            return LocalKill(True, time.time(), "file", "a KILL file that cannot be read")
        key = (info.st_ino, info.st_mtime_ns, info.st_size)
        with self._lock:
            if self._local is not None and self._local[0] == key:
                return self._local[1]
        state = _read_kill_file(self.kill_file, info.st_mtime)
        with self._lock:
            self._local = (key, state)
        return state

    def install_signal(self) -> None:
        """SIGUSR1 engages the local kill switch (a hotkey daemon or a script can send it)."""
        if os.name != "posix":
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            self.engage_local("engaged by SIGUSR1", "signal")

        signal.signal(signal.SIGUSR1, handler)


def _read_kill_file(path: Path, mtime: float) -> LocalKill:
    """What a KILL file says; a file this worker did not write is engaged by `file`."""
    text = ""
    with contextlib.suppress(OSError), path.open("rb") as fh:
        text = fh.read(MAX_KILL_FILE).decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        since, means, reason = data.get("since"), data.get("means"), data.get("reason")
        if (
            isinstance(since, int | float)
            and not isinstance(since, bool)
            and means in MEANS
            and isinstance(reason, str)
        ):
            return LocalKill(True, float(since), str(means), clean_reason(reason))
    # An older worker wrote "ISO-TIME reason"; anything else is a file someone put there.
    first, _, rest = text.strip().partition(" ")
    with contextlib.suppress(ValueError):
        when = datetime.fromisoformat(first.replace("Z", "+00:00")).timestamp()
        return LocalKill(True, when, "file", clean_reason(rest) or "a KILL file")
    return LocalKill(True, mtime, "file", clean_reason(text) or "a KILL file")
