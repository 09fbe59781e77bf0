"""The framework adapters (`deskfleet.integrations`) driving a real desktop: the Anthropic SDK's
tool runner with `anthropic.FleetComputer`, and the OpenAI Agents SDK's `Runner` with
`ComputerTool(computer=openai_agents.FleetComputer(...))`, against a real coordinator and a
real worker on a real X display (Xvfb) with a Chromium window showing a form whose server
records what arrives.

The remote model services are the one mock: a stand-in of the Messages API and one of the
Responses API on loopback (tests/harness/model_standins.py) answer the public wire format from
a script and record each request. Everything else is the real thing, the SDKs included: their
runners, their retries (a 429 first), their parsing.

One coordinator and one worker for the module; each test makes its own runs and ends them.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import io
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

import deskfleet
from deskfleet.integrations.anthropic import MEMBERS
from shared.gen.deskfleet.v1 import runs_pb2, runs_pb2_grpc
from tests.harness import CoordinatorProcess, WorkerProcess, Xvfb, wait_until
from tests.harness.desktop_goals import new_owner
from tests.harness.model_standins import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    ModelStandIn,
    computer_call,
    computer_outputs,
    member,
    message,
    rate_limited,
    result_text,
    said,
    tool_results,
)
from tests.harness.sites import FIELD, DesktopSite

ROOT = Path(__file__).resolve().parents[3]
TYPED = "Grüße vom Agenten \u2014 ok"
# What the person grants: fewer actions than the examples ask for, so what the model is
# offered can only have come from the grant.
GRANTED = ("screenshot", "left_click", "type", "key")


@pytest.fixture(scope="module")
def worker_browser() -> bool:
    return False  # the desktop only: no headless Chromium to start


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture(scope="module")
def desk(module_workers: Callable[..., WorkerProcess], xvfb: Xvfb) -> WorkerProcess:
    worker = module_workers("agent-desk", display_env=xvfb.env)
    row = worker.wait_online()
    assert "computer_use" in {c["name"] for c in row["capabilities"] if c["available"]}
    return worker


@pytest.fixture
def owner(coordinator: CoordinatorProcess, request: pytest.FixtureRequest) -> Path:
    return new_owner(coordinator, f"agent-{request.node.name[5:35]}")


@pytest.fixture
def form(
    window: Callable[[], None], desktop_site: DesktopSite, coordinator: CoordinatorProcess
) -> Iterator[DesktopSite]:
    window()
    desktop_site.reset()
    yield desktop_site
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


@pytest.fixture
def fleet_env(
    coordinator: CoordinatorProcess, owner: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The examples find the coordinator as the CLI does: the environment."""
    monkeypatch.setenv("DESKFLEET_COORDINATOR", coordinator.address)
    monkeypatch.setenv("DESKFLEET_TOKEN_FILE", str(owner))


@pytest.fixture(scope="module")
def no_tracing() -> None:
    # The Agents SDK exports traces to api.openai.com by default; a test process never does.
    import agents

    agents.set_tracing_disabled(True)


