"""What a worker reports on connect: displays, measured capabilities, research apps; and the
bounds a coordinator holds a hello to (`HelloLimits`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import fleet_pb2

# A worker whose token did not grant headless does not launch Chromium to measure it: it
# reports this instead, when a Chromium is there (and "no browser at PATH" when none is). The
# coordinator's research fallback counts it as a browser the desktop can show (fallback.py).
HEADLESS_NOT_GRANTED = "not granted by the enrollment token (Chromium is installed, not launched)"


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
    # The worker lets a run's owner take over its desktop (`run --allow-owner-takeover`).
    owner_takeover: bool = False

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
            owner_takeover=self.owner_takeover,
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
            owner_takeover=msg.owner_takeover,
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
            "owner_takeover": self.owner_takeover,
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
            owner_takeover=bool(data.get("owner_takeover", False)),
        )


# How every refusal of a hello for one of its limits begins: `hello limit max_text=256: ...`.
# A worker reads it back (`refused_limit`) to stop and say which limit, instead of retrying.
HELLO_LIMIT = "hello limit"
_REFUSED_LIMIT = re.compile(rf"{HELLO_LIMIT} ([a-z_]+)=([0-9]+): ")


def refused_limit(details: str) -> tuple[str, int] | None:
    """The limit (name, value) a coordinator's refusal of a hello names; None if it names
    none (the refusal is about something else)."""
    found = _REFUSED_LIMIT.match(details)
    return None if found is None else (found.group(1), int(found.group(2)))


@dataclass(frozen=True)
class HelloLimits:
    """What one hello may hold (`serve --hello-limit NAME=N`). A worker's advertisement is
    stored with its presence and sent back in every status call, and its displays are drawn
    for approvers: a hello past any of these is refused (INVALID_ARGUMENT naming the limit)
    before anything is written. The defaults leave a real worker far inside them."""

    max_bytes: int = 64 * 1024  # the whole hello, serialized: advertisement and held attempts
    max_entries: int = 64  # labels, versions, capabilities, research apps: each
    max_text: int = 256  # UTF-8 bytes of a hostname, os, name, label or version key and value
    max_reason: int = 1024  # UTF-8 bytes of a capability's reason (an error's first line)
    max_displays: int = 16
    max_display_px: int = 32_768  # a display's width and height (as a peeked image's)
    max_held: int = 512  # attempts a reconnecting worker says it holds

    @classmethod
    def parse(cls, items: Iterable[str]) -> HelloLimits:
        """`NAME=N` items over the defaults; an unknown name or a value that is not a whole
        number of at least 1 is refused, naming the item."""
        names = {f.name for f in dataclasses.fields(cls)}
        changed: dict[str, int] = {}
        for item in items:
            name, sep, value = item.partition("=")
            if not sep or name.strip() not in names:
                known = ", ".join(sorted(names))
                raise InvalidArgumentError(
                    f"--hello-limit {item[:80]!r}: NAME=N with NAME one of {known}"
                )
            if not value.strip().isdigit() or int(value) < 1:
                raise InvalidArgumentError(
                    f"--hello-limit {item[:80]!r}: N must be a whole number of at least 1"
                )
            changed[name.strip()] = int(value)
        return dataclasses.replace(cls(), **changed)

    def _refused(self, limit: str, what: str) -> str:
        return f"{HELLO_LIMIT} {limit}={getattr(self, limit)}: {what}"

    def labels_refusal(self, labels: Mapping[str, str], where: str = "advertisement.") -> str:
        """Why these labels are refused, naming the limit; "" when they are within them.

        A worker's labels are given at enrollment and sent in every hello after it, so the
        coordinator holds them to this one rule at both: labels that enroll are never the
        reason a hello is refused (`where` prefixes the field named)."""
        if len(labels) > self.max_entries:
            return self._refused("max_entries", f"{where}labels has {len(labels)} entries")
        for field_name, value in _entries("labels", labels):
            size = _utf8(value)
            if size > self.max_text:
                return self._refused("max_text", f"{where}{field_name} is {size} bytes")
        return ""

    def refusal(self, ad: Advertisement) -> str:
        """Why this advertisement is refused, naming the limit; "" when it is within them."""
        labels = self.labels_refusal(ad.labels)
        if labels:
            return labels
        text = self.max_text
        for name, count in (
            ("versions", len(ad.versions)),
            ("capabilities", len(ad.capabilities)),
            ("research_apps", len(ad.research_apps)),
        ):
            if count > self.max_entries:
                return self._refused("max_entries", f"advertisement.{name} has {count} entries")
        if len(ad.displays) > self.max_displays:
            return self._refused(
                "max_displays", f"advertisement.displays has {len(ad.displays)} entries"
            )
        texts: list[tuple[str, str]] = [("hostname", ad.hostname), ("os", ad.os)]
        texts += _entries("versions", ad.versions)
        texts += [(f"research_apps[{i}]", name) for i, name in enumerate(ad.research_apps)]
        texts += [(f"capabilities[{i}].name", c.name) for i, c in enumerate(ad.capabilities)]
        for where, value in texts:
            size = _utf8(value)
            if size > text:
                return self._refused("max_text", f"advertisement.{where} is {size} bytes")
        for i, c in enumerate(ad.capabilities):
            size = _utf8(c.reason)
            if size > self.max_reason:
                where = f"advertisement.capabilities[{i}].reason"
                return self._refused("max_reason", f"{where} is {size} bytes")
        return self._display_refusal(ad.displays)

    def _display_refusal(self, displays: Iterable[Display]) -> str:
        side = self.max_display_px
        # Displays sit side by side in one virtual screen (X11, Windows: left of the primary
        # is negative): their offsets stay within as many sides as there may be displays.
        reach = side * self.max_displays
        seen: set[int] = set()
        for i, d in enumerate(displays):
            where = f"advertisement.displays[{i}]"
            if not (0 < d.width <= side and 0 < d.height <= side):
                return self._refused(
                    "max_display_px", f"{where} is {d.width}x{d.height} (1 to {side} a side)"
                )
            if not (-reach <= d.left <= reach and -reach <= d.top <= reach):
                return self._refused(
                    "max_display_px",
                    f"{where} is placed at {d.left},{d.top} (within {reach} px of the origin)",
                )
            if not 0 <= d.index < self.max_displays or d.index in seen:
                return self._refused(
                    "max_displays",
                    f"{where}.index is {d.index} (one index per display, 0 to"
                    f" {self.max_displays - 1})",
                )
            seen.add(d.index)
        return ""


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _entries(name: str, mapping: Mapping[str, str]) -> list[tuple[str, str]]:
    out = []
    for key, value in mapping.items():
        shown = repr(key[:40])
        out += [(f"{name} key {shown}", key), (f"{name}[{shown}]", value)]
    return out
