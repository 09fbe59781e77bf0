"""The Python client (`import deskfleet`) against a real coordinator and a real worker that
browses (Chromium) and offers its desktop on a real X display (Xvfb) with a Chromium window
showing a form whose server records what arrives.

One coordinator and one worker for the module: each test makes its own runs, and ends them.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

import deskfleet
from deskfleet.errors import (
    ActionRefusedError,
    ApprovalDeniedError,
    AuthenticationError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from scripts.local_site.server import FACTS
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb, wait_until
from tests.harness.desktop_goals import new_owner
from tests.harness.sites import FIELD, MARKER, DesktopSite

TYPED = "Grüße aus dem Client \u2014 ok"


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture(scope="module")
def desk(module_workers: Callable[..., WorkerProcess], xvfb: Xvfb) -> WorkerProcess:
    """One worker on the display that also browses: research, plans and a desktop."""
    worker = module_workers("client-desk", display_env=xvfb.env)
    row = worker.wait_online()
    assert {c["name"] for c in row["capabilities"] if c["available"]} >= {
        "headless",
        "computer_use",
    }
    return worker


@pytest.fixture
def owner(coordinator: CoordinatorProcess, request: pytest.FixtureRequest) -> Path:
    return new_owner(coordinator, f"dev-{request.node.name[-40:].replace('[', '-')[:30]}")


@pytest.fixture
def form(
    window: Callable[[], None], desktop_site: DesktopSite, coordinator: CoordinatorProcess
) -> Iterator[DesktopSite]:
    window()
    desktop_site.reset()
    yield desktop_site
    _end_desktop_runs(coordinator)


def _end_desktop_runs(coordinator: CoordinatorProcess) -> None:
    channel = coordinator.channel()
    assert channel is not None
    md = coordinator.admin_metadata()
    runs = runs_pb2_grpc.RunServiceStub(channel)
    listed = runs.ListRuns(
        runs_pb2.ListRunsRequest(kind="desktop", owner="*", limit=1000), metadata=md, timeout=30
    )
    for run in listed.runs:
        if run.status in ("RUNNING", "WAITING_FOR_AUTHORITY", "WAITING_FOR_ENVIRONMENT"):
            runs.CancelRun(runs_pb2.RunRef(id=run.id), metadata=md, timeout=30)


def _approve(coordinator: CoordinatorProcess, run_id: str) -> None:
    def pending() -> list[dict[str, str]]:
        listed = coordinator.cli_json("approvals", "list")["approvals"]
        return [a for a in listed if a["runId"] == run_id]

    [mine] = wait_until(pending, timeout=30)
    coordinator.cli_json("approvals", "approve", mine["id"])


def _center(box: tuple[int, int, int, int]) -> tuple[int, int]:
    x, y, w, h = box
    return x + w // 2, y + h // 2


async def test_async_research_returns_typed_evidence(
    coordinator: CoordinatorProcess, desk: WorkerProcess, site: str, owner: Path
) -> None:
    async with await deskfleet.AsyncClient.connect(
        coordinator.address, token_file=str(owner)
    ) as fleet:
        status = await fleet.status()
        assert status.headless_online >= 1 and status.computer_use_online >= 1
        assert desk.worker_id in {w.id for w in status.workers}
        report = await fleet.research(
            "when was the north light first lit",
            urls=[f"{site}/varn/north-light.html", f"{site}/files/report.pdf"],
        )
    assert report.run.status == "SUCCEEDED" and report.run.id.startswith("run_")
    assert report.evidence == 1
    [source] = [s for s in report.sources if s.evidence]
    assert source.url == f"{site}/varn/north-light.html"
    assert FACTS["/varn/north-light.html"] + "." in [p.text for p in source.passages]
    best = report.passages[0]
    assert best.url == source.url and best.score is not None and best.link.startswith(site)
    [failure] = report.failures
    assert failure.outcome == "unsupported_content" and failure.url.endswith("report.pdf")
    assert report.to_dict()["totals"]["pages_fetched"] == 2


async def test_a_plan_is_watched_in_order_and_cancelled(
    coordinator: CoordinatorProcess, desk: WorkerProcess, owner: Path
) -> None:
    fleet = await deskfleet.AsyncClient.connect(coordinator.address, token_file=str(owner))
    async with fleet:
        quick = await fleet.submit_plan(
            {"actions": [{"kind": "diag.echo", "args": {"value": "hello"}, "idempotent": True}]}
        )
        done = await quick.result(timeout=60)
        assert done.status == "SUCCEEDED" and done.stop_reason.startswith("completed")
        events = [e async for e in quick.watch()]
        seqs = [e.seq for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert {"run.submitted", "receipt"} <= {e.kind for e in events}
        # Resumed after a sequence number: only what came later.
        later = [e.seq async for e in quick.watch(after_seq=seqs[1])]
        assert later == seqs[2:]

        slow = await fleet.submit_plan(
            {"actions": [{"kind": "diag.sleep", "args": {"seconds": 60}, "idempotent": True}]}
        )
        receipt = await slow.guide("take your time", message_id="client-test-1")
        again = await slow.guide("take your time", message_id="client-test-1")
        assert again.repeated_send and again.guidance_id == receipt.guidance_id
        live: list[str] = []

        async def follow() -> None:
            async for event in slow.watch():
                live.append(event.kind)

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.5)
        cancelled = await slow.cancel()
        await asyncio.wait_for(follower, 30)  # the watch ends with the run
        assert cancelled.status == "CANCELLED"
        assert (await fleet.get_run(slow.id)).status == "CANCELLED"
        assert "run.state" in live
        with pytest.raises(TimeoutError):
            await (
                await fleet.submit_plan(
                    {
                        "actions": [
                            {"kind": "diag.sleep", "args": {"seconds": 30}, "idempotent": True}
                        ]
                    }
                )
            ).result(timeout=0.5)


async def test_errors_are_the_tree_never_a_grpc_error(
    coordinator: CoordinatorProcess, desk: WorkerProcess, owner: Path, tmp_path: Path
) -> None:
    async with await deskfleet.AsyncClient.connect(
        coordinator.address, token_file=str(owner)
    ) as fleet:
        with pytest.raises(NotFoundError):
            await fleet.get_run("run_00000000000000000000000000")
        with pytest.raises(InvalidArgumentError, match="unknown field"):
            await fleet.submit_plan({"actions": [{"kind": "diag.echo", "arg": {}}]})
        with pytest.raises(NotFoundError, match="no worker with id or name 'no-such-desk'"):
            await fleet.request_desktop("no-such-desk", actions=["screenshot"])
        with pytest.raises(InvalidArgumentError, match="unknown"):
            await fleet.request_desktop(desk.worker_id, actions=["reboot"])
    bad = tmp_path / "bad.token"
    bad.write_text("df_user_" + "x" * 40)
    with pytest.raises(AuthenticationError):
        async with await deskfleet.AsyncClient.connect(
            coordinator.address, token_file=str(bad)
        ) as fleet:
            await fleet.status()
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        await deskfleet.AsyncClient.connect(coordinator.address, token_file=str(tmp_path / "x"))
    with pytest.raises(UnavailableError, match="cannot reach"):
        await deskfleet.AsyncClient.connect("127.0.0.1:1", token="t")
    # An owner may not read another owner's run: the reference grants nothing.
    other = new_owner(coordinator, "dev-other")
    async with await deskfleet.AsyncClient.connect(
        coordinator.address, token_file=str(owner)
    ) as mine:
        handle = await mine.submit_plan(
            {"actions": [{"kind": "diag.echo", "args": {"value": 1}, "idempotent": True}]}
        )
    async with await deskfleet.AsyncClient.connect(
        coordinator.address, token_file=str(other)
    ) as theirs:
        with pytest.raises((NotFoundError, PermissionDeniedError)):
            await theirs.get_run(handle.id)


def test_sync_desktop_session_types_into_the_form(
    coordinator: CoordinatorProcess,
    desk: WorkerProcess,
    form: DesktopSite,
    owner: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found as the CLI finds them: the environment.
    monkeypatch.setenv("DESKFLEET_COORDINATOR", coordinator.address)
    monkeypatch.setenv("DESKFLEET_TOKEN_FILE", str(owner))
    with deskfleet.Client.connect() as fleet:
        desk_session = fleet.request_desktop(
            "client-desk",  # by name
            actions=["screenshot", "left_click", "type", "key", "cursor_position"],
            reason="fill in the form from the client",
        )
        assert desk_session.worker_id == desk.worker_id
        with pytest.raises(ActionRefusedError) as refused:
            desk_session.screenshot()
        assert refused.value.reason == "not_approved" and refused.value.status == "refused"
        with pytest.raises(TimeoutError):
            desk_session.wait_approved(timeout=0.5)
        _approve(coordinator, desk_session.run_id)
        run = desk_session.wait_approved(timeout=30)
        assert run.status == "RUNNING"

        png = desk_session.screenshot()
        image = Image.open(io.BytesIO(png))
        assert image.size == (1280, 800)
        assert image.convert("RGB").getpixel(_center(MARKER)) == (255, 0, 0)
        desk_session.left_click(*_center(FIELD))
        desk_session.type(TYPED)
        desk_session.key("Return")
        wait_until(lambda: form.snapshot()[0] == [TYPED], timeout=20)
        assert desk_session.cursor_position() == _center(FIELD)
        with pytest.raises(ActionRefusedError) as out_of_scope:
            desk_session.right_click(10, 10)
        assert out_of_scope.value.reason == "out_of_scope"
        ended = desk_session.close()
        assert ended.status == "CANCELLED"
        assert desk_session.close().status == "CANCELLED"  # twice is harmless


def test_a_denied_request_ends_the_wait(
    coordinator: CoordinatorProcess, desk: WorkerProcess, form: DesktopSite, owner: Path
) -> None:
    with deskfleet.Client.connect(coordinator.address, token_file=str(owner)) as fleet:
        session = fleet.request_desktop(desk.worker_id, actions=["screenshot"], max_actions=3)
        pending = [
            a
            for a in coordinator.cli_json("approvals", "list")["approvals"]
            if a["runId"] == session.run_id
        ]
        assert pending[0]["requested"]["maxActions"] == 3
        coordinator.cli_json("approvals", "deny", pending[0]["id"], "--reason", "not today")
        with pytest.raises(ApprovalDeniedError, match="not today"):
            session.wait_approved(timeout=30)


async def test_the_quickstart_example_runs_as_written(
    coordinator: CoordinatorProcess,
    desk: WorkerProcess,
    site: str,
    owner: Path,
    form: DesktopSite,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/examples/client_quickstart.py, the README's example, against the real parts; a
    person (the admin's CLI, on a thread) approves its desktop request."""
    from docs.examples.client_quickstart import main

    monkeypatch.setenv("DESKFLEET_COORDINATOR", coordinator.address)
    monkeypatch.setenv("DESKFLEET_TOKEN_FILE", str(owner))

    def approve_when_asked() -> None:
        def mine() -> list[dict[str, str]]:
            listed = coordinator.cli_json("approvals", "list")["approvals"]
            return [a for a in listed if a["workerId"] == desk.worker_id]

        [pending] = wait_until(mine, timeout=60)
        coordinator.cli_json("approvals", "approve", pending["id"])

    approver = asyncio.get_running_loop().run_in_executor(None, approve_when_asked)
    code = await main(
        "when was the north light first lit", f"{site}/varn/north-light.html", "client-desk"
    )
    await approver
    out = capsys.readouterr().out
    assert code == 0, out
    assert "north-light.html" in out and "SUCCEEDED completed" in out
    assert "screenshot: " in out


