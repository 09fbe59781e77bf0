"""What the client returns: frozen dataclasses read from the coordinator's messages.

Each keeps the document the CLI prints for the same object (`to_dict()`, the message in the
protobuf JSON mapping, camelCase), so a program can log or store exactly what `deskfleet ...
--json` shows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from shared.advertisement import Display as Display
from shared.gen.deskfleet.v1 import desktop_pb2, fleet_pb2, runs_pb2
from shared.states import ACTIVE


def message_dict(message: Message) -> dict[str, Any]:
    """A message as the CLI prints it (every field, zero values included)."""
    return MessageToDict(message, always_print_fields_with_no_presence=True)


def _time(message: Any) -> datetime | None:
    return message.ToDatetime() if message.seconds or message.nanos else None


@dataclass(frozen=True)
class Worker:
    """A worker as fleet status shows it: `capabilities` names those available now."""

    id: str
    name: str
    online: bool
    state: str  # active | draining | revoked
    capabilities: tuple[str, ...]
    displays: tuple[Display, ...]
    labels: Mapping[str, str]

    @classmethod
    def from_proto(cls, info: fleet_pb2.WorkerInfo) -> Worker:
        return cls(
            id=info.id,
            name=info.name,
            online=info.online,
            state=info.state,
            capabilities=tuple(c.name for c in info.capabilities if c.available),
            displays=tuple(Display.from_proto(d) for d in info.displays),
            labels=dict(info.labels),
        )


@dataclass(frozen=True)
class FleetStatus:
    """Online counts, read from the shared store (workers of every replica), and the rows."""

    headless_online: int
    computer_use_online: int
    online: int
    workers: tuple[Worker, ...]
    next_page_token: str  # the next rows' page; empty on the last page
    _doc: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, status: fleet_pb2.WorkerStatus) -> FleetStatus:
        return cls(
            headless_online=status.headless_online,
            computer_use_online=status.computer_use_online,
            online=status.online,
            workers=tuple(Worker.from_proto(w) for w in status.workers),
            next_page_token=status.next_page_token,
            _doc=message_dict(status),
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self._doc)


@dataclass(frozen=True)
class Action:
    """One action of a run's ledger, as it stands."""

    id: str
    index: int
    kind: str
    status: str  # PENDING DISPATCHED STARTED SUCCEEDED FAILED UNKNOWN CANCELLED SKIPPED
    worker_id: str
    attempts: int
    error: str
    receipt_id: str


@dataclass(frozen=True)
class Run:
    """A run as the coordinator last reported it. `stop_reason` is empty while it is active;
    `waiting` says why an active run is not moving ("code: detail"), if it is not."""

    id: str
    kind: str  # plan | research | desktop | goal
    title: str
    status: str
    stop_reason: str
    waiting: str
    execution: int
    last_seq: int
    actions: tuple[Action, ...]
    created_at: datetime | None
    updated_at: datetime | None
    _doc: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, run: runs_pb2.Run) -> Run:
        return cls(
            id=run.id,
            kind=run.kind,
            title=run.title,
            status=run.status,
            stop_reason=run.stop_reason,
            waiting=f"{run.waiting.code}: {run.waiting.detail}" if run.waiting.code else "",
            execution=run.execution,
            last_seq=run.last_seq,
            actions=tuple(
                Action(
                    a.id, a.index, a.kind, a.status, a.worker_id, a.attempts, a.error, a.receipt_id
                )
                for a in run.actions
            ),
            created_at=_time(run.created_at),
            updated_at=_time(run.updated_at),
            _doc=message_dict(run),
        )

    @property
    def active(self) -> bool:
        """Not stopped yet: running, or waiting for a person, a worker or a child run."""
        return self.status in ACTIVE

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"

    def to_dict(self) -> dict[str, Any]:
        return dict(self._doc)


@dataclass(frozen=True)
class Event:
    """One journal event of a run, in sequence order; `data` is its decoded body."""

    run_id: str
    seq: int
    kind: str
    at: datetime | None
    data: dict[str, Any]
    hash: str
    _doc: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, event: runs_pb2.JournalEvent) -> Event:
        try:
            data = json.loads(event.data_json) if event.data_json else {}
        except ValueError:
            data = {"raw": event.data_json}
        return cls(
            run_id=event.run_id,
            seq=event.seq,
            kind=event.kind,
            at=_time(event.at),
            data=data if isinstance(data, dict) else {"value": data},
            hash=event.hash,
            _doc=message_dict(event),
        )

    def to_dict(self) -> dict[str, Any]:
        """As `deskfleet runs watch --json` prints it (`dataJson` the body as sent)."""
        return dict(self._doc)


@dataclass(frozen=True)
class Passage:
    """A passage of a page that answers the query: its text, the section heading it sits
    under, its relevance score and a link that opens the page at it."""

    text: str
    heading: str
    score: float | None
    link: str
    url: str = ""  # set in a report's best passages across sources


