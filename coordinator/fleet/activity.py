"""What the fleet is doing now: the attempt each worker runs, and runs counted by state.

Admins see the whole fleet; an owner sees the attempts and runs of their own runs only
(the workers themselves are in `status` for everyone).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from coordinator.model.identity import Principal, Role
from coordinator.store import Database, activity as queries


@dataclass(frozen=True)
class AttemptInFlight:
    worker_id: str
    run_id: str
    action_id: str
    index: int
    kind: str
    status: str  # DISPATCHED | STARTED
    attempt: int
    since: float | None
    finished_at: float | None = None
    error: str = ""


@dataclass(frozen=True)
class FleetActivity:
    attempts: tuple[AttemptInFlight, ...]
    runs_by_status: dict[str, int]
    fleet_wide: bool
    recent: tuple[AttemptInFlight, ...] = ()  # one worker's finished attempts, newest first


async def read(db: Database, who: Principal, worker: str = "", recent: int = 0) -> FleetActivity:
    """One consistent snapshot (a single read transaction) of what is in flight, and of the
    attempts `worker` finished last when asked."""
    owner = None if who.role == Role.ADMIN else who.id

    def unit(s: Session) -> FleetActivity:
        attempts = tuple(
            AttemptInFlight(
                a.worker_id, a.run_id, a.id, a.idx, a.kind, a.status, a.attempts, a.dispatched_at
            )
            for a, _ in queries.in_flight_actions(s, owner)
        )
        finished = tuple(
            AttemptInFlight(
                a.worker_id,
                a.run_id,
                a.id,
                a.idx,
                a.kind,
                a.status,
                a.attempts,
                a.dispatched_at,
                a.finished_at,
                a.error,
            )
            for a in (queries.recent_actions(s, worker, owner, recent) if worker and recent else ())
        )
        return FleetActivity(attempts, queries.runs_by_status(s, owner), owner is None, finished)

    return await db.read(unit)
