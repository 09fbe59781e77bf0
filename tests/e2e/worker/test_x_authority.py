"""A desktop on a plain `Xvfb :N` (no cookie file) offers Computer Use, and a display that
refuses the worker is reported as the authority problem it is, by the worker and by doctor."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.harness import BIN, CoordinatorProcess, WorkerProcess, Xvfb, base_env

# slow: a worker and doctor started against each kind of display and cookie file; CI runs it
pytestmark = pytest.mark.slow


@pytest.fixture
def coordinator(module_coordinator: CoordinatorProcess) -> CoordinatorProcess:
    return module_coordinator


@pytest.fixture(scope="module")
def plain_xvfb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Xvfb]:
    """`Xvfb :N -screen 0 1280x800x24`: no -auth, so no cookie anywhere."""
    require(Xvfb.available(), "Xvfb and xauth are not installed (apt-get install xvfb xauth)")
    server = Xvfb(tmp_path_factory.mktemp("plain-xvfb"), cookie=False).start()
    yield server
    server.stop()


def _worker(
    coordinator: CoordinatorProcess,
    tmp_path: Path,
    name: str,
    env: dict[str, str],
    *args: str,
) -> WorkerProcess:
    home = tmp_path / f"home-{name}"  # empty: no ~/.Xauthority
    home.mkdir()
    worker = WorkerProcess(
        coordinator,
        name,
        display_env={"HOME": str(home), **env},
        home=tmp_path,
        browser=False,
        extra_args=args,
    )
    assert worker.enroll().returncode == 0
    return worker


def _doctor(worker: WorkerProcess, timeout: float = 60) -> tuple[int, dict[str, dict[str, Any]]]:
    done = subprocess.run(
        [
            str(BIN / "deskfleet-worker"),
            "doctor",
            "--state-dir",
            str(worker.state_dir),
            "--no-headless",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=worker.env(),
        timeout=timeout,
    )
    doc = json.loads(done.stdout)  # stdout is the document alone
    return done.returncode, {c["name"]: c for c in doc["checks"]}


def _computer_use(worker: WorkerProcess) -> dict[str, Any]:
    worker.start()
    row = worker.wait_online(60)
    found: dict[str, Any] = next(c for c in row["capabilities"] if c["name"] == "computer_use")
    return found


def test_a_plain_xvfb_without_a_cookie_file_offers_computer_use(
    coordinator: CoordinatorProcess, plain_xvfb: Xvfb, tmp_path: Path
) -> None:
    worker = _worker(coordinator, tmp_path, "plain", plain_xvfb.env)
    assert "XAUTHORITY" not in worker.env()
    home = worker.env()["HOME"]
    try:
        assert _computer_use(worker) == {"name": "computer_use", "available": True, "reason": ""}
    finally:
        worker.stop()
    # The local kill hotkey is grabbed through python-xlib too.
    assert "kill hotkey ctrl+alt+shift+k engages the local kill switch" in worker.log.read_text()
    code, rows = _doctor(worker)
    assert code == 0, rows
    assert rows["display"]["status"] == rows["input"]["status"] == "ok"
    assert rows["display"]["detail"] == (
        f"{plain_xvfb.display}: 1 screen(s) 1280x800; no Xauthority file (~/.Xauthority:"
        f" {home}/.Xauthority does not exist): connected without a cookie"
    )
    # XAUTHORITY naming a file that does not exist is no cookie too, as for xdpyinfo.
    missing = tmp_path / "nowhere" / "Xauthority"
    worker.display_env["XAUTHORITY"] = str(missing)
    code, rows = _doctor(worker)
    assert (code, rows["input"]["status"]) == (0, "ok"), rows
    assert f"(XAUTHORITY: {missing} does not exist)" in rows["display"]["detail"]


def test_a_display_that_wants_a_cookie_the_worker_lacks_names_the_cookie(
    coordinator: CoordinatorProcess, xvfb: Xvfb, tmp_path: Path
) -> None:
    # The display's cookie is in xvfb.auth; this worker has none at all.
    worker = _worker(
        coordinator, tmp_path, "no-cookie", {"DISPLAY": xvfb.display}, "--kill-hotkey", "none"
    )
    home = worker.env()["HOME"]
    refused = (
        f"display {xvfb.display} refused the connection (Authorization required, but no"
        " authorization protocol specified): it wants a cookie, and there is no Xauthority file"
        f" (~/.Xauthority: {home}/.Xauthority does not exist)"
    )
    try:
        assert _computer_use(worker) == {
            "name": "computer_use",
            "available": False,
            "reason": refused,
        }
    finally:
        worker.stop()
    code, rows = _doctor(worker)
    assert code == 1
    assert (rows["display"]["status"], rows["display"]["detail"]) == ("fail", refused)
    assert rows["display"]["fix"].startswith("set XAUTHORITY to the X server's cookie file")
    assert rows["input"]["fix"] == "fix the display first (see above)"

    # A cookie file of another server's: the cookie is named as the problem.
    other = tmp_path / "other.Xauthority"
    subprocess.run(
        ["xauth", "-f", str(other), "add", xvfb.display, ".", secrets.token_hex(16)],
        check=True,
        capture_output=True,
        env=base_env(tmp_path),
    )
    worker.display_env["XAUTHORITY"] = str(other)
    code, rows = _doctor(worker)
    assert code == 1
    assert rows["display"]["detail"] == (
        f"display {xvfb.display} refused the connection (Invalid MIT-MAGIC-COOKIE-1 key):"
        f" the cookie in {other} is not this server's"
    )
    assert rows["display"]["fix"].startswith("set XAUTHORITY to the X server's cookie file")


def test_no_x_server_at_display_is_told_apart_from_a_refusal(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    free = next(n for n in range(400, 500) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    worker = _worker(
        coordinator, tmp_path, "no-server", {"DISPLAY": f":{free}"}, "--kill-hotkey", "none"
    )
    code, rows = _doctor(worker)
    assert code == 1
    assert rows["display"]["detail"] == (
        f"no X server answers at DISPLAY=:{free} ([Errno 2] No such file or directory)"
    )
    assert rows["display"]["fix"].startswith("start the X server")


def test_an_xauthority_that_is_no_cookie_file_is_named_not_read(
    coordinator: CoordinatorProcess, plain_xvfb: Xvfb, tmp_path: Path
) -> None:
    # libX11 and python-xlib read the whole file: a FIFO blocked doctor (and the worker's
    # display probe) forever, /dev/zero filled memory.
    worker = _worker(coordinator, tmp_path, "odd-auth", plain_xvfb.env, "--kill-hotkey", "none")
    fifo = tmp_path / "fifo.Xauthority"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.Xauthority"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder.Xauthority"
    folder.mkdir()
    for path, what in (
        (fifo, "is not a regular file"),
        (zero, "is not a regular file"),
        (folder, "is a directory"),
    ):
        worker.display_env["XAUTHORITY"] = str(path)
        code, rows = _doctor(worker, timeout=20)
        assert code == 1, rows
        assert (rows["display"]["status"], rows["display"]["detail"]) == (
            "fail",
            f"the Xauthority file {path} {what}",
        )
        assert rows["display"]["fix"].startswith("set XAUTHORITY to the X server's cookie file")
    # A file python-xlib cannot parse: its warnings went to stdout, before doctor's JSON.
    garbage = tmp_path / "garbage.Xauthority"
    garbage.write_bytes(b"garbage")
    worker.display_env["XAUTHORITY"] = str(garbage)
    code, rows = _doctor(worker, timeout=20)  # json.loads of stdout: the document alone
    assert (code, rows["input"]["status"]) == (0, "ok"), rows


def test_doctor_spells_out_an_escape_sequence_in_display(plain_xvfb: Xvfb, tmp_path: Path) -> None:
    # DISPLAY is quoted in the display check: an OSC sequence in it retitled the terminal.
    env = {
        **base_env(tmp_path),
        "HOME": str(tmp_path),
        "DISPLAY": "\x1b]0;owned\x07" + plain_xvfb.display,
    }
    done = subprocess.run(
        [str(BIN / "deskfleet-worker"), "doctor", "--state-dir", str(tmp_path / "state"),
         "--no-headless"],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert done.returncode == 1
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    display = next(line for line in done.stdout.splitlines() if line.startswith("display "))
    assert "display      FAIL    display \\x1b]0;owned\\x07" + plain_xvfb.display in display


def test_the_workers_log_spells_out_an_escape_sequence_in_display(
    coordinator: CoordinatorProcess, plain_xvfb: Xvfb, tmp_path: Path
) -> None:
    # The capability line quotes DISPLAY in computer_use's reason; --log-format text wrote it
    # to the log (and a terminal tailing it) raw.
    env = {**plain_xvfb.env, "DISPLAY": "\x1b]0;owned\x07" + plain_xvfb.display}
    worker = _worker(
        coordinator, tmp_path, "odd-display", env, "--kill-hotkey", "none", "--log-format", "text"
    )
    try:
        assert _computer_use(worker)["available"] is False
    finally:
        worker.stop()
    log = worker.log.read_text()
    assert "\x1b" not in log and "\x07" not in log
    assert "computer_use: no (display \\x1b]0;owned\\x07" in log