@dataclass(frozen=True)
class Source:
    """A page a route read: `evidence` when some passage of it answers the query."""

    url: str
    final_url: str
    title: str
    route: str  # headless | app:NAME
    outcome: str
    receipt: str
    evidence: bool
    passages: tuple[Passage, ...]


@dataclass(frozen=True)
class Failure:
    """A source that is not evidence, and why (blocked, binary, an access challenge...)."""

    url: str
    outcome: str
    reason: str


def _passage(doc: Mapping[str, Any], url: str = "") -> Passage:
    score = doc.get("score")
    return Passage(
        text=str(doc.get("text", "")),
        heading=str(doc.get("heading") or ""),
        score=float(score) if isinstance(score, int | float) else None,
        link=str(doc.get("link") or ""),
        url=url,
    )


@dataclass(frozen=True)
class ResearchReport:
    """The evidence a research run found, with the run it came from. `passages` are the best
    of all sources together; each source lists its own. An empty report (no evidence) says
    why in `run.stop_reason`."""

    query: str
    run: Run
    sources: tuple[Source, ...]
    passages: tuple[Passage, ...]
    failures: tuple[Failure, ...]
    evidence: int
    _doc: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_report(cls, run: Run, doc: Mapping[str, Any] | None, query: str) -> ResearchReport:
        doc = doc or {}
        return cls(
            query=str(doc.get("query", query)),
            run=run,
            sources=tuple(
                Source(
                    url=str(s.get("url") or ""),
                    final_url=str(s.get("final_url") or s.get("url") or ""),
                    title=str(s.get("title") or ""),
                    route=str(s.get("route") or "headless"),
                    outcome=str(s.get("outcome") or ""),
                    receipt=str(s.get("receipt") or ""),
                    evidence=bool(s.get("evidence")),
                    passages=tuple(_passage(p) for p in s.get("passages", [])),
                )
                for s in doc.get("sources", [])
            ),
            passages=tuple(_passage(p, str(p.get("url") or "")) for p in doc.get("passages", [])),
            failures=tuple(
                Failure(str(f.get("url") or ""), str(f.get("outcome")), str(f.get("reason", "")))
                for f in doc.get("failures", [])
            ),
            evidence=int(doc.get("evidence", 0)),
            _doc=dict(doc),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as `deskfleet research --json` prints it under `report`."""
        return dict(self._doc)


@dataclass(frozen=True)
class GuidanceReceipt:
    """What the coordinator did with a guidance message: queued once under its message id
    (`repeated_send`: an earlier send of the same id was the one queued)."""

    guidance_id: str
    message_id: str
    seq: int
    queued: int
    execution: int
    repeated_send: bool
    _doc: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, reply: runs_pb2.GuideRunResponse) -> GuidanceReceipt:
        return cls(
            reply.guidance_id,
            reply.message_id,
            reply.seq,
            reply.queued,
            reply.execution,
            reply.repeated_send,
            message_dict(reply),
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self._doc)


@dataclass(frozen=True)
class DesktopGrant:
    """What a person approved for a desktop run: the granted scope, which may be narrower than
    what was asked. `region` is (x, y, width, height) in the display's real pixels, None for
    the whole display; `expires_at` is when the approval ends."""

    approval_id: str
    actions: tuple[str, ...]
    displays: tuple[int, ...]
    region: tuple[int, int, int, int] | None
    max_actions: int
    expires_at: datetime | None

    @classmethod
    def from_proto(cls, approval: desktop_pb2.Approval) -> DesktopGrant:
        granted = approval.granted
        r = granted.region
        return cls(
            approval_id=approval.id,
            actions=tuple(granted.actions),
            displays=tuple(granted.displays) or (0,),
            region=(r.x, r.y, r.width, r.height) if granted.HasField("region") else None,
            max_actions=granted.max_actions,
            expires_at=_time(approval.expires_at),
        )


@dataclass(frozen=True)
class Artifact:
    sha256: str
    media_type: str
    size: int
    width: int
    height: int
    role: str  # screenshot | before | after | zoom


@dataclass(frozen=True)
class ActResult:
    """One desktop action's outcome: `status` succeeded, failed, refused, cancelled or
    unknown; `reason` the code when it did not succeed; `result` what the worker reported."""

    action: str
    action_id: str
    status: str
    reason: str
    error: str
    result: dict[str, Any] | None
    receipt_id: str
    artifacts: tuple[Artifact, ...]
    _doc: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, action: str, reply: desktop_pb2.DesktopActResponse) -> ActResult:
        try:
            result = json.loads(reply.result_json) if reply.result_json else None
        except ValueError:
            result = None
        return cls(
            action=action,
            action_id=reply.action_id,
            status=reply.status,
            reason=reply.code,
            error=reply.error,
            result=result if isinstance(result, dict) else None,
            receipt_id=reply.receipt_id,
            artifacts=tuple(
                Artifact(a.sha256, a.media_type, a.size, a.width, a.height, a.role)
                for a in reply.artifacts
            ),
            _doc=message_dict(reply),
        )

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"

    def to_dict(self) -> dict[str, Any]:
        return dict(self._doc)
