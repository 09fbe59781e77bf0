"""A worker's own kill switch as the worker reports it and every view shows it (30.19).

The switch lives on the worker (a `KILL` file in its state directory: `deskfleet-worker kill
engage`, SIGUSR1, the X11 hotkey, or a file a person or a script put there) and only the
worker releases it. The worker tells its coordinator the state in its hello and whenever it
changes; the coordinator keeps it with the worker's presence, so `kill status`, `status`,
`workers show`, `top` and the console show it. This module is the contract both sides hold to:
the means, the bounds of what a worker may send, and the check the coordinator applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import fleet_pb2
from shared.text import refuse_control, visible

# How it was engaged: the worker's command, SIGUSR1, the hotkey, or a KILL file that none of
# those wrote (a person or a script; a file from an older worker).
MEANS = ("command", "signal", "hotkey", "file")
MAX_REASON = 200  # characters
# Epoch seconds a report may name: from 2000 to 2100 (a worker's clock may be off, not absurd).
EARLIEST, LATEST = 946_684_800.0, 4_102_444_800.0


@dataclass(frozen=True)
class LocalKill:
    """Engaged since `since` (epoch seconds, the worker's clock) by `means`, saying `reason`;
    `LocalKill()` is a released switch."""

    engaged: bool = False
    since: float = 0.0
    means: str = ""
    reason: str = ""

    def to_proto(self) -> fleet_pb2.LocalKill:
        if not self.engaged:
            return fleet_pb2.LocalKill()
        since = Timestamp()
        since.FromNanoseconds(int(self.since * 1e9))
        return fleet_pb2.LocalKill(engaged=True, since=since, means=self.means, reason=self.reason)

    @classmethod
    def from_proto(cls, msg: fleet_pb2.LocalKill, field: str = "local_kill") -> LocalKill:
        """The report checked; InvalidArgumentError naming the field when it is out of bounds.
        A released switch carries nothing else."""
        if not msg.engaged:
            return cls()
        since = msg.since.seconds + msg.since.nanos / 1e9
        if not (math.isfinite(since) and EARLIEST <= since <= LATEST):
            raise InvalidArgumentError(f"{field}.since: a time between 2000 and 2100")
        if msg.means not in MEANS:
            raise InvalidArgumentError(f"{field}.means: one of {', '.join(MEANS)}")
        if len(msg.reason) > MAX_REASON:
            raise InvalidArgumentError(f"{field}.reason: at most {MAX_REASON} characters")
        refuse_control(f"{field}.reason", msg.reason)
        return cls(True, since, msg.means, msg.reason)


def clean_reason(text: str) -> str:
    """A reason as the worker sends it: its first line, control characters spelled out, cut
    to MAX_REASON (what the person at the desk typed may be anything)."""
    lines = text.strip().splitlines()
    shown = visible(lines[0].strip() if lines else "")
    return shown if len(shown) <= MAX_REASON else shown[: MAX_REASON - 1] + "…"
