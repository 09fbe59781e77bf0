"""The console shows people by name: the owners on the runs, run and approvals pages, and who
engaged a kill switch on the kill page, each with the user's id as the cell's hover title (the
pages showed `usr_01m8…`). A real coordinator and console; pages read over plain HTTP."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ConsoleProcess, CoordinatorProcess, WorkerProcess, submit, write_plan
from tests.integration.console.test_console_attacks import Browser


@pytest.fixture(scope="module")
def console(module_coordinator: CoordinatorProcess) -> Iterator[ConsoleProcess]:
    proc = ConsoleProcess(module_coordinator).start()
    yield proc
    proc.stop()


def named_cell(page: str, user_id: str, name: str) -> bool:
    """Whether the page shows `name` in an element whose hover title is the user's id."""
    return f'title="{user_id}">{html.escape(name)}<' in page


def test_owners_and_engagers_are_names_with_the_id_on_hover(
    module_coordinator: CoordinatorProcess, console: ConsoleProcess, tmp_path: Path
) -> None:
    coordinator = module_coordinator
    owner = coordinator.cli_json("users", "create", "names-carol")
    token = tmp_path / "carol.token"
    token.write_text(owner["token"])
    admin = next(u for u in coordinator.cli_json("users", "list") if u["role"] == "admin")
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "v"}, "idempotent": True}],
        title="names: a run of carol's",
    )
    run = submit(coordinator, plan, token_file=token)
    worker = WorkerProcess(coordinator, "names-console-desk", home=tmp_path, browser=False)
    assert worker.enroll().returncode == 0
    requested = coordinator.cli(
        "desktop", "request", "--worker", "names-console-desk", "--action", "screenshot",
        "--reason", "names on the approvals page", "--json", token_file=token, check=False,
    )  # fmt: skip
    browser = Browser(console.url)
    assert browser.signin(coordinator.admin_token_file.read_text().strip()).status == 303
    if requested.returncode == 0:  # a worker that never connected may be refused a desktop
        approvals = browser.get("/approvals").body
        assert named_cell(approvals, owner["id"], "names-carol"), approvals
    # Engaged after: the fleet's switch takes back the approvals it covers.
    kill = coordinator.cli_json("kill", "engage", "--reason", "names on the kill page")
    try:
        runs = browser.get("/runs?owner=%2A&limit=1000").body
        assert named_cell(runs, owner["id"], "names-carol"), runs
        run_page = browser.get(f"/runs?owner=%2A&q={run['id']}").body
        assert named_cell(run_page, owner["id"], "names-carol")
        kills = browser.get("/kill").body
        assert named_cell(kills, admin["id"], admin["name"]), kills
        # The owner's own run page names its owner the same way.
        mine = Browser(console.url)
        assert mine.signin(owner["token"], nxt=f"/runs/{run['id']}").status == 303
        page = mine.get(f"/runs/{run['id']}").body
        assert named_cell(page, owner["id"], "names-carol"), page
    finally:
        coordinator.cli("kill", "release", "--id", kill["id"])
