"""Real deskfleet processes: coordinators, workers, the console, and waiting on them.

Everything here starts a real program and cleans up after itself; nothing is simulated.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from coordinator.admin_cli.render import as_dict
from shared import faults
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc, fleet_pb2, fleet_pb2_grpc
from tests.harness.cli import run_in_process

BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.05, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def run_together(
    *argvs: list[str], env: dict[str, str], timeout: float = 60
) -> list[subprocess.CompletedProcess[str]]:
    """Run commands side by side and wait for all: their results, in order. For commands
    that each start Python only to stop at a check of their arguments (two cores start two
    in the time of one, where running them one after another waits for each)."""
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for argv in argvs
    ]
    done = []
    try:
        for argv, proc in zip(argvs, procs, strict=True):
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return done


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def base_env(workdir: Path) -> dict[str, str]:
    """A clean environment: no inherited DISPLAY or client configuration."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY") and not k.startswith("DESKFLEET_")
    }
    env["XDG_CONFIG_HOME"] = str(workdir / "xdg-config")
    env["XDG_CACHE_HOME"] = str(workdir / "xdg-cache")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _init_store(db_url: str, admin_token: Path, secrets_key: Path, workdir: Path) -> None:
    subprocess.run(
        [
            BIN / "deskfleet-coordinator",
            "init",
            "--db",
            db_url,
            "--admin-token-file",
            admin_token,
            "--secrets-key-file",
            secrets_key,
        ],
        check=True,
        capture_output=True,
        text=True,
        env=base_env(workdir),
        timeout=60,
    )


def init_store(db_url: str, workdir: Path) -> None:
    """`init` a store, its admin token and secrets key written in `workdir`."""
    _init_store(db_url, workdir / "admin.token", workdir / "secrets.key", workdir)


_template_lock = threading.Lock()
_template: list[Path] = []


def _template_store() -> Path:
    """One initialised SQLite store per test process (removed when the process exits)."""
    with _template_lock:
        if not _template:
            where = Path(tempfile.mkdtemp(prefix="deskfleet-template-"))
            atexit.register(shutil.rmtree, where, True)
            _init_store(
                f"sqlite:///{where / 'fleet.db'}",
                where / "admin.token",
                where / "secrets.key",
                where,
            )
            _template.append(where)
        return _template[0]


# Set in a small exec wrapper, never in a preexec_fn: this process holds gRPC channels, and a
# preexec_fn makes subprocess fork with Python's fork handlers, which restarted gRPC's poller in
# the child between fork and exec; the coordinator then died before its first line
# ("epoll_wait error: Bad file descriptor").
_EXEC_PREPARED = """
import os, resource, signal, sys
soft, hard, ignore_sigint = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if soft >= 0:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
if ignore_sigint:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited through exec
os.execv(sys.argv[4], sys.argv[4:])
"""


def prepared(
    argv: list[str], *, open_files: tuple[int, int] | None = None, ignore_sigint: bool = False
) -> list[str]:
    """`argv` run with the given limit of open files and SIGINT disposition, as a service
    manager or a parent shell would set them."""
    soft, hard = open_files or (-1, -1)
    return [
        sys.executable,
        "-c",
        _EXEC_PREPARED,
        str(soft),
        str(hard),
        "1" if ignore_sigint else "0",
        *argv,
    ]


