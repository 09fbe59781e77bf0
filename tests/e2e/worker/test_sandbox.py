"""Chromium's sandbox runs wherever it can (30.10): not as root, where Chromium refuses it, but
as an unprivileged user with user namespaces. CI runs as root, so the unprivileged worker is a
user namespace (`unshare -U --map-user`): inside it the worker is uid 1000, not root, and
Chromium makes its own namespaces below it, as it would for the installer's `deskfleet` user.

Whether a renderer is really sandboxed is read from outside, in /proc: a sandboxed renderer
runs under a seccomp-bpf filter (`Seccomp: 2`); one started with --no-sandbox has none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.harness import BIN, base_env
from worker_agent import sandbox
from worker_agent.capabilities import DEFAULT_CHROMIUM

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
# The worker's own user inside the namespace, mapped to the test's user outside: files it
# writes are the test's, and it is not root to Chromium.
AS_USER = ("unshare", "-U", "--map-user=1000", "--map-group=1000")
# A namespace with no user mapped in it: Chromium cannot make its own below it (no sandbox).
UNMAPPED = ("unshare", "-U")
DOCTOR = ("--no-computer-use", "--json")

FETCH = textwrap.dedent(
    """
    import json, sys, psutil
    from worker_agent.actions import ActionContext, ActionRegistry
    from worker_agent.browser.actions import BrowserActions
    from worker_agent.browser.service import BrowserService

    service = BrowserService(sys.argv[1], sandbox=sys.argv[3])
    registry = ActionRegistry()
    BrowserActions(service).register(registry)
    handler, _ = registry.resolve("browser.fetch", "{}")
    ctx = ActionContext("act_sbx", 1, 60, run_id="run_sbx")
    page = handler({"url": sys.argv[2], "policy": {"allow_private": True}}, ctx)
    renderers = {}
    for child in psutil.Process().children(recursive=True):
        try:
            if "--type=renderer" in child.cmdline():
                status = open(f"/proc/{child.pid}/status").read()
                seccomp = [l.split()[1] for l in status.splitlines() if l.startswith("Seccomp:")]
                renderers[child.pid] = seccomp[0] if seccomp else "?"
        except psutil.Error:
            pass
    mode = service.sandbox
    service.close()
    print(json.dumps({"outcome": page["outcome"], "title": page["title"],
                      "sandbox": None if mode is None else [mode.on, str(mode)],
                      "renderers": list(renderers.values())}))
    """
)


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run([*AS_USER, "id", "-u"], capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and done.stdout.strip() == "1000"


def fetch_in(prefix: tuple[str, ...], url: str, setting: str, home: Path) -> dict[str, Any]:
    home.mkdir(parents=True, exist_ok=True)
    env = base_env(home) | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*prefix, sys.executable, "-c", FETCH, DEFAULT_CHROMIUM, url, setting],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def chromium() -> str:
    require(os.path.exists(DEFAULT_CHROMIUM), f"no Chromium at {DEFAULT_CHROMIUM}")
    return DEFAULT_CHROMIUM


def test_an_unprivileged_worker_browses_inside_chromiums_sandbox(
    chromium: str, site: str, tmp_path: Path
) -> None:
    require(_namespaces_work(), "user namespaces (unshare -U --map-user) are not available")
    url = f"{site}/varn/lens.html"
    inside = fetch_in(AS_USER, url, "auto", tmp_path / "user")
    assert (inside["outcome"], inside["title"]) == ("ok", "Varn Lens"), inside
    assert inside["sandbox"] == [True, "on (user namespaces)"]
    assert inside["renderers"] and set(inside["renderers"]) == {"2"}, inside  # seccomp-bpf
    if os.geteuid() == 0:
        # Root gets no sandbox (Chromium refuses it), and the mode says so instead of hiding it.
        bare = fetch_in((), url, "auto", tmp_path / "root")
        assert bare["outcome"] == "ok"
        assert bare["sandbox"] == [False, f"off: {sandbox.AS_ROOT}"]
        assert set(bare["renderers"]) == {"0"}, bare
    # Where Chromium finds no sandbox at all, `auto` says it runs without one; `on` refuses.
    unmapped = fetch_in(UNMAPPED, url, "auto", tmp_path / "unmapped")
    assert unmapped["outcome"] == "ok" and unmapped["sandbox"][0] is False
    assert "Chromium found no usable sandbox here" in unmapped["sandbox"][1]


def doctor(prefix: tuple[str, ...], home: Path, *args: str) -> dict[str, dict[str, Any]]:
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            *prefix,
            BIN / "deskfleet-worker",
            "doctor",
            "--state-dir",
            home / "state",
            *DOCTOR,
            *args,
        ],
        capture_output=True,
        text=True,
        env=base_env(home),
        timeout=120,
    )
    assert done.stderr == "", done.stderr
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_doctor_says_which_mode_chromium_runs_in_and_how_to_sandbox_it(
    chromium: str, tmp_path: Path
) -> None:
    require(_namespaces_work(), "user namespaces (unshare -U --map-user) are not available")
    rows = doctor(AS_USER, tmp_path / "user")
    assert rows["browser"]["status"] == "ok"
    assert rows["sandbox"] == {
        "name": "sandbox",
        "status": "ok",
        "detail": "Chromium's sandbox is on (user namespaces)",
        "fix": "",
    }
    if os.geteuid() == 0:
        rows = doctor((), tmp_path / "root")
        assert rows["browser"]["status"] == "ok"
        assert rows["sandbox"] == {
            "name": "sandbox",
            "status": "warn",
            "detail": f"Chromium runs without its sandbox: {sandbox.AS_ROOT}",
            "fix": sandbox.FIX,
        }
    rows = doctor(UNMAPPED, tmp_path / "unmapped", "--chromium-sandbox", "on")
    assert rows["browser"]["status"] == "fail"
    assert rows["browser"]["detail"].endswith(
        "Chromium found no usable sandbox here, and --chromium-sandbox on requires one"
    )
    assert rows["browser"]["fix"] == sandbox.FIX
    assert rows["sandbox"]["status"] == "skip"
    rows = doctor(AS_USER, tmp_path / "off", "--chromium-sandbox", "off")
    assert (rows["sandbox"]["status"], rows["sandbox"]["detail"]) == (
        "warn",
        "Chromium runs without its sandbox: turned off here (--chromium-sandbox off)",
    )


def test_the_mode_follows_the_user_and_the_setting() -> None:
    """Pure rules: what `decide` says for this process (root in CI) and each setting."""
    assert sandbox.decide("off") == sandbox.Sandbox(
        False, "turned off here (--chromium-sandbox off)"
    )
    assert sandbox.decide("off").args == ["--no-sandbox"]
    if sys.platform.startswith("linux") and os.geteuid() == 0:
        assert sandbox.decide("auto") == sandbox.Sandbox(False, sandbox.AS_ROOT)
        assert sandbox.decide("on").on is True  # asked for: Chromium then refuses, loudly
    no_sandbox = RuntimeError("... [pid=1][err] No usable sandbox! If this is a Debian system")
    mode = sandbox.Sandbox(True, "user namespaces")
    assert sandbox.fallback(mode, "auto", no_sandbox) == sandbox.Sandbox(
        False,
        "Chromium found no usable sandbox here (user namespaces refused, no setuid chrome-sandbox)",
    )
    assert sandbox.fallback(mode, "on", no_sandbox) is None  # required: never quietly off
    assert sandbox.fallback(mode, "auto", RuntimeError("Executable doesn't exist")) is None
