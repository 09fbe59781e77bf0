"""The ways people answer running work, attacked on a real coordinator: guidance, a goal's
questions, an approval answered with guidance, discussed or advised, and a revised plan.

The attackers are a hostile owner (odd and huge text, many questions, a revise racing the
replaced work's late receipt) and a hostile model service (its advice huge, slow, failing with
a huge message, or holding characters the store cannot keep). Models are the scripted provider
(a replayed model: no model service is reachable here); desktops are hand-driven worker
streams (`raw_worker.py`), so no display is needed.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from shared.gen.deskfleet.v1 import desktop_pb2, desktop_pb2_grpc
from tests.harness import (
    STOPPED,
    ConsoleProcess,
    CoordinatorProcess,
    journal,
    submit,
    wait_run,
    wait_until,
    write_plan,
)
from tests.harness.desktop_goals import DESKTOP, new_owner, receipt as desktop_receipt
from tests.harness.raw_worker import RawWorker
from tests.integration.console.test_console_attacks import Browser

# slow: many seconds of real coordinators per test, no ledger promise (CI: make test-slow)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    """The module's coordinator: an optional question holds its goal not at all, so that a goal
    can ask many at once and an answer to one is a late answer."""
    proc = CoordinatorProcess(
        tmp_path_factory.mktemp("answers"), serve_args=("--goal-question-wait", "0")
    ).start()
    yield proc
    proc.stop()


def _approvals(coordinator: CoordinatorProcess) -> desktop_pb2_grpc.ApprovalServiceStub:
    channel = coordinator.channel()
    assert channel is not None
    return desktop_pb2_grpc.ApprovalServiceStub(channel)


def _desktop_request(coordinator: CoordinatorProcess, owner: Path, name: str) -> dict[str, Any]:
    """A pending desktop approval of `owner`'s, on a hand-driven desktop worker of its own."""
    worker = RawWorker(coordinator, name)
    worker.connect(DESKTOP)
    run = coordinator.cli_json(
        "desktop", "request", "--worker", worker.worker_id, "--action", "key", token_file=owner
    )
    listed = coordinator.cli_json("approvals", "list")["approvals"]
    (approval,) = [a for a in listed if a["runId"] == run["id"]]
    return dict(approval)


def _advise(
    coordinator: CoordinatorProcess, approval_id: str, model: str, timeout: float = 60
) -> desktop_pb2.ApprovalNote:
    return _approvals(coordinator).AdviseApproval(
        desktop_pb2.AdviseApprovalRequest(id=approval_id, model=model),
        metadata=coordinator.admin_metadata(),
        timeout=timeout,
    )


# --- a hostile model service ------------------------------------------------------------------


def test_a_model_failing_with_a_huge_message_is_reported_in_one_bounded_line(
    coordinator: CoordinatorProcess,
) -> None:
    """A failure's text is the model service's: 50,000 characters of it once overflowed the
    status the RPC could carry, and the admin read "received metadata size exceeds hard
    limit" instead of why the advice failed."""
    owner = new_owner(coordinator, "huge-error")
    approval = _desktop_request(coordinator, owner, "huge-error-desk")
    model = coordinator.script("huge-error.json", [{"error": "overloaded " + "E" * 50_000}])
    with pytest.raises(grpc.RpcError) as failed:
        _advise(coordinator, approval["id"], model)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE, failed.value.details()
    details = failed.value.details() or ""
    assert "advice from scripted:huge-error.json failed: scripted: overloaded EEE" in details
    assert len(details) < 1000


