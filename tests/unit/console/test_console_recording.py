"""A desktop run's recording in the console, in this process: which action each recorded frame
shows (the latest one dispatched at or before it, scaled to the frame; none over a person's
frames), and the routes through the console's whole ASGI stack in front of a stand-in for the
coordinator's channel (tests/unit/console/test_console_screens.py): the player's page and its
frames, each frame one GetRecordingFrame call with the user's token, ids checked first."""

from __future__ import annotations

import json
import re
from typing import Any

import grpc

from coordinator.console.recording import played
from shared.gen.deskfleet.v1 import desktop_pb2, runs_pb2
from tests.unit.console.test_console_screens import JPEG, _console, _request, rpc_error

T0 = 1_700_000_000.0


def recorded(seq: int, at: float, held_by: str = "agent", size: int = 640) -> Any:
    f = desktop_pb2.RecordedFrame(
        seq=seq, held_by=held_by, width=size, height=size * 5 // 8, media_type="image/jpeg"
    )
    f.captured_at.FromNanoseconds(int((T0 + at) * 1e9))
    return f


def action(i: int, kind: str, started: float, finished: float | None) -> Any:
    a = runs_pb2.ActionInfo(id=f"a{i}", index=i, kind=f"desktop.{kind}", status="SUCCEEDED")
    a.dispatched_at.FromNanoseconds(int((T0 + started) * 1e9))
    if finished is not None:
        a.finished_at.FromNanoseconds(int((T0 + finished) * 1e9))
    return a


def test_each_frame_shows_the_latest_action_started_at_or_before_it() -> None:
    actions = [
        action(1, "type", 2.0, 2.5),  # listed out of order: placed by when it started
        action(0, "left_click", 1.0, 1.2),
        action(2, "drag", 4.0, None),  # still running (no receipt yet)
        runs_pb2.ActionInfo(id="p", index=3, kind="diag.echo"),  # not a desktop action
    ]
    results = {
        # Acted in real pixels (1280x800), recorded at 640x400: halved.
        "a0": {"at": {"x": 200, "y": 100}, "display": {"width": 1280, "height": 800}},
        "a1": {"text": "{{secret:PW}}\u202e"},
        "a2": {"from": {"x": 10, "y": 20}, "to": {"x": 30, "y": 40}, "space": {"width": 640}},
    }
    frames = [
        recorded(1, 0.5),  # before any action
        recorded(2, 1.0),  # exactly when the click started
        recorded(3, 1.5),  # after the click finished, before the typing: still the click
        recorded(4, 2.2),
        recorded(5, 3.0, held_by="person"),  # a person at the controls: no agent action
        recorded(6, 5.0),
    ]
    out = played(list(reversed(frames)), actions, results)
    assert [f.seq for f in out] == [1, 2, 3, 4, 5, 6]
    assert [f.at for f in out] == [0.0, 0.5, 1.0, 1.7, 2.5, 4.5]
    assert out[0].mark is None and out[4].mark is None and out[4].held_by == "person"
    click = out[1].mark
    assert click is not None and click.action == "left_click" and click.point == (100.0, 50.0)
    assert click.acting and out[2].mark is not None and not out[2].mark.acting
    assert out[2].mark.index == 0
    typed = out[3].mark
    assert typed is not None and typed.index == 1 and typed.acting
    assert typed.text == "{{secret:PW}}\\u202e"  # spelled out, as every page shows text
    drag = out[5].mark
    assert drag is not None and drag.acting and drag.point == (10.0, 20.0)
    assert drag.to == (30.0, 40.0)  # no height in its space: y is not scaled
    assert played([], actions, results) == []


def _replay_rpc(c: Any, pages: list[Any]) -> None:
    c.rpc.answers["GetRun"] = lambda r: runs_pb2.Run(
        id=r.id,
        kind="desktop",
        actions=[action(0, "left_click", 1.0, 1.2)],
    )
    queue = list(pages)
    c.rpc.answers["ListRecording"] = lambda r: queue.pop(0)


