"""`deskfleet mcp` driven by the MCP SDK's own stdio client, against a real coordinator, real
workers (headless, and one on Xvfb) and the local web site."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    CallToolResult,
    ImageContent,
    TextContent,
    TextResourceContents,
)
from PIL import Image

from scripts.local_site.server import FACTS
from tests.harness import BIN, CoordinatorProcess, WorkerProcess, Xvfb, base_env, submit, write_plan

pytestmark = pytest.mark.slow

TOOLS = {
    "fleet_status",
    "research",
    "desktop_request",
    "desktop_act",
    "journal_search",
    "journal_read",
    "run_status",
    "submit_plan",
    "cancel_run",
    "guide_run",
    "list_questions",
    "answer_question",
    "guide_approval",
    "revise_run",
    "discuss_approval",
    "advise_approval",
}


@asynccontextmanager
async def mcp_session(
    coordinator: CoordinatorProcess, token_file: Path | None = None
) -> AsyncIterator[ClientSession]:
    """`deskfleet mcp` as an agent application starts it: a subprocess on stdio (with the
    admin's credential unless another is given)."""
    env = base_env(coordinator.workdir)
    env["DESKFLEET_COORDINATOR"] = coordinator.address
    env["DESKFLEET_TOKEN_FILE"] = str(token_file or coordinator.admin_token_file)
    server = StdioServerParameters(command=str(BIN / "deskfleet"), args=["mcp"], env=env)
    with (coordinator.workdir / "mcp.log").open("w") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write, read_timeout_seconds=120) as session,
        ):
            await session.initialize()
            yield session


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    """One coordinator for the module: each test finds its own runs by their ids."""
    return module_coordinator


@pytest.fixture(scope="module")
def headless(module_workers: Callable[..., WorkerProcess]) -> WorkerProcess:
    """The module's browsing worker, started once for the tests that run plans on it."""
    return module_workers("w")


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def call_json(session: ClientSession, tool: str, **arguments: Any) -> Any:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result))


async def test_tools_fleet_status_and_errors(
    coordinator: CoordinatorProcess, headless: WorkerProcess
) -> None:
    worker = headless
    worker.wait_online()
    async with mcp_session(coordinator) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        act = tools["desktop_act"].input_schema
        assert act["required"] == ["run_id", "action"]
        assert {"x", "y", "text", "key", "region", "space_width", "space_height"} <= set(
            act["properties"]
        )
        assert "screenshot" in json.dumps(act["properties"]["action"])
        assert tools["research"].input_schema["required"] == ["query"]
        assert set(tools["research"].input_schema["properties"]) == {
            "query",
            "urls",
            "max_sources",
            "wait",
            "search",
        }
        assert tools["desktop_request"].input_schema["required"] == ["worker", "actions"]
        assert tools["journal_read"].input_schema["required"] == ["run_id", "seq"]
        assert tools["fleet_status"].input_schema.get("required", []) == []

        assert tools["run_status"].annotations is not None
        assert tools["run_status"].annotations.read_only_hint
        assert tools["cancel_run"].annotations is not None
        assert tools["cancel_run"].annotations.destructive_hint
        assert all(t.output_schema is not None for t in tools.values())

        status = await call_json(session, "fleet_status")
        [row] = [w for w in status["workers"] if w["id"] == worker.worker_id]
        assert row["online"] and status["headlessOnline"] >= 1
        structured = (await session.call_tool("fleet_status", {})).structured_content
        assert structured is not None and structured["headlessOnline"] == status["headlessOnline"]

        # A wrongly typed argument: one sentence naming it, not the validator's report.
        wrong = await session.call_tool("journal_read", {"run_id": "x", "seq": "first"})
        assert wrong.is_error and text_of(wrong).startswith("seq: should be a valid integer")
        assert "\n" not in text_of(wrong) and "validation error" not in text_of(wrong)

        for tool, arguments in (
            ("journal_search", {"run_id": "nope", "text": "x"}),
            ("run_status", {"run_id": "nope"}),
            ("cancel_run", {"run_id": "nope"}),
        ):
            result = await session.call_tool(tool, arguments)
            assert result.is_error
            assert "no run" in text_of(result) and "Traceback" not in text_of(result)


