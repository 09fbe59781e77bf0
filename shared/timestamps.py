"""Epoch seconds (as the store keeps them) to and from protobuf Timestamps and ISO text."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp


def to_timestamp(epoch: float | None) -> Timestamp | None:
    if epoch is None:
        return None
    ts = Timestamp()
    ts.FromNanoseconds(int(epoch * 1e9))
    return ts


def iso(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
