"""Domain objects to protobuf messages (the only direction the coordinator needs)."""

from __future__ import annotations

from coordinator.fleet.service import FleetStatus
from coordinator.model.workers import WorkerView
from shared.gen.deskfleet.v1 import fleet_pb2
from shared.timestamps import to_timestamp


def worker_info(view: WorkerView) -> fleet_pb2.WorkerInfo:
    adv = view.advertisement
    return fleet_pb2.WorkerInfo(
        id=view.id,
        name=view.name,
        labels=view.labels,
        capabilities=[c.to_proto() for c in view.capabilities],
        displays=[d.to_proto() for d in adv.displays],
        state=view.state,
        online=view.online,
        last_heartbeat=to_timestamp(view.last_heartbeat),
        replica=view.replica,
        os=adv.os,
        versions=adv.versions,
        enrolled_at=to_timestamp(view.enrolled_at),
        allowed_capabilities=list(view.allowed_capabilities),
        lease_expires_at=to_timestamp(view.lease_expires_at),
        local_kill=view.local_kill.to_proto() if view.local_kill.engaged else None,
    )


def worker_status(status: FleetStatus) -> fleet_pb2.WorkerStatus:
    return fleet_pb2.WorkerStatus(
        headless_online=status.headless_online,
        computer_use_online=status.computer_use_online,
        workers=[worker_info(w) for w in status.workers],
        next_page_token=status.next_page_token,
        online=status.online,
        replicas=[
            fleet_pb2.ReplicaCount(
                replica=c.replica,
                online=c.online,
                headless_online=c.headless,
                computer_use_online=c.computer_use,
            )
            for c in status.replicas
        ],
    )
