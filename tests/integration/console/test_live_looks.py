"""The console's live streams share their looks at a real coordinator (B9): the chrome
(pending approvals, the fleet kill switch) once per session whatever runs its streams watch,
a run's status once per run; a stream's first look stays its own. The calls are counted where
the console makes them (`ConsoleClient.call`), on a real coordinator's RPCs."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coordinator.console.events import LivePages
from coordinator.console.pages import ConsoleSettings
from shared.config import ClientConfig
from tests.harness import CoordinatorProcess, submit, write_plan

INTERVAL = 1.0


def _counted(pages: LivePages) -> Counter[str]:
    """Every call the console makes to the coordinator, by method, counted as it is made."""
    rpc = pages.rpc
    names = {
        id(rpc.approvals.ListApprovals): "ListApprovals",
        id(rpc.kills.Status): "KillStatus",
        id(rpc.runs.GetRun): "GetRun",
    }
    calls: Counter[str] = Counter()
    real = rpc.call

    async def call(token: str, method: Callable[..., Awaitable[Any]], request: Any) -> Any:
        calls[names.get(id(method), repr(method))] += 1
        return await real(token, method, request)

    rpc.call = call  # type: ignore[method-assign]
    return calls


async def test_streams_of_a_session_on_different_runs_share_the_chrome(
    module_coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    coordinator = module_coordinator
    token = coordinator.cli_json("users", "create", "looker")["token"]
    (tmp_path / "looker.token").write_text(token)
    plan = write_plan(tmp_path / "p.json", [{"kind": "diag.echo", "route": {"worker": "none"}}])
    run_ids = [
        submit(coordinator, plan, token_file=tmp_path / "looker.token")["id"] for _ in range(4)
    ]
    pages = LivePages(
        ConsoleSettings(ClientConfig(coordinator.address, None, None), live_interval=INTERVAL)
    )
    try:
        calls = _counted(pages)
        one = pages.sessions.create(token=token, user_id="usr_x", name="looker", role="owner")
        other = pages.sessions.create(token=token, user_id="usr_x", name="looker", role="owner")
        # Four tabs of one session, each on its run, as their streams look: the first look
        # of each is its own (the page it serves was just rendered).
        first = await asyncio.gather(*(pages.looks.get(one, r, fresh=True) for r in run_ids))
        assert [doc["run"]["status"] for doc in first] == ["WAITING_FOR_ENVIRONMENT"] * 4
        assert all(doc["pending"] == 0 and doc["fleet_stopped"] is False for doc in first)
        assert calls == {"ListApprovals": 4, "KillStatus": 4, "GetRun": 4}
        for _ in range(3):  # then every interval: one chrome for the four, a status per run
            calls.clear()
            await asyncio.sleep(INTERVAL)
            docs = await asyncio.gather(*(pages.looks.get(one, r) for r in run_ids))
            assert [doc["run"]["status"] for doc in docs] == ["WAITING_FOR_ENVIRONMENT"] * 4
            # Each stream used to make a chrome look of its own: 4 of each.
            assert calls == {"ListApprovals": 1, "KillStatus": 1, "GetRun": 4}, calls
        # Another session of the same user looks for itself.
        calls.clear()
        await pages.looks.get(other, run_ids[0])
        assert calls == {"ListApprovals": 1, "KillStatus": 1, "GetRun": 1}
    finally:
        await pages.shutdown()
