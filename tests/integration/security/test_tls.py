"""Transport security end to end: a CA, a coordinator over TLS, workers over mutual TLS.

One coordinator serves the module (TLS on its main port, client certificates required on its
worker port) with short worker certificates, so that renewal happens within a test.
"""

from __future__ import annotations

import datetime as dt
import json
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from coordinator.security.tls import CertificateAuthority, new_private_key, private_key_pem
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import worker_pb2, worker_pb2_grpc
from tests.harness import (
    BIN,
    CoordinatorProcess,
    WorkerProcess,
    base_env,
    submit,
    wait_until,
    write_plan,
)

pytestmark = pytest.mark.slow

# 90 s certificates for the module: none is renewed during the other tests.
WORKER_CERT_DAYS = 90 / 86400
# The renewal test's coordinator issues 30 s certificates: renewed with a third left (~20 s
# after issue; checked every 3 s), which leaves the old one ~8 s of life to be refused for
# having been replaced rather than for having expired.
RENEWED_CERT_DAYS = 20 / 86400


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _ca_init(ca_dir: Path, *hosts: str) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "deskfleet-coordinator"), "ca", "init", "--dir", str(ca_dir)]
    for host in hosts:
        argv += ["--host", host]
    return subprocess.run(
        argv, capture_output=True, text=True, env=base_env(ca_dir.parent), timeout=60
    )


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tls") / "ca"
    done = _ca_init(path)
    assert done.returncode == 0, done.stderr
    return path


def _tls_coordinator(ca_dir: Path, workdir: Path, cert_days: float) -> CoordinatorProcess:
    return CoordinatorProcess(
        workdir,
        serve_args=(
            "--tls-cert",
            str(ca_dir / "server.pem"),
            "--tls-key",
            str(ca_dir / "server.key"),
            "--ca-dir",
            str(ca_dir),
            "--worker-cert-days",
            str(cert_days),
        ),
        ca_file=ca_dir / "ca.pem",
    ).start()


@pytest.fixture(scope="module")
def tls_coordinator(ca_dir: Path) -> Iterator[CoordinatorProcess]:
    proc = _tls_coordinator(ca_dir, ca_dir.parent / "coord", WORKER_CERT_DAYS)
    yield proc
    proc.stop()


@pytest.fixture
def tls_worker(
    tls_coordinator: CoordinatorProcess, request: pytest.FixtureRequest
) -> Iterator[WorkerProcess]:
    worker = WorkerProcess(
        tls_coordinator, request.node.name[-40:], extra_args=("--no-computer-use",), browser=False
    )
    yield worker
    worker.stop()


def _connect(
    coordinator: CoordinatorProcess,
    ca_dir: Path,
    credential: str,
    key: bytes | None,
    cert: bytes | None,
    *,
    port: int | None = None,
) -> tuple[grpc.StatusCode, str]:
    """Open a worker stream with this certificate; return the status that refused it."""
    creds = grpc.ssl_channel_credentials((ca_dir / "ca.pem").read_bytes(), key, cert)
    address = f"127.0.0.1:{port or coordinator.worker_port}"
    with grpc.secure_channel(address, creds) as channel:
        replies = worker_pb2_grpc.WorkerGatewayStub(channel).Connect(
            iter([worker_pb2.WorkerMessage(hello=worker_pb2.Hello())]),
            metadata=auth_metadata(credential),
            timeout=15,
        )
        try:
            first = next(replies)
        except grpc.RpcError as exc:
            call: grpc.Call = exc  # type: ignore[assignment]  # raised by a call: it is one
            return call.code(), call.details() or ""
    raise AssertionError(f"the stream was accepted: {first}")


def _files(worker: WorkerProcess) -> tuple[str, bytes, bytes]:
    state = worker.state_dir
    return (
        (state / "credential").read_text().strip(),
        (state / "client.key").read_bytes(),
        (state / "client.pem").read_bytes(),
    )