class CoordinatorProcess:
    """`deskfleet-coordinator init` + `serve` on a free loopback port."""

    def __init__(
        self,
        workdir: Path,
        db_url: str | None = None,
        *,
        heartbeat: float = 0.3,
        lease: float = 1.5,
        replica: str = "r1",
        sweep: float = 1.0,
        allow_private_networks: bool = True,
        policy: Path | None = None,
        serve_args: tuple[str, ...] = (),
        ca_file: Path | None = None,
        scripts_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.extra_env = env or {}  # for the serve process only (a model service's address)
        self.ca_file = ca_file  # the CLI and enrolling workers use TLS verified by this CA
        self.worker_port = 0  # with --ca-dir: the listener for worker streams (mTLS)
        self.policy = policy
        self.serve_args = serve_args
        self.sweep = sweep
        self.allow_private_networks = allow_private_networks
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url or f"sqlite:///{workdir / 'fleet.db'}"
        self.admin_token_file = workdir / "admin.token"
        self.secrets_key_file = workdir / "secrets.key"  # replicas of one store share it
        # `scripted:NAME` models: the scripts this coordinator offers (see script()).
        self.scripts_dir = scripts_dir or workdir / "scripts"
        self.scripts_dir.mkdir(parents=True, exist_ok=True)
        self.heartbeat = heartbeat
        self.lease = lease
        self.replica = replica
        self.log = workdir / f"coordinator-{replica}.log"
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self._log_file: Any = None
        self._channel: grpc.Channel | None = None
        self._channel_address = ""

    def _close_handles(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def channel(self) -> grpc.Channel | None:
        """An in-process channel to this coordinator for the harness's own calls (status,
        tokens, submissions, waits): a CLI process per call would be a Python start competing
        with the system under test. None where the CLI must make the call: over TLS (the CLI
        knows how to verify it) and in tracing tests (the CLI is what joins the trace)."""
        if self.ca_file is not None or os.environ.get("TRACEPARENT"):
            return None
        if self._channel is None or self._channel_address != self.address:
            if self._channel is not None:
                self._channel.close()
            self._channel = grpc.insecure_channel(self.address)
            self._channel_address = self.address
        return self._channel

    def admin_metadata(self, token_file: Path | None = None) -> tuple[tuple[str, str], ...]:
        return auth_metadata((token_file or self.admin_token_file).read_text().strip())

    def init(self) -> None:
        """`init` the store; a new SQLite store is a copy of one initialised store (template).

        Migrations run once per test process instead of once per coordinator: copies share
        the template's admin token and secrets key, which is all a test store needs.
        """
        if self.db_url == f"sqlite:///{self.workdir / 'fleet.db'}" and not os.environ.get(
            "DESKFLEET_TEST_NO_TEMPLATE"
        ):
            template = _template_store()
            for name, target in (
                ("fleet.db", self.workdir / "fleet.db"),
                ("admin.token", self.admin_token_file),
                ("secrets.key", self.secrets_key_file),
                # Where `init` puts the evidence key for a SQLite store, and serve finds it.
                ("evidence.key", self.workdir / "evidence.key"),
            ):
                shutil.copyfile(template / name, target)
                target.chmod(0o600)
            return
        _init_store(self.db_url, self.admin_token_file, self.secrets_key_file, self.workdir)

    def start(
        self, *, port: int = 0, fault: str = "", open_files: tuple[int, int] | None = None
    ) -> CoordinatorProcess:
        """Serve; `fault` arms a test-only fault hook (shared/faults.py) in this
        process; `open_files` sets its limits of open files (soft, hard), as a service
        manager would."""
        if not self.admin_token_file.exists():
            self.init()
        self._close_handles()
        self._log_file = self.log.open("a")
        argv = [
            str(BIN / "deskfleet-coordinator"),
            "serve",
            "--db",
            self.db_url,
            "--listen",
            f"127.0.0.1:{port}",
            "--replica",
            self.replica,
            "--heartbeat-interval",
            str(self.heartbeat),
            "--lease-ttl",
            str(self.lease),
            "--sweep-interval",
            str(self.sweep),
            *(["--allow-private-networks"] if self.allow_private_networks else []),
            *(["--policy", str(self.policy)] if self.policy else []),
            "--scripted-models-dir",
            str(self.scripts_dir),
            "--secrets-key-file",
            str(self.secrets_key_file),
            *self.serve_args,
        ]
        self.proc = subprocess.Popen(
            prepared(argv, open_files=open_files) if open_files else argv,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            env={
                **base_env(self.workdir),
                **self.extra_env,
                **({faults.ENV: fault} if fault else {}),
            },
        )
        line = self._read_line(timeout=30)
        self.port = int(line.rsplit(":", 1)[1])
        if "--ca-dir" in self.serve_args:
            # Printed right after the first line, so it may already sit in the pipe's buffer
            # where select() cannot see it: read it directly (EOF if the process died).
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline().strip()
            if "worker streams" not in line:
                self.kill()
                raise RuntimeError(f"coordinator did not start ({line!r}):\n{tail(self.log)}")
            self.worker_port = int(line.rsplit(":", 1)[1])
        return self

    def _read_line(self, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            self.kill()
            raise RuntimeError(f"coordinator did not start:\n{tail(self.log)}")
        line = self.proc.stdout.readline().strip()
        if "listening on" not in line:
            self.kill()
            raise RuntimeError(f"coordinator did not start ({line!r}):\n{tail(self.log)}")
        return line

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_handles()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_handles()

    def script(self, name: str, steps: list[dict[str, Any]]) -> str:
        """Offer a scripted model (providers/scripted.py) with these steps; its model spec."""
        (self.scripts_dir / name).write_text(json.dumps({"steps": steps}))
        return f"scripted:{name}"

    def cli(
        self,
        *args: str,
        token_file: Path | None = None,
        json_out: bool = False,
        check: bool = True,
        timeout: float = 30,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`deskfleet ARGS` against this coordinator (as admin unless told otherwise), run by
        the CLI's `main` in this process (see `harness.cli`)."""
        env = base_env(self.workdir)
        env["DESKFLEET_COORDINATOR"] = self.address
        env["DESKFLEET_TOKEN_FILE"] = str(token_file or self.admin_token_file)
        if self.ca_file is not None:
            env["DESKFLEET_CA_FILE"] = str(self.ca_file)
        argv = [str(BIN / "deskfleet"), *args, *(["--json"] if json_out else [])]
        done = run_in_process(argv, env, input_text, timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv[1:])} failed ({done.returncode}): {done.stderr}")
        return done

    def cli_json(self, *args: str, token_file: Path | None = None) -> Any:
        return json.loads(self.cli(*args, token_file=token_file, json_out=True).stdout)

    def status(self) -> dict[str, Any]:
        """`deskfleet status --json`'s document (the first page of workers)."""
        channel = self.channel()
        if channel is None:
            doc: dict[str, Any] = self.cli_json("status")
            return doc
        reply = fleet_pb2_grpc.FleetServiceStub(channel).GetWorkerStatus(
            fleet_pb2.GetWorkerStatusRequest(), metadata=self.admin_metadata(), timeout=30
        )
        doc = as_dict(reply)
        doc.setdefault("nextPageToken", "")
        return doc

    def create_token(self, *extra: str) -> str:
        """An enrollment token: `tokens create EXTRA`, or with no EXTRA the CLI's defaults
        (every capability, one use, an hour)."""
        channel = self.channel()
        if extra or channel is None:
            token: str = self.cli_json("tokens", "create", *extra)["token"]
            return token
        request = admin_pb2.CreateEnrollmentTokenRequest(ttl_seconds=3600, uses=1)
        reply = admin_pb2_grpc.AdminServiceStub(channel).CreateEnrollmentToken(
            request, metadata=self.admin_metadata(), timeout=30
        )
        token = reply.token
        return token


class WorkerProcess:
    """An enrolled `deskfleet-worker run` subprocess."""

    def __init__(
        self,
        coordinator: CoordinatorProcess,
        name: str,
        *,
        display_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        home: Path | None = None,
        browser: bool = True,
    ):
        """`home`: where its state directory and log go (default: the coordinator's workdir;
        tests that share a coordinator give each test its own). `browser=False` runs it with
        --no-headless: no Chromium is launched, even to measure it (about a second of a core
        per start), for tests whose workers never browse."""
        self.coordinator = coordinator
        self.name = name
        home = home or coordinator.workdir
        home.mkdir(parents=True, exist_ok=True)
        self.state_dir = home / f"worker-{name}"
        self.log = home / f"worker-{name}.log"
        self.display_env = display_env or {}
        self.extra_args = extra_args
        self.browser = browser
        self.proc: subprocess.Popen[str] | None = None
        self.worker_id = ""
        self._log_file: Any = None

    def env(self) -> dict[str, str]:
        env = base_env(self.state_dir)
        env.update(self.display_env)
        return env

    def enroll(
        self, token: str | None = None, *labels: str, coordinators: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        token = token or self.coordinator.create_token()
        argv = [
            str(BIN / "deskfleet-worker"),
            "enroll",
            "--coordinator",
            coordinators or self.coordinator.address,
            "--token",
            token,
            "--state-dir",
            str(self.state_dir),
            "--name",
            self.name,
        ]
        for label in labels:
            argv += ["--label", label]
        if self.coordinator.ca_file is not None:
            argv += ["--ca-file", str(self.coordinator.ca_file)]
        done = run_in_process(argv, self.env(), None, 60)
        if done.returncode == 0:
            self.worker_id = json.loads((self.state_dir / "worker.json").read_text())["worker_id"]
        return done

    def start(self, *, fault: str = "") -> WorkerProcess:
        """Run it; `fault` arms a test-only fault hook (shared/faults.py) in this process."""
        if not self.worker_id:
            done = self.enroll()
            assert done.returncode == 0, done.stderr
        if self._log_file is not None:
            self._log_file.close()
        self._log_file = self.log.open("a")
        self.proc = subprocess.Popen(
            [
                str(BIN / "deskfleet-worker"),
                "run",
                "--state-dir",
                str(self.state_dir),
                *(() if self.browser else ("--no-headless",)),
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            text=True,
            env={**self.env(), **({faults.ENV: fault} if fault else {})},
        )
        return self

    def row(self) -> dict[str, Any] | None:
        status = self.coordinator.status()
        return next((w for w in status["workers"] if w["id"] == self.worker_id), None)

    def scratch(self, name: str) -> Path:
        """Where `diag.append` with this `name` writes: the worker's scratch directory."""
        return self.state_dir / "scratch" / name

    def wait_online(self, timeout: float = 30) -> dict[str, Any]:
        def online() -> dict[str, Any] | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited:\n{tail(self.log)}")
            row = self.row()
            return row if row and row["online"] else None

        row: dict[str, Any] = wait_until(online, timeout, 0.1, f"worker {self.name} online")
        return row

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            if self.proc.returncode is None:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


class ConsoleProcess:
    """`deskfleet-coordinator console` for a coordinator, on a free loopback port."""

    def __init__(self, coordinator: CoordinatorProcess, *extra: str) -> None:
        self.coordinator = coordinator
        self.extra = extra
        self.log = coordinator.workdir / "console.log"
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self._log_file: Any = None

    def start(self) -> ConsoleProcess:
        self._log_file = self.log.open("a")
        argv = [str(BIN / "deskfleet-coordinator"), "console"]
        argv += ["--coordinator", self.coordinator.address, "--listen", "127.0.0.1:0"]
        if self.coordinator.ca_file is not None:
            argv += ["--ca-file", str(self.coordinator.ca_file)]
        self.proc = subprocess.Popen(
            [*argv, *self.extra],
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            text=True,
            env=base_env(self.coordinator.workdir),
        )
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(30)
        sel.close()
        line = self.proc.stdout.readline().strip() if ready else ""
        if "console listening on" not in line:
            self.stop()
            raise RuntimeError(f"console did not start ({line!r}):\n{tail(self.log)}")
        self.url = line.rsplit(" ", 1)[1]
        return self

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