def test_advice_counts_against_an_approvals_fifty_notes(coordinator: CoordinatorProcess) -> None:
    """Messages stopped at 50, but advice did not: an admin asking again and again grew the
    discussion without end, and with it every later prompt (the whole discussion is sent)."""
    owner = new_owner(coordinator, "many-notes")
    approval = _desktop_request(coordinator, owner, "many-notes-desk")
    stub = _approvals(coordinator)
    for i in range(49):
        stub.DiscussApproval(
            desktop_pb2.DiscussApprovalRequest(id=approval["id"], text=f"note {i}"),
            metadata=coordinator.admin_metadata(),
            timeout=30,
        )
    model = coordinator.script("fiftieth.json", [{"text": "narrow it"}])
    assert _advise(coordinator, approval["id"], model).kind == "advice"  # the 50th note
    asked = coordinator.script("fifty-first.json", [{"error": "this model must not be asked"}])
    with pytest.raises(grpc.RpcError) as refused:
        _advise(coordinator, approval["id"], asked)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "has 50 messages already" in (refused.value.details() or "")
    found = stub.DiscussApproval(
        desktop_pb2.DiscussApprovalRequest(id=approval["id"]),
        metadata=coordinator.admin_metadata(),
        timeout=30,
    )
    assert len(found.notes) == 50
    events = journal(coordinator, approval["runId"], token_file=owner)
    assert [e["kind"] for e in events].count("approval.advice") == 1
    assert "approval.advice_failed" not in [e["kind"] for e in events]  # never asked


def test_at_most_two_advice_calls_run_at_once(coordinator: CoordinatorProcess) -> None:
    """Each advice call holds a thread of the pool every goal's model calls run on, for up to
    2 minutes: twelve slow ones once held a goal started meanwhile for 15 s, waiting for a
    thread. Past two at once, advice is refused at once, and the goals go on."""
    owner = new_owner(coordinator, "many-advice")
    approval = _desktop_request(coordinator, owner, "many-advice-desk")
    slow = coordinator.script("slow-advice.json", [{"sleep": 4, "text": "slowly: narrow it"}])
    answers: list[str] = []

    def ask() -> None:
        answers.append(_advise(coordinator, approval["id"], slow).text)

    held = [threading.Thread(target=ask) for _ in range(2)]
    for thread in held:
        thread.start()
    time.sleep(1.5)  # both are in their model call
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as refused:
        _advise(coordinator, approval["id"], slow)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 2 advice calls at once" in (refused.value.details() or "")
    assert time.monotonic() - started < 2  # refused, not queued
    quick = coordinator.script("quick-goal.json", [{"text": "done"}])
    goal = coordinator.cli_json("goal", "answer at once", "--model", quick, token_file=owner)
    done = wait_run(coordinator, goal["id"], lambda r: r["status"] in STOPPED, 30, owner)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    for thread in held:
        thread.join(30)
    assert answers == ["slowly: narrow it"] * 2
    fast = coordinator.script("after-advice.json", [{"text": "now there is room"}])
    assert _advise(coordinator, approval["id"], fast).text == "now there is room"


# --- revise ----------------------------------------------------------------------------------


@pytest.mark.parametrize("late", ["failed", "succeeded"])
def test_a_late_receipt_of_the_replaced_action_neither_edits_it_nor_moves_the_revised_run(
    coordinator: CoordinatorProcess, tmp_path: Path, late: str
) -> None:
    """A non-idempotent append whose outcome was unknown is replaced by a revise; its worker's
    receipt comes afterwards. It once turned the replaced (SKIPPED) action FAILED and failed the
    revised run with it ("action 0 failed"), or turned it SUCCEEDED. The receipt is kept as
    evidence; the action stays replaced and the revised run goes on."""
    owner = new_owner(coordinator, f"reviser-{late}")
    worker = RawWorker(coordinator, f"slow-{late}")
    worker.connect()
    try:
        append = {"name": "lines.txt", "line": "once"}
        first = write_plan(
            tmp_path / "first.json",
            [{"kind": "diag.append", "args": append, "route": {"worker": worker.worker_id}}],
            limits={"action_timeout_seconds": 1},
        )
        run = submit(coordinator, first, token_file=owner)
        dispatch = worker.expect("dispatch").dispatch
        stopped = wait_run(coordinator, run["id"], lambda r: r["status"] in STOPPED, 30, owner)
        assert stopped["stopReason"].startswith("unknown_outcome"), stopped["stopReason"]
        # The new part waits for a worker that is not there, so that only the receipt moves it.
        waits = {"kind": "diag.echo", "args": {}, "idempotent": True, "route": {"worker": "gone"}}
        revised = coordinator.cli_json(
            "runs", "revise", run["id"], str(write_plan(tmp_path / "new.json", [waits])),
            token_file=owner,
        )  # fmt: skip
        assert revised["execution"] == 2
        receipt = desktop_receipt(dispatch, {"appended": True})
        receipt.status, receipt.error = late, "" if late == "succeeded" else "disk full"
        worker.send(receipt=receipt)
        wait_until(
            lambda: [
                e
                for e in journal(coordinator, run["id"], token_file=owner)
                if e["kind"] == "receipt"
            ],
            15,
            0.1,
            "the late receipt journaled",
        )
        time.sleep(0.5)  # what the receipt would have moved, it has moved by now
        after = coordinator.cli_json("runs", "show", run["id"], token_file=owner)
        assert after["status"] == "WAITING_FOR_ENVIRONMENT", after["stopReason"]
        assert [(a["kind"], a["status"]) for a in after["actions"]] == [
            ("diag.append", "SKIPPED"),
            ("diag.echo", "PENDING"),
        ]
        assert after["actions"][0]["error"].startswith("replaced by the revised plan")
        assert after["actionsSucceeded"] == 0
        (kept,) = [
            e["data"]
            for e in journal(coordinator, run["id"], token_file=owner)
            if e["kind"] == "receipt"
        ]
        assert kept["status"] == late and kept["replaced"] is True
        coordinator.cli("runs", "cancel", run["id"], token_file=owner)
    finally:
        worker.close()


