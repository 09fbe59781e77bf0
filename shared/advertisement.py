"""What a worker reports on connect: displays, measured capabilities, research apps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.gen.deskfleet.v1 import fleet_pb2


@dataclass(frozen=True)
class Display:
    index: int
    left: int
    top: int
    width: int
    height: int

    def to_proto(self) -> fleet_pb2.Display:
        return fleet_pb2.Display(
            index=self.index, left=self.left, top=self.top, width=self.width, height=self.height
        )

    @classmethod
    def from_proto(cls, msg: fleet_pb2.Display) -> Display:
        return cls(msg.index, msg.left, msg.top, msg.width, msg.height)


@dataclass(frozen=True)
class Capability:
    name: str
    available: bool
    reason: str = ""

    def to_proto(self) -> fleet_pb2.Capability:
        return fleet_pb2.Capability(name=self.name, available=self.available, reason=self.reason)

    @classmethod
    def from_proto(cls, msg: fleet_pb2.Capability) -> Capability:
        return cls(msg.name, msg.available, msg.reason)


@dataclass(frozen=True)
class Advertisement:
    hostname: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    displays: tuple[Display, ...] = ()
    capabilities: tuple[Capability, ...] = ()
    os: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    # External research commands offered for `app.research` (`run --research-app NAME=...`).
    research_apps: tuple[str, ...] = ()

    def capability(self, name: str) -> Capability | None:
        return next((c for c in self.capabilities if c.name == name), None)

    def to_proto(self) -> fleet_pb2.Advertisement:
        return fleet_pb2.Advertisement(
            hostname=self.hostname,
            labels=self.labels,
            displays=[d.to_proto() for d in self.displays],
            capabilities=[c.to_proto() for c in self.capabilities],
            os=self.os,
            versions=self.versions,
            research_apps=list(self.research_apps),
        )

    @classmethod
    def from_proto(cls, msg: fleet_pb2.Advertisement) -> Advertisement:
        return cls(
            hostname=msg.hostname,
            labels=dict(msg.labels),
            displays=tuple(Display.from_proto(d) for d in msg.displays),
            capabilities=tuple(Capability.from_proto(c) for c in msg.capabilities),
            os=msg.os,
            versions=dict(msg.versions),
            research_apps=tuple(msg.research_apps),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "labels": self.labels,
            "displays": [d.__dict__ for d in self.displays],
            "capabilities": [c.__dict__ for c in self.capabilities],
            "os": self.os,
            "versions": self.versions,
            "research_apps": list(self.research_apps),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Advertisement:
        return cls(
            hostname=data.get("hostname", ""),
            labels=dict(data.get("labels", {})),
            displays=tuple(Display(**d) for d in data.get("displays", [])),
            capabilities=tuple(Capability(**c) for c in data.get("capabilities", [])),
            os=data.get("os", ""),
            versions=dict(data.get("versions", {})),
            research_apps=tuple(data.get("research_apps", ())),
        )