def _center(box: tuple[int, int, int, int], scale: float = 1.0) -> list[int]:
    x, y, w, h = box
    return [int((x + w // 2) * scale), int((y + h // 2) * scale)]


def _approve(
    coordinator: CoordinatorProcess, worker_id: str, actions: tuple[str, ...], *narrowing: str
) -> dict[str, object]:
    """A person approving the request pending for the worker, with fewer actions."""

    def pending() -> list[dict[str, str]]:
        listed = coordinator.cli_json("approvals", "list")["approvals"]
        return [a for a in listed if a["workerId"] == worker_id]

    [asked] = wait_until(pending, timeout=60)
    flags = [part for action in actions for part in ("--action", action)]
    approved: dict[str, object] = coordinator.cli_json(
        "approvals", "approve", asked["id"], *flags, *narrowing
    )
    return approved


def _approver(
    coordinator: CoordinatorProcess, worker_id: str, *narrowing: str
) -> asyncio.Future[dict[str, object]]:
    """A person answering, on a thread, while the example waits for the approval."""
    loop = asyncio.get_running_loop()
    return loop.run_in_executor(None, _approve, coordinator, worker_id, GRANTED, *narrowing)


def _image(data: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(data)))


# ------------------------------------------------------------------------------ Anthropic


async def test_the_anthropic_example_fills_in_the_form(
    coordinator: CoordinatorProcess,
    desk: WorkerProcess,
    form: DesktopSite,
    fleet_env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/examples/anthropic_agent.py, as the README shows it: the tool runner calls the
    members (a click, typing, a key), the form's server gets the text, and the model was
    offered only what the person granted."""
    from docs.examples import anthropic_agent

    script = [
        rate_limited("anthropic"),  # retried by the SDK, after the 1 ms it is told to wait
        message(
            member("left_click", coordinate=_center(FIELD)),
            member("type", text=TYPED),
            member("key", text="Return"),
            text="I will fill in the form.",
        ),
        message(text="The form is sent."),
    ]
    with ModelStandIn(script) as model:
        monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", model.url)
        approver = _approver(coordinator, desk.worker_id)
        answer = await anthropic_agent.main("agent-desk", "Type the greeting and send it")
        await approver

    assert answer == "The form is sent."
    wait_until(lambda: form.snapshot()[0] == [TYPED], timeout=20)
    rejected, first, second = model.requests
    assert rejected.body == first.body, "the 429 was asked again, the same request"
    assert first.path.startswith("/v1/messages")
    [toolset] = first.body["tools"]
    assert toolset["type"] == "computer_toolset_20260801"
    disabled = {name for name, config in toolset["configs"].items() if config == {"enabled": False}}
    assert disabled == set(MEMBERS) - set(GRANTED)
    results = tool_results(second)
    assert len(results) == 3
    assert not any(r.get("is_error") for r in results), results
    assert {r.get("toolset_name") for r in results} == {"computer"}


async def test_refusals_and_the_kill_switch_reach_claude_as_tool_errors(
    coordinator: CoordinatorProcess, desk: WorkerProcess, form: DesktopSite, owner: Path
) -> None:
    """A member the grant leaves out is withheld and refused by the SDK; a click outside the
    approved region, one with keys held, and one after a kill switch are refused by the fleet;
    each is an `is_error` tool result the model reads, and the runner goes on to its end. The
    toolset's image limit is set below the display's 1280x800 here: the model sees 1024x640,
    and its points land where it saw them."""
    from anthropic import AsyncAnthropic

    from deskfleet.integrations.anthropic import FleetComputer

    scale = 0.8  # 1280x800 -> 1024x640
    fleet = await deskfleet.AsyncClient.connect(coordinator.address, token_file=str(owner))
    async with fleet:
        session = await fleet.request_desktop(
            desk.worker_id, actions=[*GRANTED, "right_click"], reason="refusals"
        )
        approving = _approver(coordinator, desk.worker_id, "--region", "1280x600+0+0")
        await session.wait_approved(timeout=60)
        await approving
        assert session.approved_actions == GRANTED
        assert session.grant is not None and session.grant.region == (0, 0, 1280, 600)
        computer = FleetComputer(session, max_long_edge=1024)
        kill: list[str] = []

        def engage() -> None:
            engaged = coordinator.cli_json(
                "kill", "engage", "--run", session.run_id, "--reason", "the agent must stop"
            )
            kill.append(str(engaged["id"]))

        script = [
            message(member("right_click", coordinate=[10, 10])),
            message(member("screenshot")),
            message(
                member("left_click", coordinate=_center(FIELD, scale)),
                member("type", text="scaled"),
                member("key", text="Return"),
            ),
            message(member("left_click", coordinate=[8, 632])),  # real (10, 790)
            message(member("left_click", coordinate=_center(FIELD, scale), text="shift")),
            message(member("left_click", coordinate=_center(FIELD, scale))),
            message(text="I stopped."),
        ]
        # Request 6 answers turn 5; the switch is engaged before turn 6 is sent.
        with ModelStandIn(script, before={6: engage}) as model:
            async with AsyncAnthropic(api_key=ANTHROPIC_KEY, base_url=model.url) as claude:
                runner = claude.beta.messages.tool_runner(
                    model="claude-sonnet-5-5",
                    max_tokens=1024,
                    tools=[computer],
                    messages=[{"role": "user", "content": "try things"}],
                )
                final = await runner.until_done()
        try:
            assert [b.text for b in final.content if b.type == "text"] == ["I stopped."]
            answers = [tool_results(r) for r in model.requests[1:]]
            assert [len(a) for a in answers] == [1, 1, 3, 1, 1, 1]

            [withheld] = answers[0]
            assert withheld["is_error"] and "not permitted" in result_text(withheld)

            [shot] = answers[1]
            assert not shot.get("is_error")
            [image] = [c for c in shot["content"] if c["type"] == "image"]
            assert _image(image["source"]["data"]).size == (1024, 640)

            assert not any(r.get("is_error") for r in answers[2])
            wait_until(lambda: form.snapshot()[0] == ["scaled"], timeout=20)
            clicks = [e for e in form.snapshot()[1] if e["type"] == "click"]
            fx, fy = _center(FIELD)
            assert any(abs(e["x"] - fx) <= 2 and abs(e["y"] - fy) <= 2 for e in clicks), clicks

            [outside] = answers[3]
            assert outside["is_error"] and "outside_region" in result_text(outside)
            [held] = answers[4]
            assert held["is_error"] and "cannot hold keys" in result_text(held)
            [killed] = answers[5]
            assert killed["is_error"] and "kill switch" in result_text(killed).lower()
            assert "kill_switch" in result_text(killed) or "reapproval" in result_text(killed)
        finally:
            for kill_id in kill:
                coordinator.cli("kill", "release", "--id", kill_id, "--reason", "done")
            await session.close()


# ------------------------------------------------------------------------ OpenAI Agents


async def test_the_openai_agents_example_fills_in_the_form(
    coordinator: CoordinatorProcess,
    desk: WorkerProcess,
    form: DesktopSite,
    fleet_env: None,
    no_tracing: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/examples/openai_agent.py, as the README shows it: one batched computer call (a
    click, typing, Enter), answered by a screenshot of the real screen."""
    from docs.examples import openai_agent

    script = [
        rate_limited("openai"),
        computer_call(
            {"type": "click", "button": "left", "x": _center(FIELD)[0], "y": _center(FIELD)[1]},
            {"type": "type", "text": TYPED},
            {"type": "keypress", "keys": ["ENTER"]},
        ),
        said("The form is sent."),
    ]
    with ModelStandIn(script) as model:
        monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", f"{model.url}/v1")
        approver = _approver(coordinator, desk.worker_id)
        answer = await openai_agent.main("agent-desk", "Type the greeting and send it")
        await approver

    assert answer == "The form is sent."
    wait_until(lambda: form.snapshot()[0] == [TYPED], timeout=20)
    rejected, first, second = model.requests
    assert rejected.body == first.body, "the 429 was asked again, the same request"
    assert first.path == "/v1/responses"
    assert {"type": "computer"} in first.body["tools"]
    [output] = computer_outputs(second)
    url = output["output"]["image_url"]
    assert url.startswith("data:image/png;base64,")
    assert _image(url.split(",", 1)[1]).size == (1280, 800)  # the screen, no note under it


async def test_refusals_reach_the_agents_sdk_model_under_its_screenshot(
    coordinator: CoordinatorProcess,
    desk: WorkerProcess,
    form: DesktopSite,
    owner: Path,
    no_tracing: None,
) -> None:
    """A computer method that raises ends the Agents SDK's run, and a computer call's output
    is a screenshot only: a refused action (here out of scope, then keys held) is not done,
    nor is the rest of its batch, and the screenshot answering it says so in a strip below
    the screen. The run goes on to its end."""
    from agents import Agent, ComputerTool, Runner
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    from deskfleet.integrations.openai_agents import FleetComputer

    fleet = await deskfleet.AsyncClient.connect(coordinator.address, token_file=str(owner))
    async with fleet:
        session = await fleet.request_desktop(desk.worker_id, actions=[*GRANTED, "right_click"])
        approving = _approver(coordinator, desk.worker_id)
        await session.wait_approved(timeout=60)
        await approving
        computer = FleetComputer(session)
        fx, fy = _center(FIELD)
        script = [
            computer_call(
                {"type": "click", "button": "right", "x": fx, "y": fy},
                {"type": "type", "text": "never typed"},
            ),
            computer_call({"type": "click", "button": "left", "x": fx, "y": fy, "keys": ["SHIFT"]}),
            said("Stopped."),
        ]
        with ModelStandIn(script) as model:
            client = AsyncOpenAI(api_key=OPENAI_KEY, base_url=f"{model.url}/v1")
            agent = Agent(
                name="desk",
                model=OpenAIResponsesModel(model="gpt-5.5", openai_client=client),
                tools=[ComputerTool(computer=computer)],
            )
            result = await Runner.run(agent, "try things", max_turns=5)
            await client.close()
        await session.close()

    assert result.final_output == "Stopped."
    out_of_scope, keys_held = computer.refusals
    assert out_of_scope.startswith("right_click was refused") and "out_of_scope" in out_of_scope
    assert keys_held.startswith("left_click with 'SHIFT' held was refused")
    submitted, events = form.snapshot()
    assert submitted == [] and not [e for e in events if e["type"] in ("click", "contextmenu")]
    for request in model.requests[1:]:
        output = computer_outputs(request)[-1]  # the whole history is sent each turn
        image = _image(output["output"]["image_url"].split(",", 1)[1])
        assert image.width == 1280 and image.height > 800  # the screen, and the note below it
        # The strip is the note's colour; the screen above it is untouched.
        assert image.convert("RGB").getpixel((2, image.height - 2)) == (255, 240, 160)


def test_the_openai_adapter_names_its_extra_without_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)
    monkeypatch.delitem(sys.modules, "agents.computer", raising=False)
    monkeypatch.delitem(sys.modules, "deskfleet.integrations.openai_agents", raising=False)
    with pytest.raises(ImportError) as missing:
        importlib.import_module("deskfleet.integrations.openai_agents")
    assert str(missing.value) == (
        "deskfleet.integrations.openai_agents needs the OpenAI Agents SDK:"
        " pip install 'deskfleet[openai-agents]'"
    )


def test_the_readme_shows_the_examples_the_tests_run() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("anthropic_agent.py", "openai_agent.py"):
        source = (ROOT / "docs/examples" / name).read_text()
        code = source.split('"""\n', 1)[1].strip()  # after the module docstring
        assert code in readme, f"README.md does not show docs/examples/{name} as it is"
