"""The first hour's new surfaces as a hostile owner, worker or browser would try them: worker
names (SQL wildcards, a name that is another worker's id, names too long), enrollment tokens
listed and revoked (never a secret, revoked twice, revoked while workers enroll with it), and
the console's journal pages and runs table with numbers and text nobody should send. One
coordinator and one console for the module; workers are enrolled over the API (no process)."""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from shared.gen.deskfleet.v1 import worker_pb2, worker_pb2_grpc
from tests.harness import ConsoleProcess, CoordinatorProcess, submit, write_plan
from tests.integration.console.test_console_attacks import Browser


@pytest.fixture(scope="module")
def console(module_coordinator: CoordinatorProcess) -> Iterator[ConsoleProcess]:
    proc = ConsoleProcess(module_coordinator).start()
    yield proc
    proc.stop()


def enroll(coordinator: CoordinatorProcess, name: str, token: str | None = None) -> str:
    """A worker enrolled under `name` (the API's Enroll, as `deskfleet-worker enroll` calls it)."""
    channel = coordinator.channel()
    assert channel is not None
    reply = worker_pb2_grpc.WorkerGatewayStub(channel).Enroll(
        worker_pb2.EnrollRequest(token=token or coordinator.create_token(), name=name),
        timeout=30,
    )
    return str(reply.worker_id)


def owner_token(coordinator: CoordinatorProcess, tmp_path: Path, name: str) -> Path:
    made = coordinator.cli_json("users", "create", name)
    path = tmp_path / f"{name}.token"
    path.write_text(made["token"])
    return path


# --- worker names ----------------------------------------------------------------------------


def test_wildcards_in_a_name_are_only_themselves(module_coordinator: CoordinatorProcess) -> None:
    c = module_coordinator
    percent = enroll(c, "rt-desk%")
    enroll(c, "rt-desk_1")
    shown = c.cli_json("workers", "show", "rt-desk%")
    assert shown["id"] == percent
    for pattern in ("rt-desk_", "rt-d%", "%", "_"):
        done = c.cli("workers", "show", pattern, check=False)
        assert done.returncode == 4, (pattern, done.stderr)
        assert done.stderr == (
            f"deskfleet: no worker with id or name {pattern!r} (see `deskfleet workers list`)\n"
        )


def test_a_name_that_is_another_workers_id_does_not_take_its_place(
    module_coordinator: CoordinatorProcess,
) -> None:
    c = module_coordinator
    real = enroll(c, "rt-real-desk")
    impostor = enroll(c, real)  # a worker named with the other's id
    assert c.cli_json("workers", "show", real)["name"] == "rt-real-desk"
    assert c.cli_json("workers", "show", impostor)["name"] == real


