"""The console's pure parts: templates spell out control characters and escape markup,
sessions expire and end, redirects stay on the console, the approve form narrows a scope,
the timeline's geometry. The console in a real Chromium is tests/e2e/console/test_console.py."""

from __future__ import annotations


def test_templates_spell_out_control_characters_and_escape_markup() -> None:
    from coordinator.console.pages import _templates

    env = _templates()
    out = env.from_string("<p>{{ v }}</p><pre>{{ v | multiline }}</pre>").render(
        v="<b>x</b>\x1b[2J\u202eA\nB"
    )
    assert out == (
        "<p>&lt;b&gt;x&lt;/b&gt;\\x1b[2J\\u202eA\\nB</p>"
        "<pre>&lt;b&gt;x&lt;/b&gt;\\x1b[2J\\u202eA\nB</pre>"
    )


def test_sessions_expire_and_end() -> None:
    from coordinator.console.sessions import Sessions, tokens_equal

    now = [1000.0]
    sessions = Sessions(ttl=60, clock=lambda: now[0])
    s = sessions.create(token="dfu_a.b", user_id="usr_1", name="a", role="owner")
    assert sessions.get(s.id) is s and len(s.csrf) >= 32 and s.id != s.csrf
    now[0] += 59
    assert sessions.get(s.id) is s  # use does not extend it
    now[0] += 1
    assert sessions.get(s.id) is None and len(sessions) == 0
    t = sessions.create(token="dfu_a.b", user_id="usr_1", name="a", role="owner")
    sessions.end_for_token("dfu_a.b")
    assert sessions.get(t.id) is None
    assert not tokens_equal("", "") and tokens_equal("x", "x") and not tokens_equal("x", "y")


def test_redirects_after_sign_in_stay_on_the_console() -> None:
    from coordinator.console.auth import _local

    assert _local("/runs?status=FAILED") == "/runs?status=FAILED"
    for bad in ("https://evil.test/", "//evil.test/x", "/\\evil.test", "", None, "runs"):
        assert _local(bad) == "/fleet"


def test_the_approve_form_becomes_a_narrowing_scope() -> None:
    from starlette.datastructures import FormData

    from coordinator.console.approvals import approve_scope

    form = FormData(
        [
            ("actions", "left_click"),
            ("actions", "rm -rf"),
            ("ttl_minutes", "2.5"),
            ("max_actions", "7"),
            ("region_x", "10"),
            ("region_y", "20"),
            ("region_width", "300"),
            ("region_height", "200"),
        ]
    )
    scope = approve_scope(form)
    assert list(scope.actions) == ["left_click"]  # names the console does not know are dropped
    assert (scope.ttl_seconds, scope.max_actions) == (150.0, 7)
    assert (scope.region.x, scope.region.y, scope.region.width, scope.region.height) == (
        10,
        20,
        300,
        200,
    )
    empty = approve_scope(FormData([("region_width", "0"), ("ttl_minutes", "nan")]))
    assert not empty.HasField("region") and empty.ttl_seconds == 0 and not empty.actions


def test_the_timeline_places_states_and_attempts_on_one_axis() -> None:
    from google.protobuf.timestamp_pb2 import Timestamp

    from coordinator.console.model import timeline
    from shared.gen.deskfleet.v1 import runs_pb2

    def ts(sec: float) -> Timestamp:
        return Timestamp(seconds=int(sec), nanos=int((sec % 1) * 1e9))

    t = runs_pb2.RunTimeline(
        submitted_at=ts(100),
        ended_at=ts(110),
        wall_seconds=10,
        states=[
            runs_pb2.TimelineState(state="RUNNING", entered_at=ts(100), left_at=ts(105), seconds=5),
            runs_pb2.TimelineState(state="SUCCEEDED", entered_at=ts(105), seconds=0),
        ],
        actions=[
            runs_pb2.TimelineAttempt(
                id="a1",
                index=0,
                kind="diag.echo",
                attempt=1,
                status="FAILED",
                dispatched_at=ts(101),
                finished_at=ts(102),
                seconds=1,
                error="<boom>",
            ),
            runs_pb2.TimelineAttempt(
                id="a1",
                index=0,
                kind="diag.echo",
                attempt=2,
                status="SUCCEEDED",
                dispatched_at=ts(103),
                finished_at=ts(105),
                seconds=2,
            ),
        ],
    )
    drawn = timeline(t, width=1000)
    assert drawn is not None and drawn.rows == ["run", "#0 diag.echo"]
    running, done, first, second = drawn.bars
    assert (running.x, running.width, running.row) == (0, 500, 0)
    assert (first.x, first.width, first.row, first.css) == (100, 100, 1, "failed")
    assert (second.x, second.width) == (300, 200) and "<boom>" in first.title
    assert done.x == 500 and drawn.ticks[-1] == (1000, "10.0 s")