def test_tls_end_to_end_enroll_with_a_csr_online_over_mutual_tls_and_a_plan_runs(
    tls_coordinator: CoordinatorProcess, tls_worker: WorkerProcess, tmp_path: Path
) -> None:
    status = tls_coordinator.status()  # the CLI over TLS (DESKFLEET_CA_FILE)
    assert "headlessOnline" in status
    plain = subprocess.run(
        [str(BIN / "deskfleet"), "status", "--coordinator", tls_coordinator.address],
        capture_output=True,
        text=True,
        env={**base_env(tmp_path), "DESKFLEET_TOKEN_FILE": str(tls_coordinator.admin_token_file)},
        timeout=60,
    )
    assert plain.returncode == 5 and len(plain.stderr.strip().splitlines()) == 1, plain.stderr
    assert "Traceback" not in plain.stderr

    token = tls_coordinator.create_token()
    done = tls_worker.enroll(token)
    assert done.returncode == 0, done.stderr
    assert "with a client certificate" in done.stdout
    state = tls_worker.state_dir
    assert _mode(state / "client.key") == 0o600
    assert b"CERTIFICATE REQUEST" in (state / "client.csr").read_bytes()
    cert = x509.load_pem_x509_certificate((state / "client.pem").read_bytes())
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == tls_worker.worker_id
    identity = json.loads((state / "worker.json").read_text())
    assert identity["stream_coordinators"] == [f"127.0.0.1:{tls_coordinator.worker_port}"]

    # Token replay: the single-use token is spent.
    replay = WorkerProcess(tls_coordinator, "replay").enroll(token)
    assert replay.returncode == 3
    assert (
        replay.stderr.strip().splitlines() == [replay.stderr.strip()]
        and "has been used up (1 of 1 uses)" in replay.stderr
    )

    tls_worker.start().wait_online(60)
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "over mTLS"}, "idempotent": True}],
    )
    run = submit(tls_coordinator, plan, wait=True)
    assert run["status"] == "SUCCEEDED", run


def test_a_worker_stream_without_a_certificate_is_refused_clearly(
    tls_coordinator: CoordinatorProcess, tls_worker: WorkerProcess, ca_dir: Path
) -> None:
    assert tls_worker.enroll().returncode == 0
    credential, _, _ = _files(tls_worker)
    code, details = _connect(
        tls_coordinator, ca_dir, credential, None, None, port=tls_coordinator.port
    )
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "need the worker's client certificate" in details


def test_certificates_of_another_ca_or_expired_are_refused(
    tls_coordinator: CoordinatorProcess, tls_worker: WorkerProcess, ca_dir: Path
) -> None:
    assert tls_worker.enroll().returncode == 0
    credential, _, _ = _files(tls_worker)
    key = new_private_key()
    now = dt.datetime.now(dt.UTC)
    day = dt.timedelta(days=1)
    ours = CertificateAuthority.load(ca_dir)
    cases = {
        "another CA": CertificateAuthority.create().issue(
            key.public_key(), tls_worker.worker_id, not_before=now - day, not_after=now + day
        ),
        "expired": ours.issue(
            key.public_key(), tls_worker.worker_id, not_before=now - 3 * day, not_after=now - day
        ),
    }
    for what, issued in cases.items():
        code, details = _connect(
            tls_coordinator, ca_dir, credential, private_key_pem(key), issued.pem.encode()
        )
        # Refused by the TLS handshake itself: the worker port verifies against the CA.
        assert code == grpc.StatusCode.UNAVAILABLE, what
    # Our CA's signature alone is not enough: the coordinator issued this one to nobody.
    unrecorded = ours.issue(
        key.public_key(), tls_worker.worker_id, not_before=now - day, not_after=now + day
    )
    code, details = _connect(
        tls_coordinator, ca_dir, credential, private_key_pem(key), unrecorded.pem.encode()
    )
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "is not one this coordinator issued" in details


def test_a_revoked_workers_certificate_is_refused(
    tls_coordinator: CoordinatorProcess, tls_worker: WorkerProcess, ca_dir: Path
) -> None:
    other = WorkerProcess(tls_coordinator, "other-of-revoked")
    assert tls_worker.enroll().returncode == 0 and other.enroll().returncode == 0
    credential, key, cert = _files(tls_worker)
    tls_coordinator.cli("workers", "revoke", tls_worker.worker_id)
    code, details = _connect(tls_coordinator, ca_dir, credential, key, cert)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "has been revoked" in details
    # With another worker's valid credential, the revoked worker's certificate still fails.
    other_credential, _, _ = _files(other)
    code, details = _connect(tls_coordinator, ca_dir, other_credential, key, cert)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert f"not for worker {other.worker_id}" in details