def test_the_cli_requests_by_name_zooms_and_checks_out_before_acting(
    coordinator: CoordinatorProcess, desk: WorkerProcess, form: DesktopSite, tmp_path: Path
) -> None:
    """`desktop request` and `desktop act` go through the client library: a worker's name
    is enough, zoom writes its region, and an --out that cannot be written is refused before
    the action runs (nothing happens on the desktop, nothing is journaled)."""
    run = coordinator.cli_json(
        "desktop", "request", "--worker", "client-desk", "--action", "zoom", "--action", "type"
    )
    _approve(coordinator, run["id"])
    out = tmp_path / "zoom.png"
    x, y, w, h = MARKER
    done = coordinator.cli(
        "desktop", "act", run["id"], "zoom", "--region", f"{x},{y},{x + w},{y + h}",
        "--out", str(out), json_out=True,
    )  # fmt: skip
    assert '"succeeded"' in done.stdout
    image = Image.open(io.BytesIO(out.read_bytes()))
    assert image.size == (w, h) and image.convert("RGB").getpixel((5, 5)) == (255, 0, 0)

    before = len(coordinator.cli_json("runs", "show", run["id"])["actions"])
    missing = coordinator.cli(
        "desktop", "act", run["id"], "zoom", "--region", "0,0,10,10",
        "--out", str(tmp_path / "no" / "such" / "x.png"), check=False,
    )  # fmt: skip
    assert missing.returncode != 0
    assert missing.stderr.strip().startswith("deskfleet: --out ")
    assert "no directory" in missing.stderr and "Traceback" not in missing.stderr
    assert len(coordinator.cli_json("runs", "show", run["id"])["actions"]) == before
    bad = coordinator.cli("desktop", "act", run["id"], "zoom", "--region", "a,b", check=False)
    assert "expected X0,Y0,X1,Y1" in bad.stderr