async def test_research_returns_the_evidence(
    coordinator: CoordinatorProcess, headless: WorkerProcess, site: str
) -> None:
    headless.wait_online()
    url = f"{site}/varn/keepers.html"
    heard: list[tuple[float, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, message))

    async with mcp_session(coordinator) as session:
        result = await session.call_tool(
            "research",
            {"query": "keeper 1962", "urls": [url, f"{site}/varn/lens.html"]},
            progress_callback=progress,
        )
        assert not result.is_error, text_of(result)
        doc = json.loads(text_of(result))
        assert doc["status"] == "SUCCEEDED", doc
        # While it waited, the tool told the caller where the run was.
        assert heard and heard[0][1] is not None and doc["runId"] in heard[0][1], heard
        assert [n for n, _ in heard] == sorted({n for n, _ in heard})
        evidence = {s["url"]: s["excerpts"] for s in doc["report"]["sources"] if s["evidence"]}
        assert evidence == {url: [FACTS["/varn/keepers.html"] + "."]}
        # The same report as structured content, with its passages' headings, scores, links.
        raw = await session.call_tool(
            "research", {"query": "keeper 1962", "urls": [url, f"{site}/varn/lens.html"]}
        )
        assert raw.structured_content is not None
        [best] = raw.structured_content["report"]["passages"]
        assert best["text"] == FACTS["/varn/keepers.html"] + "."
        assert best["link"].startswith(url + "#:~:text=") and best["score"] > 0
        run = await call_json(session, "run_status", run_id=doc["runId"])
        assert run["id"] == doc["runId"] and run["report"] == doc["report"]
        # Where the run spent its time, without every attempt a second time.
        assert set(run["timeline"]) == {"states", "retries", "stopReason", "wallSeconds"}
        assert run["timeline"]["stopReason"] == run["stopReason"]
        assert [s["state"] for s in run["timeline"]["states"]][-1] == "SUCCEEDED"


async def test_desktop_request_approve_act_and_recall(
    coordinator: CoordinatorProcess, workers: Callable[..., WorkerProcess], xvfb: Xvfb
) -> None:
    desk = workers("desk", display_env=xvfb.env)
    row = desk.wait_online()
    assert {c["name"]: c["available"] for c in row["capabilities"]}["computer_use"]
    async with mcp_session(coordinator) as session:
        asked = await call_json(
            session,
            "desktop_request",
            worker="desk",  # by name
            actions=["screenshot", "left_click", "zoom"],
            reason="look at the screen",
        )
        run_id, approval = asked["runId"], asked["approval"]
        assert approval["status"] == "pending" and approval["runId"] == run_id
        assert approval["requested"]["actions"] == ["screenshot", "left_click", "zoom"]

        early = await session.call_tool("desktop_act", {"run_id": run_id, "action": "screenshot"})
        assert early.is_error and text_of(early).startswith("not_approved"), text_of(early)

        coordinator.cli(
            "approvals", "approve", approval["id"], "--action", "screenshot", "--action", "zoom"
        )
        shot = await session.call_tool("desktop_act", {"run_id": run_id, "action": "screenshot"})
        assert not shot.is_error, text_of(shot)
        receipt = json.loads(text_of(shot))
        assert receipt["status"] == "succeeded" and receipt["receiptId"]
        [image] = [c for c in shot.content if isinstance(c, ImageContent)]
        assert image.mime_type == "image/png"
        picture = Image.open(io.BytesIO(base64.b64decode(image.data)))
        assert (picture.format, picture.size) == ("PNG", xvfb.size)

        zoomed = await session.call_tool(
            "desktop_act", {"run_id": run_id, "action": "zoom", "region": [10, 20, 30, 30]}
        )
        assert not zoomed.is_error, text_of(zoomed)
        [part] = [c for c in zoomed.content if isinstance(c, ImageContent)]
        assert Image.open(io.BytesIO(base64.b64decode(part.data))).size == (20, 10)

        narrowed = await session.call_tool(
            "desktop_act", {"run_id": run_id, "action": "left_click", "x": 5, "y": 5}
        )
        assert narrowed.is_error and text_of(narrowed).startswith("out_of_scope")

        found = await call_json(session, "journal_search", run_id=run_id, text=receipt["receiptId"])
        assert found["matches"], found
        seq = found["matches"][0]["seq"]
        entry = await call_json(session, "journal_read", run_id=run_id, seq=seq)
        assert entry["runId"] == run_id and entry["seq"] == seq
        assert receipt["receiptId"] in entry["text"]