async def test_the_replay_page_plays_the_whole_recording_page_by_page() -> None:
    c = _console("owner")
    first = desktop_pb2.RecordingPage(frames=[recorded(1, 0.0), recorded(2, 1.1)], total=3)
    first.next_seq = 2
    last = desktop_pb2.RecordingPage(frames=[recorded(3, 2.0, held_by="person")], total=3)
    _replay_rpc(c, [first, last])
    page = await _request(c, "GET", "/runs/run_1/replay")
    assert page.status == 200, page.text
    assert [r.after_seq for r in c.rpc.named("ListRecording")] == [0, 2]
    assert all(r.run_id == "run_1" for r in c.rpc.named("ListRecording"))
    block = re.search(
        r'<script type="application/json" id="recording-frames">(.*?)</script>', page.text
    )
    assert block is not None
    frames = json.loads(block.group(1))
    assert [f["seq"] for f in frames] == [1, 2, 3]
    assert [f["held_by"] for f in frames] == ["agent", "agent", "person"]
    assert frames[0]["mark"] is None and frames[1]["mark"]["action"] == "left_click"
    assert 'src="/runs/run_1/recording/1"' in page.text
    assert '<script src="/static/recording.js" defer></script>' in page.text
    # Script only from the console's own files: no inline script ran a page of it.
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "Frame <span data-recording-at>1</span> of 3" in page.text
    js = await _request(c, "GET", "/static/recording.js")
    assert js.status == 200 and "recording-frames" in js.text


async def test_a_recorded_frame_is_one_call_with_the_users_token_its_id_checked_first() -> None:
    c = _console("owner")
    sent: list[Any] = []

    def frame_of(r: Any) -> Any:
        sent.append(r)
        return desktop_pb2.RecordedFrameData(frame=recorded(r.seq, 0.0), data=JPEG)

    c.rpc.answers["GetRecordingFrame"] = frame_of
    got = await _request(c, "GET", "/runs/run_1/recording/2")
    assert got.status == 200 and got.body == JPEG
    assert got.headers["content-type"] == "image/jpeg"
    assert got.headers["cache-control"].startswith("private")
    assert [(r.run_id, r.seq) for r in sent] == [("run_1", 2)]
    for bad in ("0", "x", "1e3", "-1", "%C2%B2", "4294967296", "9" * 40):
        refused = await _request(c, "GET", f"/runs/run_1/recording/{bad}")
        assert refused.status == 400 and "frame" in refused.text, bad
    bad_id = await _request(c, "GET", "/runs/run%3Cb%3E/recording/1")
    assert bad_id.status == 400 and "<b>" not in bad_id.text
    assert len(sent) == 1  # nothing refused here reached the coordinator
    # Whatever media type a row claims, only an image is served as one.
    c.rpc.answers["GetRecordingFrame"] = lambda r: desktop_pb2.RecordedFrameData(
        frame=desktop_pb2.RecordedFrame(seq=1, media_type="text/html"), data=b"<b>x</b>"
    )
    html = await _request(c, "GET", "/runs/run_1/recording/1")
    assert html.headers["content-type"] == "application/octet-stream"
    c.rpc.answers["GetRecordingFrame"] = lambda r: rpc_error(
        grpc.StatusCode.NOT_FOUND, "no run 'run_9'"
    )
    other = await _request(c, "GET", "/runs/run_9/recording/1")
    assert other.status == 404 and "no run" in other.text and other.body != JPEG
    anonymous = await _request(c, "GET", "/runs/run_1/recording/1", signed_in=False)
    assert anonymous.status == 303


async def test_a_desktop_runs_page_links_its_recording_when_it_has_one() -> None:
    c = _console("owner")

    async def journal_page(*args: Any) -> list[Any]:
        return []

    c.rpc.journal_page = journal_page  # type: ignore[attr-defined]
    c.rpc.answers["GetRun"] = lambda r: runs_pb2.Run(id=r.id, kind="desktop", status="RUNNING")
    totals = [3, 0]
    c.rpc.answers["ListRecording"] = lambda r: desktop_pb2.RecordingPage(total=totals.pop(0))
    with_frames = await _request(c, "GET", "/runs/run_1")
    assert with_frames.status == 200, with_frames.text
    assert 'href="/runs/run_1/replay#recording">Play the recording (3 frames)' in with_frames.text
    without = await _request(c, "GET", "/runs/run_1")
    assert "Play the recording" not in without.text
    assert [r.limit for r in c.rpc.named("ListRecording")] == [1, 1]