# --- a goal's questions ----------------------------------------------------------------------


def _ask(question: str, *, required: bool = False) -> dict[str, Any]:
    return {"name": "ask_human", "arguments": {"question": question, "required": required}}


def test_a_goal_asks_at_most_fifty_questions(coordinator: CoordinatorProcess) -> None:
    """Each `ask_human` call was a row and a line in the person's list, without a bound: a
    model could fill an owner's questions page and the store in one turn. Past 50 a call is
    the model's error, and no row."""
    owner = new_owner(coordinator, "asker")
    calls = [_ask(f"question {i}?") for i in range(53)]
    model = coordinator.script("many-questions.json", [{"tool_calls": calls}, {"text": "done"}])
    goal = coordinator.cli_json("goal", "ask a lot", "--model", model, token_file=owner)["id"]
    wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 60, owner)
    listed = coordinator.cli_json(
        "questions", "list", "--run", goal, "--all", "--limit", "500", token_file=owner
    )["questions"]
    assert len(listed) == 50
    results = [
        e["data"]
        for e in journal(coordinator, goal, token_file=owner)
        if e["kind"] == "goal.tool_result"
    ]
    assert len(results) == 53
    assert not any(r["is_error"] for r in results[:50])
    for refused in results[50:]:
        assert refused["is_error"] and "at most 50 questions" in refused["text"], refused


def test_a_late_answer_to_a_long_odd_question_is_taken_and_quotes_it_briefly(
    coordinator: CoordinatorProcess,
) -> None:
    """A late answer goes to the goal as guidance quoting the question. Quoted whole with its
    characters escaped (2,000 invisible tag characters are 20,000 characters of escapes), the
    message passed the run's 16,000 characters of guidance, and every late answer was refused."""
    owner = new_owner(coordinator, "late-answer")
    odd = "\U000e0001" * 2000
    recalls = [
        {"sleep": 0.3, "tool_calls": [{"name": "recall", "arguments": {"text": f"w{i}"}}]}
        for i in range(20)
    ]
    model = coordinator.script(
        "odd-question.json", [{"tool_calls": [_ask(odd)]}, *recalls, {"text": "done"}]
    )
    goal = coordinator.cli_json("goal", "ask oddly", "--model", model, token_file=owner)["id"]
    (asked,) = wait_until(
        lambda: coordinator.cli_json(
            "questions", "list", "--run", goal, "--all", token_file=owner
        ).get("questions"),
        30,
        0.1,
        "the question",
    )
    wait_until(
        lambda: (
            coordinator.cli_json("questions", "list", "--run", goal, "--all", token_file=owner)[
                "questions"
            ][0]["status"]
            == "expired"
        ),
        30,
        0.1,
        "the question expired",
    )
    answer = "the left one " * 300  # 3,900 characters: the quote must leave it whole
    late = coordinator.cli_json("questions", "answer", asked["id"], answer, token_file=owner)
    assert late["status"] == "answered" and late["guidanceId"]
    (message,) = coordinator.cli_json("runs", "show", goal, token_file=owner)["guidance"]
    assert message["id"] == late["guidanceId"]
    (queued,) = [
        e["data"]
        for e in journal(coordinator, goal, token_file=owner)
        if e["kind"] == "guidance.queued"
    ]
    assert queued["text"].startswith("The answer to your question '\\U000e0001")
    assert queued["text"].endswith(": " + answer)
    assert len(queued["text"]) <= len(answer) + 300
    coordinator.cli("runs", "cancel", goal, token_file=owner)


