"""Third-party clients can discover the coordinator: standard health and server reflection."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.harness import CoordinatorProcess


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: both tests only ask it questions."""
    return module_coordinator


def test_health_answers_serving_for_the_server_and_each_service(
    coordinator: CoordinatorProcess,
) -> None:
    with grpc.insecure_channel(coordinator.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "deskfleet.v1.FleetService", "deskfleet.v1.WorkerGateway"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
        try:
            health.Check(health_pb2.HealthCheckRequest(service="nope.Service"), timeout=5)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
        else:
            raise AssertionError("an unknown service must not be reported healthy")


def test_reflection_lists_and_describes_every_service(coordinator: CoordinatorProcess) -> None:
    with grpc.insecure_channel(coordinator.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {
            "deskfleet.v1.AdminService",
            "deskfleet.v1.FleetService",
            "deskfleet.v1.WorkerGateway",
            "grpc.health.v1.Health",
        } <= services
        pool = DescriptorPool(database)
        fleet = pool.FindServiceByName("deskfleet.v1.FleetService")
        assert "GetWorkerStatus" in [m.name for m in fleet.methods]
        status = pool.FindMessageTypeByName("deskfleet.v1.WorkerStatus")
        assert [f.name for f in status.fields] == [
            "headless_online",
            "computer_use_online",
            "workers",
            "next_page_token",
            "online",
            "replicas",
        ]
