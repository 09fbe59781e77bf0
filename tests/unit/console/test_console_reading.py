"""What a person reads in the console: the approval answer's reason is optional and labelled so,
refusals are sentences without RPC names, what a role cannot use is not offered, run ids are
links, a favicon is served. The layout in a real Chromium at 1280 px:
tests/e2e/console/test_console_runs.py."""

from __future__ import annotations

import re
from typing import Any


def _render(name: str, role: str, path: str, **context: Any) -> str:
    from coordinator.console.pages import _templates
    from coordinator.console.sessions import Sessions

    session = Sessions().create(token="t", user_id="usr_1", name="ann", role=role)
    text: str = (
        _templates()
        .get_template(name)
        .render(
            session=session,
            flashes=[],
            pending=0,
            fleet_stopped=False,
            request=None,
            path=path,
            csrf="x",
            **context,
        )
    )
    return text


def _input(html: str, element_id: str) -> str:
    found = re.search(rf"<input id=\"{element_id}\"[^>]*>", html)
    assert found, element_id
    return found.group(0)


def _label(html: str, element_id: str) -> str:
    found = re.search(rf"<label for=\"{element_id}\">([^<]*)</label>", html)
    assert found, element_id
    return found.group(1)


def test_approving_or_denying_takes_an_optional_reason_labelled_so() -> None:
    from shared.gen.deskfleet.v1 import desktop_pb2

    approval = desktop_pb2.Approval(id="apr_1", run_id="run_1", kind="plan", status="pending")
    html = _render(
        "approval.html",
        "admin",
        "/approvals/apr_1",
        approval=approval,
        discussion=desktop_pb2.ApprovalDiscussion(),
        worker=None,
        display=None,
        peek=None,
        region=None,
        actions=[],
    )
    for field in ("a-reason", "d-reason"):  # approve, deny
        assert "required" not in _input(html, field), field
        assert "optional" in _label(html, field), field