# --- text the store cannot hold ---------------------------------------------------------------


@pytest.fixture
def pg_coordinator(pg_store: tuple[str, Path], tmp_path: Path) -> Iterator[CoordinatorProcess]:
    url, credentials = pg_store
    proc = CoordinatorProcess(tmp_path / "pg", url)
    shutil.copy(credentials / "admin.token", proc.admin_token_file)
    shutil.copy(credentials / "secrets.key", proc.secrets_key_file)
    proc.start()
    yield proc
    proc.stop()


@pytest.mark.postgres
def test_on_postgresql_a_models_nul_in_a_question_or_advice_is_kept_as_a_replacement_character(
    pg_coordinator: CoordinatorProcess,
) -> None:
    """PostgreSQL's text holds no NUL, and what a model says is not refused like a person's
    text: a question with one handed its goal back as an internal error, and advice with one
    was an internal error. The NUL is kept as U+FFFD; the model's turn in the journal is exact."""
    coordinator = pg_coordinator
    owner = new_owner(coordinator, "nul")
    model = coordinator.script(
        "nul-question.json",
        [{"tool_calls": [_ask("door\x00one?", required=True)]}, {"text": "done"}],
    )
    goal = coordinator.cli_json("goal", "ask", "--model", model, token_file=owner)["id"]

    def asked() -> list[dict[str, Any]] | None:
        run = coordinator.cli_json("runs", "show", goal, token_file=owner)
        assert run["status"] not in STOPPED, run["stopReason"]
        found = coordinator.cli_json("questions", "list", "--run", goal, token_file=owner)
        return found.get("questions") or None

    (question,) = wait_until(asked, 30, 0.1, "the question")
    assert question["text"] == "door\ufffdone?"
    coordinator.cli("questions", "answer", question["id"], "the first", token_file=owner)
    done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, owner)
    assert done["status"] == "SUCCEEDED", done["stopReason"]

    approval = _desktop_request(coordinator, owner, "nul-desk")
    advisor = coordinator.script("nul-advice.json", [{"text": "safe\x00enough"}])
    assert _advise(coordinator, approval["id"], advisor).text == "safe\ufffdenough"


def test_a_late_answer_to_one_question_does_not_answer_the_next(
    coordinator: CoordinatorProcess,
) -> None:
    """A goal's open question took any guidance waiting as its answer, the coordinator's own
    included: the late answer to an earlier question answered the required one asked after it,
    in the earlier one's words, and the goal went on with an answer nobody gave."""
    owner = new_owner(coordinator, "two-questions")
    first, second = _ask("north or south?"), _ask("which door?", required=True)
    model = coordinator.script(
        "two-questions.json", [{"tool_calls": [first, second]}, {"text": "done"}]
    )
    goal = coordinator.cli_json("goal", "ask twice", "--model", model, token_file=owner)["id"]

    def both() -> list[dict[str, Any]] | None:
        found = coordinator.cli_json(
            "questions", "list", "--run", goal, "--all", token_file=owner
        ).get("questions", [])
        by_text = {q["text"]: q for q in found}
        if by_text.get("which door?", {}).get("status") == "open":
            return [by_text["north or south?"], by_text["which door?"]]
        return None

    expired, waiting = wait_until(both, 30, 0.1, "the second question open")
    assert expired["status"] == "expired"
    late = coordinator.cli_json("questions", "answer", expired["id"], "north", token_file=owner)
    assert late["guidanceId"]
    time.sleep(1)  # the goal looks for its answer every 0.25 s
    still = coordinator.cli_json("questions", "list", "--run", goal, token_file=owner)
    assert [q["id"] for q in still["questions"]] == [waiting["id"]], still
    coordinator.cli("questions", "answer", waiting["id"], "the red one", token_file=owner)
    done = wait_run(coordinator, goal, lambda r: r["status"] in STOPPED, 30, owner)
    assert done["status"] == "SUCCEEDED", done["stopReason"]
    results = [
        e["data"]["text"]
        for e in journal(coordinator, goal, token_file=owner)
        if e["kind"] == "goal.tool_result"
    ]
    assert results[1] == "the person answered: the red one"


