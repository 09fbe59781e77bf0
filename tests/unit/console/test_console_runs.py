"""The console's run pages as pure rules: a research app's script links are not links, and a
replay scales each action to the frame it is drawn on. The pages in a real Chromium are
tests/e2e/console/test_console_runs.py."""

from __future__ import annotations


def test_a_research_apps_script_links_are_not_links() -> None:
    from coordinator.console.model import href

    assert href("https://example.org/a#:~:text=x") == "https://example.org/a#:~:text=x"
    for bad in ("javascript:alert(1)", "JavaScript:alert(1)", "data:text/html,x", "//evil", ""):
        assert href(bad) == "", bad


def test_a_replay_scales_each_action_to_the_frame_it_is_drawn_on() -> None:
    from coordinator.console.model import replay
    from shared.gen.deskfleet.v1 import runs_pb2

    def action(i: int, kind: str, *shas: str) -> runs_pb2.ActionInfo:
        return runs_pb2.ActionInfo(
            id=f"a{i}",
            index=i,
            kind=f"desktop.{kind}",
            status="SUCCEEDED",
            artifacts=[runs_pb2.ArtifactRef(sha256=sha) for sha in shas],
        )

    shot = {"sha256": "s1", "width": 640, "height": 400}
    results = {
        "a0": {"screenshot": shot, "space": {"width": 640, "height": 400}},
        # Acted in real pixels (1280x800) but drawn over the 640x400 shot: halved.
        "a1": {"at": {"x": 200, "y": 100}, "display": {"index": 0, "width": 1280, "height": 800}},
        "a2": {"from": {"x": 10, "y": 10}, "to": {"x": 20, "y": 30}, "space": shot},
        "a3": {"text": "{{secret:PW}}"},
    }
    frames = replay(
        [
            action(3, "type"),
            action(0, "screenshot", "s1"),
            action(1, "left_click"),
            action(2, "drag"),
        ],
        results,
    )
    assert [f.action for f in frames] == ["screenshot", "left_click", "drag", "type"]
    assert frames[1].point == (100.0, 50.0) and frames[1].shot is not None
    assert frames[2].point == (10.0, 10.0) and frames[2].to == (20.0, 30.0)
    assert frames[3].text == "{{secret:PW}}" and frames[3].shot == frames[0].shot
    assert replay([action(0, "left_click")], {})[0].shot is None  # nothing seen yet
    # A worker's result naming a file the coordinator did not keep for the run is not drawn
    # (its "sha256" would have become a path on the console).
    forged = {"a0": {"screenshot": {"sha256": "../../signout", "width": 1, "height": 1}}}
    assert replay([action(0, "screenshot", "s1")], forged)[0].shot is None
