"""`deskfleet-worker doctor`: check that this machine can work as an enrolled worker.

One row per check (display, input, browser, sandbox, coordinator, credential, clock), each ok,
FAIL, WARN (it works, less safely than it could: it does not fail doctor) or skip (not
applicable here, or not checkable because an earlier check failed), with what was seen and, for
a failure or a warning, how to fix it. The installers run it at the end. The display, input and
browser rows reuse the capability probes the worker advertises with, so doctor sees what the
coordinator would be told.
"""

from __future__ import annotations

import json
import os
import platform
import stat
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.credentials import auth_metadata
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    PermissionDeniedError,
    UnavailableError,
    from_rpc_error,
)
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc
from shared.text import visible
from worker_agent import sandbox as browser_sandbox, x_authority
from worker_agent.capabilities import (
    ProbeOptions,
    probe_computer_use,
    probe_displays,
    probe_headless,
)
from worker_agent.macos_permissions import (
    accessibility_problem,
    real_python,
    screen_recording_problem,
)
from worker_agent.state import CA, CREDENTIAL, StateDir, WorkerIdentity

DEFAULT_MAX_SKEW = 5.0  # seconds; leases are 15 s by default, so a few seconds is harmless
DEFAULT_RPC_TIMEOUT = 5.0
DETAIL_WIDTH = 52
FIX_WIDTH = 60


class Status(StrEnum):
    OK = "ok"
    FAIL = "fail"
    WARN = "warn"  # works, less safely than it could (Chromium without its sandbox)
    SKIP = "skip"  # not applicable here, or not checkable because an earlier check failed


LOUD = (Status.FAIL, Status.WARN)  # shown in capitals


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class DoctorOptions:
    state_dir: Path
    probe: ProbeOptions = field(default_factory=ProbeOptions)
    coordinators: list[str] | None = None  # default: the ones the worker enrolled with
    max_skew: float = DEFAULT_MAX_SKEW
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT


@dataclass
class Report:
    checks: list[Check]
    worker_id: str = ""
    worker_name: str = ""  # the name it enrolled under (`enroll --name`), from its state dir
    state_dir: str = ""
    clock_skew_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return all(c.status != Status.FAIL for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "workerId": self.worker_id,
            "workerName": self.worker_name,
            "hostname": platform.node(),
            "stateDir": self.state_dir,
            "clockSkewSeconds": self.clock_skew_seconds,
            "checks": [{**asdict(c), "status": c.status.value} for c in self.checks],
        }


def diagnose(options: DoctorOptions) -> Report:
    """Run every check; never raises for what it finds."""
    identity, credential, state_problem = _load_state(options.state_dir)
    ca = _ca(options.state_dir)
    granted = _granted(identity)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="doctor-browser") as pool:
        # The browser launch dominates; it runs while the display and coordinator are checked.
        browser = (
            pool.submit(_check_browser, options.probe)
            if "headless" in granted and options.probe.headless_allowed
            else None
        )
        checks = _check_desktop(options.probe, granted)
        coordinators = options.coordinators or (identity.coordinators if identity else [])
        reachable, coordinator_check = _check_coordinators(coordinators, options.rpc_timeout, ca)
        credential_check, clock_check, skew = _check_credential_and_clock(
            identity, credential, state_problem, reachable, options, ca
        )
        if browser is not None:
            browser_checks = browser.result()
        else:
            why = (
                "browser disabled here (--no-headless)"
                if not options.probe.headless_allowed
                else "the enrollment token did not grant headless"
            )
            browser_checks = [
                Check("browser", Status.SKIP, why),
                Check("sandbox", Status.SKIP, why),
            ]
    checks += [*browser_checks, coordinator_check, credential_check, clock_check]
    return Report(
        checks,
        worker_id=identity.worker_id if identity else "",
        worker_name=identity.name if identity else "",
        state_dir=str(options.state_dir),
        clock_skew_seconds=skew,
    )


def _ca(path: Path) -> bytes | None:
    """The coordinator's CA when the worker enrolled over TLS (checks then use TLS too)."""
    try:
        return StateDir(path).read_bytes(CA)
    except DeskfleetError:
        return None


def _channel(address: str, ca: bytes | None) -> grpc.Channel:
    if ca is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(ca))