def test_a_name_too_long_is_said_to_be_too_long(
    module_coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    c = module_coordinator
    huge = "x" * 100_000
    shown = c.cli("workers", "show", huge, check=False)
    assert shown.returncode == 2
    assert shown.stderr == (
        "deskfleet: id: a worker's id or name is at most 200 characters, not 100000"
        " (see `deskfleet workers list`)\n"
    )
    token = owner_token(c, tmp_path, "rt-long-names")
    asked = c.cli(
        "desktop", "request", "--worker", huge, "--action", "screenshot", "--reason", "r",
        token_file=token, check=False,
    )  # fmt: skip
    assert asked.returncode == 2
    assert asked.stderr == (
        "deskfleet: worker: a worker's id or name is at most 200 characters, not 100000\n"
    )
    blank = c.cli("workers", "show", "   ", check=False)
    assert blank.stderr == (
        "deskfleet: id: a worker's id or name is required (see `deskfleet workers list`)\n"
    )


def test_an_owner_naming_revoked_workers_learns_nothing_of_them(
    module_coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    """Owners list the enrolled fleet, never revoked workers: a name only revoked workers
    have is no worker to them, where the refusal listed the revoked ids (and "worker X is
    revoked" named the one). An admin still sees the candidates."""
    c = module_coordinator
    gone = [enroll(c, "rt-gone"), enroll(c, "rt-gone"), enroll(c, "rt-gone-one")]
    for worker_id in gone:
        c.cli("workers", "revoke", worker_id)
    token = owner_token(c, tmp_path, "rt-revoked-names")
    for name in ("rt-gone", "rt-gone-one"):
        asked = c.cli(
            "desktop", "request", "--worker", name, "--action", "screenshot", "--reason", "r",
            token_file=token, check=False,
        )  # fmt: skip
        assert asked.returncode == 4, asked.stderr
        assert asked.stderr == (
            f"deskfleet: no worker with id or name {name!r} (see `deskfleet workers list`)\n"
        )
    admin = c.cli(
        "desktop", "request", "--worker", "rt-gone", "--action", "screenshot", "--reason", "r",
        check=False,
    )  # fmt: skip
    assert admin.returncode == 2
    assert all(worker_id in admin.stderr for worker_id in gone[:2]), admin.stderr


# --- enrollment tokens -----------------------------------------------------------------------


def test_tokens_list_shows_no_secret_and_revoking_twice_is_one_revocation(
    module_coordinator: CoordinatorProcess,
) -> None:
    c = module_coordinator
    made = c.cli_json("tokens", "create", "--uses", "3")
    listed = {t["id"]: t for t in c.cli_json("tokens", "list")}
    assert listed[made["id"]] == {
        "id": made["id"],
        "capabilities": [],
        "uses": 3,
        "used": 0,
        "expiresAt": made["expiresAt"],
        "revoked": False,
    }
    everything = c.cli("tokens", "list", json_out=True).stdout + c.cli("tokens", "list").stdout
    assert made["token"] not in everything and "dfe_" not in everything
    first = c.cli("tokens", "revoke", made["id"])
    again = c.cli("tokens", "revoke", made["id"])
    assert first.stdout == again.stdout
    assert first.stdout.startswith(f"enrollment token {made['id']} revoked: ")
    audit = c.cli_json("audit")
    rows = audit if isinstance(audit, list) else audit["entries"]
    revocations = [r for r in rows if r["action"] == "token.revoke" and made["id"] in str(r)]
    assert len(revocations) == 1, revocations
    unknown = c.cli("tokens", "revoke", "enr_01m971w0k67t4q9p7ep37mb7zz", check=False)
    assert unknown.returncode == 4
    assert unknown.stderr == (
        "deskfleet: no enrollment token 'enr_01m971w0k67t4q9p7ep37mb7zz'"
        " (see `deskfleet tokens list`)\n"
    )


def test_a_revocation_racing_enrollments_wins_from_the_moment_it_commits(
    module_coordinator: CoordinatorProcess,
) -> None:
    c = module_coordinator
    made = c.cli_json("tokens", "create", "--uses", "40")
    enrolled: list[str] = []
    refused: list[str] = []
    revoked = threading.Event()
    after_revoke: list[str] = []

    def enroll_many(n: int) -> None:
        for i in range(10):
            try:
                wid = enroll(c, f"rt-race-{n}-{i}", made["token"])
            except grpc.RpcError as exc:
                refused.append(exc.details() or "")
                continue
            enrolled.append(wid)
            if revoked.is_set():
                after_revoke.append(wid)

    threads = [threading.Thread(target=enroll_many, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    c.cli("tokens", "revoke", made["id"])
    revoked.set()
    for t in threads:
        t.join(60)
    assert not after_revoke, after_revoke  # none began after the revocation and got in
    token = next(t for t in c.cli_json("tokens", "list") if t["id"] == made["id"])
    assert token["revoked"] is True
    assert token["used"] == len(enrolled), (token, len(enrolled))
    assert all(f"enrollment token {made['id']} was revoked at " in r for r in refused), refused


def test_numbers_past_what_the_wire_holds_are_one_line(
    module_coordinator: CoordinatorProcess,
) -> None:
    c = module_coordinator
    many = c.cli("tokens", "create", "--uses", str(10**12), check=False)
    assert many.returncode == 2
    assert many.stderr == "deskfleet: uses: must be between 1 and 10000\n"
    for timeout in ("nan", "inf", "1e400", "0", "-1"):
        # Before and after the command alike (the shared options go either side).
        for argv in (
            ("--timeout", timeout, "tokens", "list"),
            ("users", "list", "--timeout", timeout),
        ):
            done = c.cli(*argv, check=False)
            assert done.returncode == 2, (argv, done.stderr)
            assert done.stderr == "deskfleet: --timeout must be a positive number of seconds\n"


def test_a_new_token_never_replaces_the_credential_the_command_signs_in_with(
    module_coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    c = module_coordinator
    mine = tmp_path / "admin.token"  # a copy: the module's other tests keep the original
    mine.write_text(c.admin_token_file.read_text())
    made = c.cli("users", "create", "rt-victim", "--save", str(mine), token_file=mine, check=False)
    assert made.returncode == 2, made.stderr
    assert made.stderr == (
        f"deskfleet: --save {mine}: that is the credential this command signs in with;"
        " rt-victim's token there would replace it: give another FILE\n"
    )
    assert mine.read_text() == c.admin_token_file.read_text()
    assert "rt-victim" not in c.cli("users", "list").stdout  # refused before it was made
    other = owner_token(c, tmp_path, "rt-rotated")
    rotated = c.cli(
        "users", "rotate", "rt-rotated", "--save", str(mine), token_file=mine, check=False
    )  # fmt: skip
    assert rotated.returncode == 2
    assert "rt-rotated's token there would replace it" in rotated.stderr
    assert c.cli("runs", "list", token_file=other).returncode == 0  # its token still works


# --- the console -----------------------------------------------------------------------------


def test_journal_pages_take_any_number_without_an_internal_error(
    module_coordinator: CoordinatorProcess, console: ConsoleProcess, tmp_path: Path
) -> None:
    c = module_coordinator
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "v"}, "idempotent": True}],
        title="red team: journal pages",
    )
    run = submit(c, plan)
    browser = Browser(console.url)
    assert browser.signin(c.admin_token_file.read_text().strip()).status == 303
    for after in ("-5", "abc", "1.5", "1e3", str(2**31 - 1), str(2**31), str(10**30), "1&after=2"):
        page = browser.get(f"/runs/{run['id']}?after={after}")
        assert page.status == 200, (after, page.status, page.body[:300])
        assert "journal" in page.body
    for page_no in ("-1", str(10**30), "x", "2.5", "1&page=2"):
        assert browser.get(f"/runs?page={page_no}").status == 200, page_no
    for hours in ("inf", "1e308", "nan", "-1", "x"):  # more hours than there have been: all
        audit = browser.get(f"/audit?hours={hours}&page={10**30}")
        assert audit.status == 200, (hours, audit.body[:500])


def test_hostile_run_text_is_escaped_and_a_long_word_is_cut(
    module_coordinator: CoordinatorProcess, console: ConsoleProcess, tmp_path: Path
) -> None:
    c = module_coordinator
    word = "W" * 300
    title = f'<script>alert(1)</script> "><img src=x onerror=alert(2)> {word}'
    plan = write_plan(
        tmp_path / "plan.json",
        [{"kind": "diag.echo", "args": {"value": "v"}, "idempotent": True}],
        title=title,
    )
    run = submit(c, plan)
    browser = Browser(console.url)
    assert browser.signin(c.admin_token_file.read_text().strip()).status == 303
    for path in ("/runs", f"/runs/{run['id']}"):
        body = browser.get(path).body
        assert "<script>alert(1)" not in body and "<img src=x" not in body, path
        assert html.escape("<script>alert(1)</script>") in body, path
    listed = browser.get("/runs").body
    assert "W" * 39 + "…" in listed  # the cell shows the word cut ...
    assert re.search(r'title="[^"]*' + word, listed)  # ... and its hover title keeps it whole
    assert word + "<" not in listed.replace("</td>", "")  # never the whole word in a cell


def test_the_favicon_is_served_to_anyone_and_nothing_beside_it(console: ConsoleProcess) -> None:
    anonymous = Browser(console.url)
    icon = anonymous.get("/favicon.ico")
    assert icon.status == 200
    assert icon.headers["content-type"] == "image/svg+xml"
    assert icon.body.lstrip().startswith("<svg")
    for path in ("/favicon.ico/..", "/favicon.ico/x", "/favicon.svg", "/static/../app.py"):
        assert anonymous.get(path).status in (303, 404), path
    assert json.dumps(icon.body).count("script") == 0