def test_a_renewed_certificate_replaces_the_old_one(ca_dir: Path, tmp_path: Path) -> None:
    coordinator = _tls_coordinator(ca_dir, tmp_path / "coord", RENEWED_CERT_DAYS)
    worker = WorkerProcess(coordinator, "renews", extra_args=("--no-computer-use",), browser=False)
    try:
        worker.start().wait_online(60)
        credential, key, old = _files(worker)
        # The worker renews on its own with a third of the lifetime left (~13 s after issue), which
        # leaves the old certificate valid for the check of its refusal below.
        wait_until(
            lambda: (worker.state_dir / "client.pem").read_bytes() != old,
            60,
            0.5,
            "the worker to renew its certificate",
        )
        assert _mode(worker.state_dir / "client.key") == 0o600
        code, details = _connect(coordinator, ca_dir, credential, key, old)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert "was replaced at" in details
        # The worker itself carries on with its new certificate, also across a reconnect.
        assert worker.row() is not None and worker.row()["online"]  # type: ignore[index]
        worker.stop()
        worker.start().wait_online(60)
    finally:
        worker.stop()
        coordinator.stop()


def test_plaintext_beyond_loopback_is_refused_with_one_line(tmp_path: Path) -> None:
    coordinator = CoordinatorProcess(tmp_path / "coord")
    coordinator.init()
    env = base_env(tmp_path)
    serve = subprocess.run(
        [
            str(BIN / "deskfleet-coordinator"),
            "serve",
            "--db",
            coordinator.db_url,
            "--listen",
            "0.0.0.0:0",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert serve.returncode == 1
    assert serve.stderr.strip().splitlines() == [
        "deskfleet-coordinator: refusing to serve plaintext on 0.0.0.0:0, beyond this machine:"
        " pass --tls-cert and --tls-key (make them with `deskfleet-coordinator ca init`), or"
        " --plaintext to accept it"
    ]
    enroll = subprocess.run(
        [
            str(BIN / "deskfleet-worker"),
            "enroll",
            "--coordinator",
            "192.0.2.1:50051",
            "--token",
            "dfe_x.y",
            "--state-dir",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert enroll.returncode == 1
    assert enroll.stderr.strip().splitlines() == [
        "deskfleet-worker: refusing plaintext to 192.0.2.1:50051: give the coordinator's CA"
        " with --ca-file (or DESKFLEET_CA_FILE), or pass --plaintext to accept it"
    ]
    cli = subprocess.run(
        [str(BIN / "deskfleet"), "whoami", "--coordinator", "192.0.2.1:50051", "--timeout", "1"],
        capture_output=True,
        text=True,
        env={**env, "DESKFLEET_TOKEN_FILE": str(coordinator.admin_token_file)},
        timeout=60,
    )
    lines = cli.stderr.strip().splitlines()
    assert cli.returncode == 5 and len(lines) == 2, cli.stderr
    assert lines[0].startswith("deskfleet: warning: plaintext connection to 192.0.2.1:50051")


def test_plaintext_serve_beyond_loopback_with_the_flag_warns(tmp_path: Path) -> None:
    coordinator = CoordinatorProcess(tmp_path / "coord", serve_args=("--plaintext",))
    coordinator.init()
    # The harness listens on loopback; --listen is given again, last one wins.
    coordinator.serve_args = ("--plaintext", "--listen", "0.0.0.0:0")
    coordinator.start()
    try:
        wait_until(lambda: "serving PLAINTEXT" in coordinator.log.read_text(), 10, what="warning")
    finally:
        coordinator.stop()


def test_ca_init_is_idempotent_and_keeps_keys_private(ca_dir: Path) -> None:
    assert _mode(ca_dir / "ca.key") == 0o600 and _mode(ca_dir / "server.key") == 0o600
    before = (ca_dir / "ca.pem").read_bytes()
    again = _ca_init(ca_dir)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"CA kept: {ca_dir / 'ca.pem'} (an existing CA is never replaced)",
        f"server certificate kept: {ca_dir / 'server.pem'} (localhost, 127.0.0.1)",
    ]
    assert (ca_dir / "ca.pem").read_bytes() == before
    cert = x509.load_pem_x509_certificate((ca_dir / "server.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