def _load_state(path: Path) -> tuple[WorkerIdentity | None, str, str]:
    """(identity, credential, problem): the problem says why there is no usable enrollment."""
    try:
        identity, credential = StateDir(path).load()
    except DeskfleetError as exc:
        return None, "", exc.message
    return identity, credential, ""


def _granted(identity: WorkerIdentity | None) -> set[str]:
    everything = {"headless", "computer_use"}
    if identity is None or not identity.allowed_capabilities:
        return everything  # an empty grant means every capability
    return everything & set(identity.allowed_capabilities)


# --- display and input -----------------------------------------------------------------------


def _check_desktop(probe: ProbeOptions, granted: set[str]) -> list[Check]:
    why_not = ""
    if not probe.computer_use_allowed:
        why_not = "Computer Use disabled here (--no-computer-use)"
    elif "computer_use" not in granted:
        why_not = "the enrollment token did not grant computer_use"
    if why_not:
        return [Check("display", Status.SKIP, why_not), Check("input", Status.SKIP, why_not)]

    displays, display_problem = probe_displays()
    display_problem = display_problem or _session_problem() or screen_recording_problem()
    if display_problem:
        display = Check("display", Status.FAIL, display_problem, _display_fix())
    else:
        where = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or "the desktop"
        sizes = ", ".join(f"{d.width}x{d.height}" for d in displays)
        detail = f"{where}: {len(displays)} screen(s) {sizes}"
        if sys.platform.startswith("linux") and x_authority.missing_file():
            # Not a failure: the server accepted the connection without a cookie.
            detail += f"; {x_authority.missing_file()}: connected without a cookie"
        display = Check("display", Status.OK, detail)

    capability = probe_computer_use(display_problem, probe)
    input_problem = capability.reason if not capability.available else accessibility_problem()
    if input_problem:
        fix = _input_fix() if not display_problem else "fix the display first (see above)"
        input_check = Check("input", Status.FAIL, input_problem, fix)
    else:
        input_check = Check("input", Status.OK, "pyautogui moved the pointer in place")
    return [display, input_check]


def _display_fix() -> str:
    if sys.platform == "darwin":
        return (
            "System Settings > Privacy & Security > Screen Recording: allow"
            f" {real_python()}, then restart the worker (launchctl kickstart -k"
            " gui/$(id -u)/com.deskfleet.worker)"
        )
    if sys.platform == "win32":
        return (
            "run the worker in the signed-in user's session: install with -Mode Desktop"
            " (a scheduled task at logon), not as a service in session 0"
        )
    refused = x_authority.refusal() if os.environ.get("DISPLAY") else None
    if refused is not None:  # the display is set: say why it does not let this worker in
        return refused.fix
    return (
        "run the worker inside the graphical session it controls, with DISPLAY and XAUTHORITY"
        " set (the desktop install imports them at login); on Wayland it needs XWayland's"
        " DISPLAY. A headless node: pass --no-computer-use"
    )


def _input_fix() -> str:
    if sys.platform == "darwin":
        return (
            "System Settings > Privacy & Security > Accessibility: allow"
            f" {real_python()}, then restart the worker"
        )
    if sys.platform == "win32":
        return "run the worker unelevated in the signed-in user's session (-Mode Desktop)"
    # The display answered (its row passed): what is left is pyautogui and python-xlib here.
    return (
        "check that pyautogui and python-xlib import in the worker's Python with this DISPLAY"
        " (the error above names what failed); or pass --no-computer-use"
    )


def _session_problem() -> str | None:
    """Windows: desktop control cannot work from session 0, where services run."""
    if sys.platform == "win32":
        import ctypes

        session = ctypes.c_ulong()
        found = ctypes.windll.kernel32.ProcessIdToSessionId(os.getpid(), ctypes.byref(session))
        if found and session.value == 0:
            return "running in session 0 (a service): no interactive desktop there"
    return None


# These two ask macOS directly; they are public so that the capability probe can ask the same.
# --- browser ---------------------------------------------------------------------------------


