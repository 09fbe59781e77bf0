"""Every RPC has an access rule, and credentials of the wrong kind are refused clearly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator.app.server import SERVICE_NAMES
from coordinator.model.identity import Role
from coordinator.model.settings import DEFAULT_AUTH_FAILURES
from coordinator.security import authz
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    fleet_pb2,
    fleet_pb2_grpc,
    worker_pb2,
)
from tests.harness import CoordinatorProcess, WorkerProcess


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test makes its own workers and users. The kill
    switch test (switches are fleet-wide) and the failure limiter's (it holds back every caller
    from the host) have coordinators of their own."""
    return module_coordinator


@pytest.fixture
def channel(coordinator: CoordinatorProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(coordinator.address) as ch:
        yield ch


@pytest.fixture
def own_channel(own_coordinator: CoordinatorProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(own_coordinator.address) as ch:
        yield ch


def _code(call: object, *args: object, **kwargs: object) -> tuple[grpc.StatusCode, str]:
    try:
        call(*args, timeout=10, **kwargs)  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc.code(), exc.details()  # type: ignore[attr-defined]
    return grpc.StatusCode.OK, ""


def test_missing_and_wrong_credentials_are_unauthenticated(
    coordinator: CoordinatorProcess, channel: grpc.Channel
) -> None:
    fleet = fleet_pb2_grpc.FleetServiceStub(channel)
    request = fleet_pb2.GetWorkerStatusRequest()
    code, details = _code(fleet.GetWorkerStatus, request)
    assert code == grpc.StatusCode.UNAUTHENTICATED and "no credential" in details
    code, details = _code(fleet.GetWorkerStatus, request, metadata=auth_metadata("dfu_x.bogus"))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "unknown credential" in details
    code, _ = _code(fleet.GetWorkerStatus, request, metadata=auth_metadata("garbage"))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_a_worker_credential_cannot_call_admin_rpcs(
    coordinator: CoordinatorProcess, channel: grpc.Channel
) -> None:
    worker = WorkerProcess(coordinator, "w")
    assert worker.enroll().returncode == 0
    metadata = auth_metadata((worker.state_dir / "credential").read_text().strip())
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    code, details = _code(
        admin.CreateEnrollmentToken, admin_pb2.CreateEnrollmentTokenRequest(), metadata=metadata
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "needs an admin credential; this one is a worker credential" in details
    fleet = fleet_pb2_grpc.FleetServiceStub(channel)
    code, _ = _code(fleet.RevokeWorker, fleet_pb2.WorkerRef(id=worker.worker_id), metadata=metadata)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, _ = _code(fleet.GetWorkerStatus, fleet_pb2.GetWorkerStatusRequest(), metadata=metadata)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    # The refusal changed nothing.
    assert coordinator.cli_json("workers", "show", worker.worker_id)["state"] == "active"


def test_an_owner_reads_status_but_administers_nothing(coordinator: CoordinatorProcess) -> None:
    owner = coordinator.cli_json("users", "create", "olga")
    assert owner["role"] == "owner" and owner["token"].startswith(f"dfu_{owner['id']}.")
    token_file = coordinator.workdir / "olga.token"
    token_file.write_text(owner["token"])
    assert coordinator.cli_json("whoami", token_file=token_file)["role"] == "owner"
    assert coordinator.cli_json("status", token_file=token_file)["headlessOnline"] == 0
    refused = coordinator.cli("tokens", "create", token_file=token_file, check=False)
    assert refused.returncode == 3
    assert refused.stderr.startswith("deskfleet: CreateEnrollmentToken needs an admin credential")
    assert len(refused.stderr.strip().splitlines()) == 1


def test_an_enrollment_token_is_not_a_credential(coordinator: CoordinatorProcess) -> None:
    token_file = coordinator.workdir / "enroll.token"
    token_file.write_text(coordinator.create_token())
    done = coordinator.cli("status", token_file=token_file, check=False)
    assert done.returncode == 3 and "an enrollment token is not a credential" in done.stderr


def test_a_second_admin_can_be_created_and_names_are_unique(
    coordinator: CoordinatorProcess,
) -> None:
    assert coordinator.cli_json("users", "create", "ops", "--role", "admin")["role"] == "admin"
    again = coordinator.cli("users", "create", "ops", check=False)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_a_worker_stream_must_start_with_hello(
    coordinator: CoordinatorProcess, channel: grpc.Channel
) -> None:
    worker = WorkerProcess(coordinator, "rude")
    assert worker.enroll().returncode == 0
    metadata = auth_metadata((worker.state_dir / "credential").read_text().strip())
    stub = channel.stream_stream(
        "/deskfleet.v1.WorkerGateway/Connect",
        request_serializer=worker_pb2.WorkerMessage.SerializeToString,
        response_deserializer=worker_pb2.CoordinatorMessage.FromString,
    )
    beat = worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(seq=1))
    with pytest.raises(grpc.RpcError) as caught:
        list(stub(iter([beat]), metadata=metadata, timeout=10))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "must be a hello" in caught.value.details()  # type: ignore[attr-defined]


def test_negative_uses_are_refused_by_the_coordinator(
    coordinator: CoordinatorProcess, channel: grpc.Channel
) -> None:
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    metadata = auth_metadata(coordinator.admin_token_file.read_text().strip())
    code, details = _code(
        admin.CreateEnrollmentToken,
        admin_pb2.CreateEnrollmentTokenRequest(uses=-1),
        metadata=metadata,
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("uses:")
    code, details = _code(
        admin.CreateEnrollmentToken,
        admin_pb2.CreateEnrollmentTokenRequest(capabilities=["root"]),
        metadata=metadata,
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "unknown root" in details


# ------------------------------------------------------------------- kill switch visibility


def _switches(
    coordinator: CoordinatorProcess, token_file: Path | None = None
) -> dict[str, dict[str, Any]]:
    doc = coordinator.cli_json("kill", "status", "--all", token_file=token_file)
    return {k["id"]: k for k in doc["switches"]}


def test_owners_see_the_kill_switches_that_stop_their_work_and_no_one_elses(
    own_coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    coordinator = own_coordinator
    desks = {name: WorkerProcess(coordinator, name) for name in ("desk-a", "desk-b")}
    for desk in desks.values():
        assert desk.enroll().returncode == 0
    owners: dict[str, tuple[str, Path]] = {}
    runs: dict[str, str] = {}
    for name, desk in zip(("ann", "bob"), desks.values(), strict=True):
        user = coordinator.cli_json("users", "create", name)
        token_file = tmp_path / f"{name}.token"
        token_file.write_text(user["token"])
        owners[name] = (user["id"], token_file)
        runs[name] = coordinator.cli_json(
            "desktop", "request", "--worker", desk.worker_id, "--action", "screenshot",
            "--reason", f"{name} works here", token_file=token_file,
        )["id"]  # fmt: skip
    admin_id = coordinator.cli_json("whoami")["id"]
    ann_id, ann = owners["ann"]
    bob_id, bob = owners["bob"]

    def engage(*target: str, token_file: Path | None = None) -> str:
        reason = f"stop {' '.join(target) or 'the fleet'}, said {token_file or 'admin'}"
        switch = coordinator.cli_json("kill", "engage", *target, "--reason", reason,
                                      token_file=token_file)  # fmt: skip
        return str(switch["id"])

    fleet = engage()
    worker_a = engage("--worker", desks["desk-a"].worker_id)
    worker_b = engage("--worker", desks["desk-b"].worker_id)
    run_a = engage("--run", runs["ann"], token_file=ann)
    run_b = engage("--run", runs["bob"], token_file=bob)
    run_a_by_admin = engage("--run", runs["ann"])
    # Neither owner can stop or release the other's run, nor learn that a switch is there.
    for target in (("--run", runs["bob"]), ("--id", run_b)):
        done = coordinator.cli("kill", "release", *target, token_file=ann, check=False)
        assert (done.returncode, done.stderr) == (
            4,
            "deskfleet: no engaged kill switch matches\n",
        )
    done = coordinator.cli("kill", "engage", "--run", runs["bob"], "--reason", "x",
                           token_file=ann, check=False)  # fmt: skip
    assert (done.returncode, done.stderr) == (4, f"deskfleet: no run {runs['bob']!r}\n")
    refused = coordinator.cli("kill", "release", "--fleet", token_file=ann, check=False)
    assert refused.returncode == 3 and "only an admin releases" in refused.stderr
    # A released switch of one's own stays in one's history, and only there.
    coordinator.cli("kill", "release", "--id", run_a, "--reason", "mine", token_file=ann)

    everything = _switches(coordinator)
    assert set(everything) == {fleet, worker_a, worker_b, run_a, run_b, run_a_by_admin}
    assert everything[run_b]["engagedBy"] == bob_id
    assert everything[run_a]["releasedBy"] == ann_id
    seen = {"ann": _switches(coordinator, ann), "bob": _switches(coordinator, bob)}
    assert set(seen["ann"]) == {fleet, worker_a, run_a, run_a_by_admin}
    assert set(seen["bob"]) == {fleet, worker_b, run_b}
    for name, switches in seen.items():
        own_id = owners[name][0]
        for kill_id, switch in switches.items():
            full = everything[kill_id]
            # What stops an owner's work is shown in full, with its reason and time ...
            for key in ("scope", "target", "reason", "engagedAt", "engaged"):
                assert switch.get(key) == full.get(key), (name, kill_id, key)
            # ... but who engaged or released it only when that was the owner.
            for key in ("engagedBy", "releasedBy"):
                assert switch.get(key, "") == (full.get(key) if full.get(key) == own_id else "")
    assert seen["ann"][run_a]["engagedBy"] == ann_id
    assert seen["ann"][run_a]["releasedBy"] == ann_id
    assert seen["ann"][run_a_by_admin].get("engagedBy", "") == ""
    text = coordinator.cli("kill", "status", "--all", token_file=ann).stdout
    assert runs["bob"] not in text and bob_id not in text and admin_id not in text
    assert "said " + str(bob) not in text and desks["desk-b"].worker_id not in text
    # Engaged only: the same rule.
    engaged = coordinator.cli_json("kill", "status", token_file=bob)["switches"]
    assert {k["id"] for k in engaged} == {fleet, worker_b, run_b}


# ---------------------------------------------------------------------------- the matrix

ROLES = ("admin", "owner", "worker", "anonymous")


def _ruled_matrix() -> dict[str, dict[str, bool]]:
    matrix = {}
    for method, roles in authz.RULES.items():
        service, name = method.strip("/").split("/")
        allowed = {r: (not roles or Role(r) in roles) for r in ROLES[:3]}
        matrix[f"{service.rsplit('.', 1)[1]}.{name}"] = {**allowed, "anonymous": not roles}
    return matrix


# Requests other than empty ones: an empty RotateUser rotates the caller's own token, which
# would lock the walk out of the rest of the matrix.
REQUESTS: dict[str, dict[str, Any]] = {"AdminService.RotateUser": {"name": "matrix-spare"}}


def _invoke(
    channel: grpc.Channel, method: Any, metadata: tuple[tuple[str, str], ...]
) -> tuple[grpc.StatusCode, str]:
    """Call `method` (a descriptor) with an empty request (or its entry in REQUESTS),
    whatever its streaming shape."""
    from google.protobuf import message_factory

    request_cls = message_factory.GetMessageClass(method.input_type)
    response_cls = message_factory.GetMessageClass(method.output_type)
    path = f"/{method.containing_service.full_name}/{method.name}"
    shape = (method.client_streaming, method.server_streaming)
    factory = {
        (False, False): channel.unary_unary,
        (False, True): channel.unary_stream,
        (True, False): channel.stream_unary,
        (True, True): channel.stream_stream,
    }[shape]
    call = factory(
        path,
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    fields = REQUESTS.get(f"{method.containing_service.name}.{method.name}", {})
    request: Any = (
        iter([request_cls(**fields)]) if method.client_streaming else request_cls(**fields)
    )
    try:
        result = call(request, timeout=10, metadata=metadata)
        if method.server_streaming:
            for _ in result:
                break
            result.cancel()
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""  # type: ignore[attr-defined]
    return grpc.StatusCode.OK, ""


def test_every_rpc_with_every_role_follows_the_matrix(
    coordinator: CoordinatorProcess, channel: grpc.Channel, tmp_path: Path
) -> None:
    from google.protobuf import descriptor_pool

    worker = WorkerProcess(coordinator, "matrix")
    assert worker.enroll().returncode == 0
    secrets = {
        "admin": coordinator.admin_token_file.read_text().strip(),
        "owner": coordinator.cli_json("users", "create", "matrix-owner")["token"],
        "spare": coordinator.cli_json("users", "create", "matrix-spare")["token"],
        "worker": (worker.state_dir / "credential").read_text().strip(),
    }
    matrix = _ruled_matrix()
    pool = descriptor_pool.Default()
    walked = 0
    for service_name in SERVICE_NAMES:
        service = pool.FindServiceByName(service_name)
        for method in service.methods:
            key = f"{service.name}.{method.name}"
            for role in ROLES:
                metadata = tuple(auth_metadata(secrets[role])) if role in secrets else ()
                code, details = _invoke(channel, method, metadata)
                by_role = code == grpc.StatusCode.PERMISSION_DENIED and (
                    f"{method.name} needs" in details
                )
                no_credential = code == grpc.StatusCode.UNAUTHENTICATED and (
                    "no credential" in details
                )
                refused_by_guard = by_role or no_credential
                if matrix[key][role]:
                    assert not refused_by_guard, (key, role, code, details)
                    # Empty requests are refused as bad input or a missing object, never a crash.
                    assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (
                        key,
                        role,
                        details,
                    )
                else:
                    expected = (
                        grpc.StatusCode.UNAUTHENTICATED
                        if role == "anonymous"
                        else grpc.StatusCode.PERMISSION_DENIED
                    )
                    assert (code, refused_by_guard) == (expected, True), (key, role, details)
                walked += 1
    assert walked == len(authz.RULES) * len(ROLES)


def test_failures_from_a_host_never_refuse_a_valid_credential_from_it(
    own_coordinator: CoordinatorProcess, own_channel: grpc.Channel
) -> None:
    """A guesser's failures are answered as over the limit once there are too many; a valid
    credential from the same host (an admin, the kill switch, a worker) is never refused."""
    coordinator, channel = own_coordinator, own_channel
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    request = admin_pb2.WhoAmIRequest()
    # Calls without any credential are mistakes, not guesses: they never count.
    for _ in range(DEFAULT_AUTH_FAILURES + 5):
        assert _code(admin.WhoAmI, request)[0] == grpc.StatusCode.UNAUTHENTICATED
    for i in range(DEFAULT_AUTH_FAILURES):
        code, details = _code(admin.WhoAmI, request, metadata=auth_metadata(f"dfu_x.guess{i}"))
        assert (code, details) == (grpc.StatusCode.UNAUTHENTICATED, "unknown credential")
    for i in range(10):
        code, details = _code(admin.WhoAmI, request, metadata=auth_metadata(f"dfu_x.more{i}"))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details.startswith("too many failed authentications from ipv4:127.0.0.1: try")
        assert details.endswith("(last: unknown credential)")
    assert "failed to authenticate 30 times in 60 s" in coordinator.log.read_text()
    good = auth_metadata(coordinator.admin_token_file.read_text().strip())
    assert _code(admin.WhoAmI, request, metadata=good)[0] == grpc.StatusCode.OK
    assert coordinator.cli_json("whoami")["role"] == "admin"
    switch = coordinator.cli_json("kill", "engage", "--reason", "drill while guessed at")
    coordinator.cli("kill", "release", "--id", switch["id"], "--reason", "drill over")
    worker = WorkerProcess(coordinator, "w-guessed", browser=False).start()
    try:
        worker.wait_online()
    finally:
        worker.stop()
    # The host's guesses are still answered as over the limit.
    code, _ = _code(admin.WhoAmI, request, metadata=auth_metadata("dfu_x.again"))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_the_failure_limit_is_a_serve_setting_and_zero_turns_it_off(tmp_path: Path) -> None:
    strict = CoordinatorProcess(tmp_path / "strict", serve_args=("--auth-failures-per-minute", "2"))
    off = CoordinatorProcess(tmp_path / "off", serve_args=("--auth-failures-per-minute", "0"))
    try:
        for coordinator, refused_after in ((strict.start(), 2), (off.start(), None)):
            with grpc.insecure_channel(coordinator.address) as ch:
                admin = admin_pb2_grpc.AdminServiceStub(ch)
                codes = [
                    _code(
                        admin.WhoAmI,
                        admin_pb2.WhoAmIRequest(),
                        metadata=auth_metadata(f"dfu_x.guess{i}"),
                    )[0]
                    for i in range(5)
                ]
            expected = [grpc.StatusCode.UNAUTHENTICATED] * 5
            if refused_after is not None:
                expected[refused_after:] = [grpc.StatusCode.RESOURCE_EXHAUSTED] * 3
            assert codes == expected
    finally:
        strict.stop()
        off.stop()
