"""`deskfleet-worker`: enroll this machine, then run it as a worker."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import platform
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from shared import __version__, heap, logs, telemetry_options, tracing
from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    from_rpc_error,
)
from shared.gen.deskfleet.v1 import worker_pb2, worker_pb2_grpc
from shared.local_kill import LocalKill
from shared.timestamps import iso
from shared.transport import is_loopback, plaintext_warning
from worker_agent.action_log import ActionLog
from worker_agent.actions import ActionContext, ActionRefused, ActionRegistry, default_registry
from worker_agent.browser import (
    ACTION_KINDS,
    CONTEXT_IDLE,
    DEFAULT_RENDERER_MEMORY,
    MIN_RENDERER_MEMORY,
)
from worker_agent.capabilities import DEFAULT_CHROMIUM, ProbeOptions, measure
from worker_agent.certificates import WorkerTransport, new_request, with_port
from worker_agent.connection import HelloRefusedError, WorkerConnection
from worker_agent.desktop.actions import DesktopActions
from worker_agent.desktop.human import HumanInput
from worker_agent.desktop.peek import ScreenPeeker, no_desktop
from worker_agent.desktop.watch import ScreenWatcher
from worker_agent.doctor import DEFAULT_MAX_SKEW, DoctorOptions, diagnose, render, render_json
from worker_agent.executor import ActionExecutor
from worker_agent.hotkey import DEFAULT_HOTKEY, listen as listen_for_hotkey
from worker_agent.input_guard import InputGuard
from worker_agent.metrics import WorkerMetrics
from worker_agent.research_app import (
    APPS_DIR,
    MAX_TIMEOUT as MAX_APP_TIMEOUT,
    ResearchApps,
    app_user,
    parse_apps,
    parse_env,
)
from worker_agent.sandbox import SETTINGS as SANDBOX_SETTINGS
from worker_agent.scratch import ScratchDir
from worker_agent.state import CA, CLIENT_CERT, StateDir, StateLock, WorkerIdentity

if TYPE_CHECKING:  # imported when used: a worker without a browser never imports Playwright
    from worker_agent.browser.service import BrowserService

# The coordinator refused the credential, or the hello for a limit: reconnecting cannot help.
EXIT_REFUSED = 3
ENV_CA_FILE = "DESKFLEET_CA_FILE"
WORKER_PORT_METADATA = "deskfleet-worker-port"  # sent by Enroll when it signed a certificate


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deskfleet-worker", description=__doc__)
    p.add_argument("--version", action="version", version=f"deskfleet {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    enroll = sub.add_parser(
        "enroll", help="exchange an enrollment token for this worker's credential"
    )
    enroll.add_argument(
        "--coordinator", required=True, help="HOST:PORT, or several separated by commas"
    )
    enroll.add_argument("--token", required=True, help="the enrollment token (dfe_...)")
    enroll.add_argument("--state-dir", required=True, type=Path)
    enroll.add_argument("--name", default=platform.node(), help="default: the hostname")
    enroll.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    enroll.add_argument(
        "--ca-file",
        type=Path,
        default=os.environ.get(ENV_CA_FILE) or None,
        help="the coordinator's CA certificate (handed out with the token): TLS, and a client"
        f" certificate for this worker (env {ENV_CA_FILE})",
    )
    enroll.add_argument(
        "--plaintext",
        action="store_true",
        help="accept plaintext to a coordinator beyond this machine (loopback needs no flag)",
    )

    run = sub.add_parser("run", help="connect, advertise, heartbeat, reconnect forever")
    run.add_argument("--state-dir", required=True, type=Path)
    run.add_argument(
        "--chromium",
        default=os.environ.get("DESKFLEET_CHROMIUM", DEFAULT_CHROMIUM),
        help=f"the Chromium executable (env DESKFLEET_CHROMIUM; default {DEFAULT_CHROMIUM})",
    )
    _sandbox_option(run)
    run.add_argument(
        "--renderer-memory",
        type=int,
        default=DEFAULT_RENDERER_MEMORY,
        metavar="MIB",
        help="the most a page's renderer may hold, in MiB (its JavaScript heap: half); a page"
        f" past it is stopped and reported too_large (default {DEFAULT_RENDERER_MEMORY})",
    )
    run.add_argument(
        "--browser-idle",
        type=float,
        default=CONTEXT_IDLE,
        metavar="SECONDS",
        help="close a run's browser context after this long with nothing to do"
        f" (default {CONTEXT_IDLE:g})",
    )
    run.add_argument(
        "--no-computer-use",
        action="store_true",
        help="never offer desktop control, whatever this machine can do",
    )
    run.add_argument(
        "--no-headless",
        action="store_true",
        help="never offer a browser (headless, or visible for the research fallback): Chromium"
        " is neither launched nor measured, and browser actions are refused",
    )
    run.add_argument(
        "--research-app",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="offer an external research command for app routes (repeatable; JSON on stdin"
        " and stdout, see worker_agent/research_app.py)",
    )
    run.add_argument(
        "--research-app-env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this variable of the worker's environment on to research apps (repeatable;"
        " apps get only PATH, LANG, HOME, TMPDIR and these)",
    )
    run.add_argument(
        "--research-app-timeout",
        type=float,
        default=MAX_APP_TIMEOUT,
        metavar="SECONDS",
        help="the longest a research app may run, whatever a plan asks"
        f" (default {MAX_APP_TIMEOUT:g})",
    )
    run.add_argument(
        "--research-app-user",
        metavar="USER",
        help="run research apps as this user (the worker must run as root): they cannot read"
        " the state directory",
    )
    run.add_argument(
        "--allow-owner-takeover",
        action="store_true",
        help="let the owner of a run that holds this desktop take over its mouse and keyboard"
        " from the console (admins may either way; advertised to the coordinator)",
    )
    run.add_argument(
        "--kill-hotkey",
        default=DEFAULT_HOTKEY,
        help=f"the local kill switch's hotkey on X11 (default {DEFAULT_HOTKEY}; 'none' for none)",
    )
    run.add_argument(
        "--plaintext",
        action="store_true",
        help="accept plaintext to a coordinator beyond this machine (loopback needs no flag)",
    )
    telemetry_options.add_to(run)

    kill = sub.add_parser(
        "kill",
        help="the local kill switch: no desktop input runs while it is engaged (also SIGUSR1)",
    )
    kill.add_argument("action", choices=("engage", "release", "status"))
    kill.add_argument("--state-dir", required=True, type=Path)
    kill.add_argument("--reason", default="engaged at the desk")

    doctor = sub.add_parser(
        "doctor",
        help="check display, input, browser, coordinator, credential and clock; exit 1 on a"
        " failure",
    )
    doctor.add_argument("--state-dir", required=True, type=Path)
    doctor.add_argument(
        "--coordinator",
        help="HOST:PORT[,HOST:PORT...] to check (default: the ones the worker enrolled with)",
    )
    doctor.add_argument(
        "--chromium",
        default=os.environ.get("DESKFLEET_CHROMIUM", DEFAULT_CHROMIUM),
        help=f"the Chromium executable (env DESKFLEET_CHROMIUM; default {DEFAULT_CHROMIUM})",
    )
    _sandbox_option(doctor)
    doctor.add_argument(
        "--no-computer-use",
        action="store_true",
        help="a node that never offers desktop control: skip the display and input checks",
    )
    doctor.add_argument(
        "--no-headless",
        action="store_true",
        help="a node that never offers a browser: skip the browser check",
    )
    doctor.add_argument(
        "--max-skew",
        type=float,
        default=DEFAULT_MAX_SKEW,
        metavar="SECONDS",
        help="the largest clock difference with the coordinator that passes"
        f" (default {DEFAULT_MAX_SKEW:g})",
    )
    doctor.add_argument("--json", action="store_true", help="print one JSON document")
    return p


def _sandbox_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chromium-sandbox",
        choices=SANDBOX_SETTINGS,
        default=os.environ.get("DESKFLEET_CHROMIUM_SANDBOX", "auto"),
        help="Chromium's sandbox: auto (on wherever it can run: not as root; the default), on"
        " (required: no browser without it), off (env DESKFLEET_CHROMIUM_SANDBOX)",
    )


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"--label {pair!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


def _plaintext_allowed(addresses: list[str], accepted: bool, what: str) -> str | None:
    """A warning for plaintext beyond this machine when accepted; a refusal otherwise."""
    remote = [a for a in addresses if not is_loopback(a)]
    if not remote:
        return None
    if not accepted:
        raise FailedPreconditionError(
            f"refusing plaintext to {', '.join(remote)}: give the coordinator's CA with"
            f" --ca-file (or {ENV_CA_FILE}){what}, or pass --plaintext to accept it"
        )
    return plaintext_warning(", ".join(remote))


def _read_ca(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read CA file {path}: {exc.strerror or exc}") from exc
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise InvalidArgumentError(f"CA file {path} holds no PEM certificate")
    return data


def _enroll(args: argparse.Namespace) -> str:
    state = StateDir(args.state_dir)
    if state.enrolled:
        raise FailedPreconditionError(
            f"{args.state_dir} already holds an enrolled worker; use another --state-dir"
        )
    coordinators = [a.strip() for a in args.coordinator.split(",") if a.strip()]
    if not coordinators:
        raise InvalidArgumentError("--coordinator: give at least one HOST:PORT")
    labels = _labels(args.label)
    ca = _read_ca(args.ca_file) if args.ca_file else None
    if ca is None:
        warning = _plaintext_allowed(coordinators, args.plaintext, "")
        if warning:
            print(f"deskfleet-worker: {warning}", file=sys.stderr)
    # The key is made here and stays here; the coordinator signs a request for it.
    csr = new_request(state, args.name, new_key=True) if ca is not None else ""
    request = worker_pb2.EnrollRequest(
        token=args.token.strip(), name=args.name, labels=labels, csr_pem=csr
    )
    last: DeskfleetError | None = None
    for address in coordinators:
        channel = (
            grpc.secure_channel(address, grpc.ssl_channel_credentials(ca))
            if ca is not None
            else grpc.insecure_channel(address)
        )
        with channel:
            try:
                reply, call = worker_pb2_grpc.WorkerGatewayStub(channel).Enroll.with_call(
                    request, timeout=15
                )
            except grpc.RpcError as exc:
                last = from_rpc_error(exc, address)
                if last.code == grpc.StatusCode.UNAVAILABLE:
                    continue  # try the next coordinator
                raise last from exc
            port = dict(call.initial_metadata() or ()).get(WORKER_PORT_METADATA, "")
        streams: list[str] = []
        if ca is not None:
            state.write(CA, reply.ca_pem or ca.decode())
        if reply.certificate_pem and isinstance(port, str) and port.isdigit():
            state.write(CLIENT_CERT, reply.certificate_pem)
            streams = [with_port(a, int(port)) for a in coordinators]
        state.save(
            WorkerIdentity(
                reply.worker_id,
                args.name,
                coordinators,
                labels,
                list(reply.allowed_capabilities),
                streams,
                plaintext=ca is None and args.plaintext,
            ),
            reply.credential,
        )
        how = (
            "with a client certificate"
            if streams
            else "over TLS"
            if ca is not None
            else "in plaintext"
        )
        return f"enrolled as {reply.worker_id} ({how}); state saved in {args.state_dir}"
    assert last is not None
    raise last


async def _run(args: argparse.Namespace) -> None:
    if args.renderer_memory < MIN_RENDERER_MEMORY:
        raise InvalidArgumentError(
            f"--renderer-memory: at least {MIN_RENDERER_MEMORY} MiB (a renderer at rest holds"
            f" about 100), not {args.renderer_memory}"
        )
    state = StateDir(args.state_dir)
    identity, credential = state.load()
    # Before anything else starts (a browser, the metrics port, the stream): a second process
    # on this identity stops here, saying which one holds it.
    lock = StateLock(args.state_dir).acquire()
    try:
        await _serve(args, state, identity, credential)
    finally:
        lock.release()


async def _serve(
    args: argparse.Namespace, state: StateDir, identity: WorkerIdentity, credential: str
) -> None:
    for fixed in state.tighten_secrets():
        logging.getLogger("deskfleet.worker").warning("made %s readable by this user only", fixed)
    metrics = WorkerMetrics()
    if args.metrics_listen:  # before connecting: a taken port stops the worker at once
        port = metrics.serve(args.metrics_listen)
        host = args.metrics_listen.rsplit(":", 1)[0]
        logging.getLogger("deskfleet.worker").info("metrics on %s:%d", host, port)
    logs.add_static(worker_id=identity.worker_id)
    spans = tracing.Tracing(
        tracing.WORKER, {"service.instance.id": identity.worker_id}, args.otlp_endpoint
    ).start()
    transport = None
    if state.tls:
        transport = WorkerTransport(state, identity, credential)
    else:
        warning = _plaintext_allowed(
            identity.coordinators,
            args.plaintext or identity.plaintext,
            " at enrollment",
        )
        if warning:
            logging.getLogger("deskfleet.worker").warning("%s", warning)
    apps = ResearchApps(
        parse_apps(args.research_app),
        workdir=state.file(APPS_DIR),
        env=parse_env(args.research_app_env),
        max_timeout=args.research_app_timeout,
        user=app_user(args.research_app_user),
    )
    if not args.browser_idle > 0:
        raise SystemExit("deskfleet-worker: --browser-idle must be positive")
    registry = default_registry(ScratchDir.of(args.state_dir))
    browsers = _browsers(args, registry)
    options = ProbeOptions(
        chromium=args.chromium,
        computer_use_allowed=not args.no_computer_use,
        headless_allowed=not args.no_headless,
        # An empty grant is every capability.
        granted=frozenset(identity.allowed_capabilities or ProbeOptions.granted),
        sandbox=args.chromium_sandbox,
        research_apps=apps.names,
        owner_takeover=args.allow_owner_takeover,
        # The headless browser measured at connect is the one that serves (the first).
        launch=browsers[0].version if browsers else None,
    )
    apps.register(registry)
    desktop = None if args.no_computer_use else DesktopActions()
    if desktop is not None:
        desktop.register(registry)
    guard = InputGuard(args.state_dir)
    guard.install_signal()
    if not args.no_computer_use and args.kill_hotkey != "none":
        why_not = listen_for_hotkey(
            args.kill_hotkey,
            lambda: _engage_by_hotkey(guard, args.kill_hotkey),
        )
        log_ = logging.getLogger("deskfleet.worker")
        if why_not:
            log_.info("no kill hotkey (%s): SIGUSR1 and `deskfleet-worker kill` remain", why_not)
        else:
            log_.info("kill hotkey %s engages the local kill switch", args.kill_hotkey)
    actions = ActionExecutor(ActionLog(args.state_dir / "actions"), registry, guard=guard)
    watcher = ScreenWatcher(None if desktop is None else desktop.screen, guard)
    human_input = HumanInput(
        None if desktop is None else desktop.session,
        None if desktop is None else desktop.screen,
        guard,
        allow_owner=args.allow_owner_takeover,
    )
    actions.observe = metrics.finished
    connection = WorkerConnection(
        identity,
        credential,
        functools.partial(measure, options, identity.labels),
        actions=actions,
        guard=guard,
        transport=transport,
        save_credential=state.save_credential,
        peek=no_desktop if desktop is None else ScreenPeeker(desktop.screen, guard).answer,
        watcher=watcher,
        human_input=human_input.answer,
    )
    metrics.watch(connection)
    heap.freeze_startup()  # before connecting: see shared/heap.py
    task = asyncio.create_task(connection.run_forever())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        logging.getLogger("deskfleet.worker").info("stopped")
    finally:
        metrics.close()
        watcher.close()
        human_input.close()
        actions.close()
        for browser in browsers:
            await asyncio.to_thread(browser.close)
        # Last: spans of attempts cancelled above are ended by now, and exported.
        await asyncio.to_thread(spans.shutdown)


def _browsers(args: argparse.Namespace, registry: ActionRegistry) -> list[BrowserService]:
    """Register the browser actions; the browsers to close when the worker stops.

    The headless browser starts when the worker measures its capabilities (its launch shows
    that it works) and serves from then on; the visible one starts with its first action. With
    --no-headless there is none at all: Playwright is not even imported (it and the page
    extraction take about a second of a core), and a browser action that reaches this worker
    anyway is refused.
    """
    if args.no_headless:
        for kind in ACTION_KINDS:
            registry.register(kind, _no_browser)
        return []
    from worker_agent.browser.actions import BrowserActions
    from worker_agent.browser.service import BrowserService

    browser = BrowserService(
        args.chromium,
        context_idle=args.browser_idle,
        sandbox=args.chromium_sandbox,
        renderer_memory=args.renderer_memory,
    )
    # The research fallback's visible browser, on this desktop's display, started on first use.
    visible = (
        None
        if args.no_computer_use
        else BrowserService(
            args.chromium,
            visible=True,
            context_idle=args.browser_idle,
            sandbox=args.chromium_sandbox,
            renderer_memory=args.renderer_memory,
        )
    )
    BrowserActions(browser, visible).register(registry)
    return [browser] if visible is None else [browser, visible]


def _no_browser(args: dict[str, Any], ctx: ActionContext) -> Any:
    raise ActionRefused(
        "this worker runs without a browser (--no-headless): it offers no headless capability",
        code="not_offered",
    )


def _kill(args: argparse.Namespace) -> str:
    guard = InputGuard(args.state_dir)
    if args.action == "engage":
        was = guard.local_state()
        state = guard.engage_local(args.reason)
        if was.engaged:
            return f"the local kill switch was already engaged: {_local_kill_text(state)}"
        return (
            f"local kill switch engaged ({guard.kill_file}): no desktop input runs here; the"
            " coordinator is told"
        )
    if args.action == "release":
        released = guard.release_local()
        if not released:
            return "the local kill switch was not engaged"
        return "local kill switch released; the coordinator is told"
    state = guard.local_state()
    if not state.engaged:
        return f"local kill switch: released ({guard.kill_file})"
    return f"local kill switch: engaged {_local_kill_text(state)} ({guard.kill_file})"


def _engage_by_hotkey(guard: InputGuard, combo: str) -> None:
    guard.engage_local(f"engaged by the hotkey {combo}", "hotkey")


def _local_kill_text(state: LocalKill) -> str:
    return f"since {iso(state.since)} by {state.means}: {state.reason}"


def _doctor(args: argparse.Namespace) -> int:
    coordinators = (
        [a.strip() for a in args.coordinator.split(",") if a.strip()] if args.coordinator else None
    )
    report = diagnose(
        DoctorOptions(
            state_dir=args.state_dir,
            probe=ProbeOptions(
                chromium=args.chromium,
                computer_use_allowed=not args.no_computer_use,
                headless_allowed=not args.no_headless,
                sandbox=args.chromium_sandbox,
            ),
            coordinators=coordinators,
            max_skew=args.max_skew,
        )
    )
    print(render_json(report) if args.json else render(report))
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    prog = "deskfleet-worker"
    try:
        if args.command == "enroll":
            print(_enroll(args))
            return 0
        if args.command == "doctor":
            return _doctor(args)
        if args.command == "kill":
            print(_kill(args))
            return 0
        args.otlp_endpoint = tracing.resolve_endpoint(args.otlp_endpoint)
        logs.configure(args.log_level, args.log_format)
        asyncio.run(_run(args))
        return 0
    except (AuthenticationError, PermissionDeniedError) as exc:
        what = (
            "enrollment refused"
            if args.command == "enroll"
            else "the coordinator refused this worker"
        )
        print(f"{prog}: {what}: {exc.message}", file=sys.stderr)
        return EXIT_REFUSED
    except HelloRefusedError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return EXIT_REFUSED
    except DeskfleetError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