def test_a_revise_is_checked_as_a_submission_is_for_the_research_apps_it_names(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    """A plan naming a research app no enrolled worker offers is refused at submission; the
    same action in a revise was taken, and the revised run waited for an app nobody has."""
    owner = new_owner(coordinator, "app-reviser")
    worker = RawWorker(coordinator, "failing")
    worker.connect()
    try:
        route = {"worker": worker.worker_id}
        plan = write_plan(tmp_path / "p.json", [{"kind": "diag.echo", "args": {}, "route": route}])
        run = submit(coordinator, plan, token_file=owner)
        failed = desktop_receipt(worker.expect("dispatch").dispatch, {})
        failed.status, failed.error = "failed", "no"
        worker.send(receipt=failed)
        wait_run(coordinator, run["id"], lambda r: r["status"] == "FAILED", 30, owner)
        app = {"kind": "app.research", "args": {"app": "nobody-offers-this", "query": "q"}}
        refused = coordinator.cli(
            "runs", "revise", run["id"], str(write_plan(tmp_path / "app.json", [app])),
            token_file=owner, check=False,
        )  # fmt: skip
        assert refused.returncode == 2, refused.stdout
        assert "no enrolled worker offers app 'nobody-offers-this'" in refused.stderr
        shown = coordinator.cli_json("runs", "show", run["id"], token_file=owner)
        assert shown["status"] == "FAILED" and shown["execution"] == 1  # nothing written
    finally:
        worker.close()


# --- what held: references grant nothing, and one answer wins ------------------------------


def test_another_owners_run_question_and_approval_are_not_found_by_reference(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    owner, stranger = new_owner(coordinator, "holder"), new_owner(coordinator, "stranger")
    model = coordinator.script(
        "held-question.json", [{"tool_calls": [_ask("may I?", required=True)]}]
    )
    goal = coordinator.cli_json("goal", "ask and wait", "--model", model, token_file=owner)["id"]
    (question,) = wait_until(
        lambda: coordinator.cli_json("questions", "list", "--run", goal, token_file=owner).get(
            "questions"
        ),
        30,
        0.1,
        "the question",
    )
    approval = _desktop_request(coordinator, owner, "holder-desk")
    plan = write_plan(tmp_path / "revise.json", [{"kind": "diag.echo", "args": {}}])
    attempts = [
        ("runs", "guide", goal, "steer it", "--message-id", "m-1"),
        ("runs", "revise", goal, str(plan)),
        ("questions", "list", "--run", goal),
        ("questions", "answer", question["id"], "yes"),
        ("approvals", "discuss", approval["id"]),
        ("approvals", "discuss", approval["id"], "let me in"),
        ("journal", "search", goal, "may"),
    ]
    for args in attempts:
        done = coordinator.cli(*args, token_file=stranger, check=False)
        assert done.returncode == 4, (args, done.returncode, done.stderr)
        assert "may I" not in done.stdout + done.stderr
    # An admin answers approvals, not another owner's questions.
    admin = coordinator.cli("questions", "answer", question["id"], "yes", check=False)
    assert admin.returncode == 4
    for args in (
        ("approvals", "guide", approval["id"], "no"),
        ("approvals", "advise", approval["id"]),
    ):
        done = coordinator.cli(*args, token_file=owner, check=False)
        assert done.returncode == 3 and "needs an admin credential" in done.stderr, done.stderr
    assert coordinator.cli_json("runs", "show", goal, token_file=owner)["guidance"] == []
    coordinator.cli("runs", "cancel", goal, token_file=owner)


def test_one_answer_wins_when_approve_deny_and_guide_race(coordinator: CoordinatorProcess) -> None:
    owner = new_owner(coordinator, "racer")
    approval = _desktop_request(coordinator, owner, "racer-desk")
    stub, md = _approvals(coordinator), coordinator.admin_metadata()
    start = threading.Barrier(9)
    outcomes: list[str] = []

    def answer(kind: str, i: int) -> None:
        start.wait()
        try:
            if kind == "approve":
                stub.Approve(desktop_pb2.ApproveRequest(id=approval["id"]), metadata=md, timeout=30)
            elif kind == "deny":
                request = desktop_pb2.DenyRequest(id=approval["id"], reason=f"no {i}")
                stub.Deny(request, metadata=md, timeout=30)
            else:
                guided = desktop_pb2.GuideApprovalRequest(id=approval["id"], text=f"guide {i}")
                stub.GuideApproval(guided, metadata=md, timeout=30)
            outcomes.append(kind)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION, exc.details()
            outcomes.append("refused")

    threads = [
        threading.Thread(target=answer, args=(kind, i))
        for i, kind in enumerate(["approve", "deny", "guide"] * 3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert outcomes.count("refused") == 8, outcomes
    events = [e["kind"] for e in journal(coordinator, approval["runId"], token_file=owner)]
    answers = [k for k in events if k in ("approval.granted", "approval.denied", "approval.guided")]
    assert len(answers) == 1, events


def test_the_consoles_answer_forms_hold_against_anonymous_posts_redirects_and_markup(
    coordinator: CoordinatorProcess,
) -> None:
    owner = new_owner(coordinator, "console-owner")
    hostile = "<img src=x onerror=alert(1)>\x1b[2J\u202edoor?"
    model = coordinator.script(
        "console-question.json", [{"tool_calls": [_ask(hostile, required=True)]}]
    )
    goal = coordinator.cli_json("goal", "ask here", "--model", model, token_file=owner)["id"]
    (question,) = wait_until(
        lambda: coordinator.cli_json("questions", "list", "--run", goal, token_file=owner).get(
            "questions"
        ),
        30,
        0.1,
        "the question",
    )
    approval = _desktop_request(coordinator, owner, "console-desk")
    advisor = coordinator.script(
        "console-advice.json", [{"text": "<script>alert(2)</script>\x1b]0;pwned\x07 approve"}]
    )
    _advise(coordinator, approval["id"], advisor)
    console = ConsoleProcess(coordinator).start()
    try:
        anonymous = Browser(console.url)
        for path, form in (
            (f"/runs/{goal}/guide", {"text": "x"}),
            (f"/questions/{question['id']}/answer", {"text": "x"}),
            (f"/approvals/{approval['id']}/guide", {"text": "x"}),
            (f"/approvals/{approval['id']}/discuss", {"text": "x"}),
            (f"/approvals/{approval['id']}/advise", {}),
            (f"/runs/{goal}/revise", {"plan": '{"actions": [{"kind": "diag.echo"}]}'}),
        ):
            assert anonymous.post(path, form).status in (401, 403), path
        person = Browser(console.url)
        assert person.signin(owner.read_text().strip()).status == 303
        page = person.get("/approvals").body
        assert "&lt;img src=x onerror=alert(1)&gt;\\x1b[2J\\u202edoor?" in page
        assert "<img src=x" not in page and "\x1b" not in page and "\u202e" not in page
        shown = person.get(f"/approvals/{approval['id']}").body
        assert "&lt;script&gt;alert(2)&lt;/script&gt;\\x1b]0;pwned\\x07 approve" in shown
        assert "<script>alert" not in shown and "\x07" not in shown
        answered = person.post(
            f"/questions/{question['id']}/answer",
            {"text": "the blue one", "csrf": person.csrf("/approvals"), "back": "javascript:x"},
        )
        assert answered.status == 303 and answered.location == "/approvals"
        after = coordinator.cli_json("runs", "show", goal, token_file=owner)
        assert after["guidance"] == []  # no anonymous post reached the goal
        notes = coordinator.cli_json("approvals", "discuss", approval["id"])["notes"]
        assert [n["kind"] for n in notes] == ["advice"]  # nor the discussion
    finally:
        console.stop()
        coordinator.cli("runs", "cancel", goal, token_file=owner, check=False)
