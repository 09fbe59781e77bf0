"""Research apps run by a real worker process: killed on cancel and on a flood of output,
and never asked for more sources than the worker allows."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from shared.errors import InvalidArgumentError
from tests.e2e.research.test_research import _app
from worker_agent.actions import ActionCancelled, ActionContext
from worker_agent.research_app import ResearchApps, parse_apps


def test_the_worker_kills_an_app_on_cancel_and_on_a_flood_of_output(tmp_path: Path) -> None:
    flags = [_app(tmp_path, name, name, "http://x")[1] for name in ("sleep", "flood")]
    apps = ResearchApps(parse_apps(flags))
    ctx = ActionContext("act_t", 1, 30)
    threading.Timer(0.5, ctx.cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(ActionCancelled, match="app sleep stopped: the attempt was cancelled"):
        apps.research({"app": "sleep", "query": "q", "timeout": 30}, ctx)
    assert time.monotonic() - started < 5
    flood = apps.research({"app": "flood", "query": "q"}, ActionContext("act_u", 1, 30))
    assert (flood["outcome"], flood["code"]) == ("failed", "output_too_large")
    for name in ("sleep", "flood"):
        pid = int((tmp_path / f"pid-{name}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(InvalidArgumentError, match="is not an executable"):
        parse_apps(["x=/nonexistent/research-agent --deep"])


def test_a_research_app_is_never_asked_for_more_than_the_workers_source_cap(
    tmp_path: Path,
) -> None:
    """Whatever a plan asks, an app is asked for at most 20 sources (MAX_SOURCES)."""
    from worker_agent.research_app import MAX_SOURCES

    script = tmp_path / "echo_app.py"
    # It names 100 sources and says how many it was asked for.
    script.write_text(
        "import json, sys\n"
        "asked = json.load(sys.stdin)['max_sources']\n"
        "sources = [{'url': f'https://e.com/{i}', 'title': 'x'} for i in range(100)]\n"
        "print(json.dumps({'answer': str(asked), 'sources': sources}))\n"
    )
    apps = ResearchApps(parse_apps([f"echo={sys.executable} {script}"]), workdir=tmp_path / "apps")
    result = apps.research(
        {"app": "echo", "query": "q", "max_sources": 10_000}, ActionContext("a", 1)
    )
    assert result.get("answer") == str(MAX_SOURCES) == "20", result
    assert len(result["sources"]) == MAX_SOURCES