async def test_out_of_range_numbers_and_nul_are_one_sentence_tool_errors(
    coordinator: CoordinatorProcess,
) -> None:
    worker = WorkerProcess(coordinator, "desk")
    assert worker.enroll().returncode == 0
    run_id = coordinator.cli_json(
        "desktop", "request", "--worker", worker.worker_id, "--action=screenshot"
    )["id"]
    cases = [
        ("journal_read", {"run_id": run_id, "seq": 2**70}, "seq: a whole number from 1 to"),
        ("journal_read", {"run_id": run_id, "seq": 1, "offset": -1}, "offset: a whole number"),
        ("journal_read", {"run_id": run_id, "seq": 0}, "seq: a whole number from 1 to"),
        ("desktop_request",
         {"worker": worker.worker_id, "actions": ["screenshot"], "max_actions": 2**62},
         "max_actions: a whole number from 1 to 2147483647"),
        ("desktop_request",
         {"worker": worker.worker_id, "actions": ["screenshot"], "ttl_seconds": 1e300},
         "ttl_seconds: a number of seconds above 0"),
        ("desktop_request",  # in range for the field, past what the coordinator allows
         {"worker": worker.worker_id, "actions": ["screenshot"], "ttl_seconds": 1e6},
         "scope.ttl: between 0 and 86400 seconds"),
        ("research", {"query": "x", "max_sources": 2**40}, "max_sources: a whole number"),
        ("desktop_act", {"run_id": run_id, "action": "mouse_move", "x": 2**70, "y": 1},
         "x: a whole number"),
        ("desktop_act", {"run_id": run_id, "action": "wait", "seconds": 1e300},
         "seconds: from 0 to"),
        ("journal_search", {"run_id": run_id, "text": "a\x00b"},
         "text: must not contain NUL characters"),
    ]  # fmt: skip
    async with mcp_session(coordinator) as session:
        for tool, arguments, expected in cases:
            result = await session.call_tool(tool, arguments)
            text = text_of(result)
            assert result.is_error, (tool, arguments, text)
            assert text.startswith(expected), (tool, text)
            assert "\n" not in text and "Error executing tool" not in text, text
        ok = await call_json(session, "journal_read", run_id=run_id, seq=1)
        assert ok["seq"] == 1
    log = (coordinator.workdir / "mcp.log").read_text()
    assert "Traceback" not in log, log


async def test_submit_plan_cancel_run_and_runs_as_resources(
    coordinator: CoordinatorProcess, headless: WorkerProcess
) -> None:
    headless.wait_online()
    async with mcp_session(coordinator) as session:
        templates = (await session.list_resource_templates()).resource_templates
        assert {t.uri_template for t in templates} == {
            "deskfleet://runs/{run_id}",
            "deskfleet://runs/{run_id}/journal",
        }
        heard: list[float] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            heard.append(done)

        plan = {"title": "echo", "actions": [{"kind": "diag.echo", "args": {"value": "hi"}}]}
        done = await session.call_tool("submit_plan", {"plan": plan}, progress_callback=progress)
        assert not done.is_error, text_of(done)
        assert done.structured_content is not None
        assert done.structured_content["status"] == "SUCCEEDED" and heard
        assert json.loads(text_of(done)) == done.structured_content

        # A run that cannot start (no such worker), cancelled; cancelling again changes nothing.
        stuck = {"actions": [{"kind": "diag.echo", "route": {"worker": "nobody"}}]}
        waiting = await call_json(session, "submit_plan", plan=stuck, wait=False)
        run_id = waiting["runId"]
        cancelled = await call_json(session, "cancel_run", run_id=run_id)
        assert cancelled["status"] == "CANCELLED", cancelled
        assert cancelled["stopReason"].startswith("cancelled")
        again = await session.call_tool("cancel_run", {"run_id": run_id})
        assert again.is_error and text_of(again).endswith("is already CANCELLED"), text_of(again)

        run = await session.read_resource(f"deskfleet://runs/{run_id}")
        [content] = run.contents
        assert isinstance(content, TextResourceContents)
        assert content.mime_type == "application/json"
        assert json.loads(content.text)["status"] == "CANCELLED"
        [journal] = (await session.read_resource(f"deskfleet://runs/{run_id}/journal")).contents
        assert isinstance(journal, TextResourceContents)
        events = json.loads(journal.text)["events"]
        assert events[0]["kind"] == "run.submitted"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))

        for uri in ("deskfleet://runs/nope", "deskfleet://runs/nope/journal"):
            with pytest.raises(MCPError) as missing:
                await session.read_resource(uri)
            assert missing.value.error.code == INVALID_PARAMS
            assert missing.value.error.message.startswith("no run"), missing.value.error

        bad = await session.call_tool("submit_plan", {"plan": {"steps": []}})
        assert bad.is_error and text_of(bad) == 'plan: expected {"actions": [...]}'
        loose = {"actions": [{"kind": "diag.echo"}], "limits": {"max_action": 1}}
        bad = await session.call_tool("submit_plan", {"plan": loose})
        assert bad.is_error
        assert text_of(bad) == "limits.max_action: unknown field; did you mean max_actions?"


