"""A worker as routing, status and the console see it: its advertisement, what its token
grants, and its presence (online, lease, replica, its own kill switch)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from coordinator.model import capabilities
from coordinator.store import workers as worker_queries
from coordinator.store.models import PresenceRow, WorkerRow
from shared.advertisement import Advertisement, Capability
from shared.local_kill import LocalKill


@dataclass(frozen=True)
class WorkerView:
    id: str
    name: str
    labels: dict[str, str]
    state: str
    advertisement: Advertisement
    allowed_capabilities: tuple[str, ...]
    enrolled_at: float
    online: bool
    last_heartbeat: float | None
    lease_expires_at: float | None
    replica: str
    # The worker's own kill switch as its stream reports it (released when offline: an
    # offline worker reports nothing, and runs no input anyway).
    local_kill: LocalKill = field(default_factory=LocalKill)

    @property
    def capabilities(self) -> tuple[Capability, ...]:
        """Every known capability as it stands for routing: measured, and granted by the token."""
        out = []
        for name in capabilities.ALL:
            measured = self.advertisement.capability(name)
            if measured is None:
                out.append(Capability(name, False, "not reported (the worker has not connected)"))
            elif (
                measured.available
                and self.allowed_capabilities
                and (name not in self.allowed_capabilities)
            ):
                out.append(Capability(name, False, "not granted by the enrollment token"))
            else:
                out.append(measured)
        return tuple(out)

    @functools.cached_property
    def available(self) -> frozenset[str]:
        """The capabilities measured available and granted (worked out once per view: routing
        asks for every eligible worker)."""
        return frozenset(c.name for c in self.capabilities if c.available)

    def offers(self, capability: str) -> bool:
        """Whether new work needing `capability` may be routed here now."""
        if not self.online or self.state != "active":
            return False
        return capability in self.available


def view_of(worker: WorkerRow, presence: PresenceRow | None, now: float) -> WorkerView:
    online = presence is not None and presence.lease_expires_at > now and worker.state != "revoked"
    return WorkerView(
        id=worker.id,
        name=worker.name,
        labels=dict(worker.labels),
        state=worker.state,
        advertisement=Advertisement.from_json(worker.advertisement),
        allowed_capabilities=tuple(worker.allowed_capabilities),
        enrolled_at=worker.enrolled_at,
        online=online,
        last_heartbeat=presence.last_heartbeat_at if presence else None,
        lease_expires_at=presence.lease_expires_at if presence else None,
        replica=presence.replica if presence and online else "",
        local_kill=worker_queries.local_kill_of(presence) if online else LocalKill(),
    )