def _check_browser(probe: ProbeOptions) -> list[Check]:
    """The browser's row, and the sandbox mode it launched in."""
    capability, version, mode = probe_headless(probe)
    if capability.available and mode is not None:
        launched = Check(
            "browser", Status.OK, f"Chromium {version} launched headless ({probe.chromium})"
        )
        if mode.on:
            return [launched, Check("sandbox", Status.OK, f"Chromium's sandbox is {mode}")]
        detail = f"Chromium runs without its sandbox: {mode.why}"
        return [launched, Check("sandbox", Status.WARN, detail, sandbox_fix(probe.sandbox))]
    if sys.platform.startswith("linux"):
        fix = "apt-get install chromium (or your distribution's package), or pass --chromium PATH"
    else:
        fix = "install Chromium, Chrome or Edge and pass its executable with --chromium PATH"
    if "--chromium-sandbox on" in capability.reason:
        fix = sandbox_fix("on")
    return [
        Check("browser", Status.FAIL, capability.reason, fix),
        Check("sandbox", Status.SKIP, "not checked: the browser did not launch"),
    ]


def sandbox_fix(setting: str) -> str:
    if setting == "off":
        return "drop --chromium-sandbox off once this machine allows the sandbox"
    return browser_sandbox.FIX


# --- coordinator, credential, clock ----------------------------------------------------------


def _check_coordinators(
    addresses: list[str], timeout: float, ca: bytes | None
) -> tuple[list[str], Check]:
    if not addresses:
        return [], Check(
            "coordinator",
            Status.FAIL,
            "no coordinator address: this state dir holds no enrollment",
            "enroll (deskfleet-worker enroll --coordinator HOST:PORT ...) or pass --coordinator",
        )
    answered: list[str] = []
    problems: list[str] = []
    for address in addresses:
        problem = _health(address, timeout, ca)
        if problem:
            problems.append(problem if address in problem else f"{address}: {problem}")
        else:
            answered.append(address)
    if not answered:
        return [], Check(
            "coordinator",
            Status.FAIL,
            "; ".join(problems),
            "check that `deskfleet-coordinator serve` runs at that address and that its port"
            " is open from this machine (the addresses are in worker.json in the state dir)",
        )
    detail = f"{', '.join(answered)} serving"
    if problems:
        detail += f"; not answering: {'; '.join(problems)}"
    return answered, Check("coordinator", Status.OK, detail)


def _health(address: str, timeout: float, ca: bytes | None) -> str | None:
    """None when the coordinator's standard health service says SERVING, else why not."""
    with _channel(address, ca) as channel:
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            # The type stubs of grpc_health leave the stub's methods out.
            reply = stub.Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=""), timeout=timeout
            )
        except grpc.RpcError as exc:
            return from_rpc_error(exc, address).message
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"health is {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return None


def _check_credential_and_clock(
    identity: WorkerIdentity | None,
    credential: str,
    state_problem: str,
    reachable: list[str],
    options: DoctorOptions,
    ca: bytes | None,
) -> tuple[Check, Check, float | None]:
    if identity is None:
        return (
            Check(
                "credential",
                Status.FAIL,
                state_problem,
                f"deskfleet-worker enroll --coordinator HOST:PORT --token dfe_..."
                f" --state-dir {options.state_dir}",
            ),
            Check("clock", Status.SKIP, "not checked: the clock is read with the credential"),
            None,
        )
    if not reachable:
        why = "not checked: no coordinator answered"
        return Check("credential", Status.SKIP, why), Check("clock", Status.SKIP, why), None

    address = reachable[0]
    try:
        sent = time.time()
        me = _who_am_i(address, credential, options.rpc_timeout, ca)
        received = time.time()
    except (AuthenticationError, PermissionDeniedError) as exc:
        return (
            Check(
                "credential",
                Status.FAIL,
                f"{address} refused this worker: {exc.message}",
                "the worker was revoked or enrolled elsewhere: ask an admin for a token"
                " (deskfleet tokens create) and enroll again into an empty state dir",
            ),
            Check("clock", Status.SKIP, "not checked: the credential was refused"),
            None,
        )
    except DeskfleetError as exc:
        return (
            Check("credential", Status.FAIL, exc.message, _retry_fix(exc)),
            Check("clock", Status.SKIP, "not checked: the coordinator did not answer"),
            None,
        )

    credential_check = _credential_row(identity, me, options.state_dir)
    if not me.server_time:
        return (
            credential_check,
            Check("clock", Status.SKIP, f"{address} does not report its clock"),
            None,
        )
    # The server read its clock somewhere between send and receive: compare with the midpoint.
    skew = (sent + received) / 2 - me.server_time
    rtt_ms = (received - sent) * 1000
    ahead = "ahead of" if skew >= 0 else "behind"
    detail = f"{abs(skew):.2f} s {ahead} {address} (round trip {rtt_ms:.0f} ms)"
    if abs(skew) <= options.max_skew:
        return credential_check, Check("clock", Status.OK, detail), skew
    return (
        credential_check,
        Check(
            "clock",
            Status.FAIL,
            f"{detail}; more than {options.max_skew:g} s",
            _clock_fix(),
        ),
        skew,
    )