async def test_an_owners_session_reaches_that_owners_runs_only(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    """The server calls with the caller's credential: another owner's run is as if it did not
    exist, through every tool and resource (held, issue 30)."""
    plan = write_plan(tmp_path / "p.json", [{"kind": "diag.echo", "route": {"worker": "no"}}])
    theirs = submit(coordinator, plan)["id"]  # the admin's, waiting for a worker
    token = tmp_path / "olga.token"
    token.write_text(coordinator.cli_json("users", "create", "olga-mcp")["token"])
    async with mcp_session(coordinator, token) as session:
        for tool, arguments in (
            ("run_status", {"run_id": theirs}),
            ("journal_read", {"run_id": theirs, "seq": 1}),
            ("journal_search", {"run_id": theirs, "text": "echo"}),
            ("cancel_run", {"run_id": theirs}),
            ("desktop_act", {"run_id": theirs, "action": "screenshot"}),
        ):
            result = await session.call_tool(tool, arguments)
            assert result.is_error and text_of(result).startswith("no run"), (tool, result)
        for uri in (f"deskfleet://runs/{theirs}", f"deskfleet://runs/{theirs}/journal"):
            with pytest.raises(MCPError) as missing:
                await session.read_resource(uri)
            assert missing.value.error.message.startswith("no run"), missing.value.error
        stuck = {"actions": [{"kind": "diag.echo", "route": {"worker": "no"}}]}
        mine = (await call_json(session, "submit_plan", plan=stuck, wait=False))["runId"]
    listed = coordinator.cli_json("runs", "list", "--owner", "olga-mcp")["runs"]
    assert [r["id"] for r in listed] == [mine]
    assert coordinator.cli_json("runs", "show", theirs)["status"] == "WAITING_FOR_ENVIRONMENT"
    coordinator.cli("runs", "cancel", theirs)
    coordinator.cli("runs", "cancel", mine, token_file=token)


async def test_an_agent_guides_a_run_and_answers_its_goals_question_over_mcp(
    coordinator: CoordinatorProcess,
) -> None:
    ask = {"name": "ask_human", "arguments": {"question": "which one?", "required": True}}
    model = coordinator.script("mcp-ask.json", [{"tool_calls": [ask]}])
    goal = coordinator.cli_json("goal", "ask over mcp", "--model", model)["id"]
    async with mcp_session(coordinator) as session:

        async def open_questions() -> list[dict[str, Any]]:
            listed = await call_json(session, "list_questions", run_id=goal)
            return list(listed["questions"])

        deadline = time.monotonic() + 30
        while not (asked := await open_questions()):
            assert time.monotonic() < deadline, "no question"
            await asyncio.sleep(0.2)
        answered = await call_json(
            session, "answer_question", question_id=asked[0]["id"], text="the first"
        )
        assert answered["status"] == "answered" and answered["answer"] == "the first"
        stuck = {"actions": [{"kind": "diag.echo", "route": {"worker": "nobody"}}]}
        waiting = await call_json(session, "submit_plan", plan=stuck, wait=False)
        first = await call_json(
            session, "guide_run", run_id=waiting["runId"], text="hold on", message_id="m1"
        )
        again = await call_json(
            session, "guide_run", run_id=waiting["runId"], text="hold on", message_id="m1"
        )
        assert again["repeatedSend"] and again["guidanceId"] == first["guidanceId"]
        posed = await session.call_tool(
            "guide_run", {"run_id": waiting["runId"], "text": "x", "message_id": "answer-q"}
        )
        assert posed.is_error and "the coordinator's own" in text_of(posed)
        await call_json(session, "cancel_run", run_id=waiting["runId"])
        revised = await session.call_tool("revise_run", {"run_id": waiting["runId"], "plan": stuck})
        assert revised.is_error and "only a FAILED or HAND_BACK_TO_HUMAN" in text_of(revised)