def _who_am_i(
    address: str, credential: str, timeout: float, ca: bytes | None
) -> admin_pb2.Principal:
    with _channel(address, ca) as channel:
        try:
            reply: admin_pb2.Principal = admin_pb2_grpc.AdminServiceStub(channel).WhoAmI(
                admin_pb2.WhoAmIRequest(), metadata=auth_metadata(credential), timeout=timeout
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, address) from exc
    return reply


def _credential_row(identity: WorkerIdentity, me: admin_pb2.Principal, state_dir: Path) -> Check:
    if me.role != "worker" or me.id != identity.worker_id:
        return Check(
            "credential",
            Status.FAIL,
            f"the credential belongs to {me.role} {me.id}, not to worker {identity.worker_id}",
            "the state dir is damaged: enroll again into an empty state dir",
        )
    path = state_dir / CREDENTIAL
    if os.name == "posix" and os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return Check(
            "credential",
            Status.FAIL,
            f"accepted, but {path} is readable by other users",
            f"chmod 600 {path}",
        )
    return Check("credential", Status.OK, f"accepted: worker {me.id} ({me.name})")


def _retry_fix(exc: DeskfleetError) -> str:
    if isinstance(exc, UnavailableError):
        return "the coordinator stopped answering: check it and run doctor again"
    return "see the coordinator's log for this error"


def _clock_fix() -> str:
    if sys.platform == "darwin":
        return "System Settings > General > Date & Time: set time automatically"
    if sys.platform == "win32":
        return "w32tm /resync (or Settings > Time & language > Sync now)"
    return "turn on time sync: timedatectl set-ntp true (systemd-timesyncd or chrony)"


# --- output ----------------------------------------------------------------------------------


def render(report: Report) -> str:
    """The table a person reads: one row per check, the fix beside each failure."""
    if report.worker_id:
        who = f"worker {report.worker_name} ({report.worker_id})"
    else:
        who = "no enrolled worker"
    header = visible(
        f"deskfleet-worker doctor: {who} on host {platform.node()}, state {report.state_dir}"
    )
    # Details quote the environment (DISPLAY, XAUTHORITY, paths): an escape sequence in one is
    # spelled out, never run by the terminal.
    rows = [("CHECK", "RESULT", "DETAIL", "FIX")] + [
        (
            c.name,
            c.status.value.upper() if c.status in LOUD else c.status.value,
            visible(c.detail),
            visible(c.fix),
        )
        for c in report.checks
    ]
    # Long details and fixes wrap inside their column, so the table stays terminal-wide.
    limits = (12, 6, DETAIL_WIDTH, FIX_WIDTH)
    cells = [
        [textwrap.wrap(text, limit) or [""] for text, limit in zip(row, limits, strict=True)]
        for row in rows
    ]
    widths = [max(len(line) for row in cells for line in row[i]) for i in range(3)]
    lines: list[str] = []
    for row in cells:
        for n in range(max(len(cell) for cell in row)):
            parts = [cell[n] if n < len(cell) else "" for cell in row]
            lines.append(
                "  ".join([*(parts[i].ljust(widths[i]) for i in range(3)), parts[3]]).rstrip()
            )
    failed = sum(c.status == Status.FAIL for c in report.checks)
    warned = sum(c.status == Status.WARN for c in report.checks)
    verdict = "all checks passed" if not failed else f"{failed} check(s) failed"
    if warned:
        verdict += f", {warned} warning(s)"
    return "\n".join([header, "", *lines, "", verdict])


def render_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2)
