"""The installers: Linux for real (staged into a DESTDIR root, and end to end on this machine),
the macOS plists, and the Windows PowerShell script.

The installs reuse the project's virtual environment for the dependencies (`--deps-from`), so
that they take seconds and need no package index. The project itself is installed into a new
environment: from its source (the installer's default, as from a checkout) by the end-to-end
desktop test, which runs that environment's entry point; from the session's wheel (`--wheel`,
built once from the same tree) by the others, which are about what the installers write around
it and would otherwise each build the same wheel again.
"""

from __future__ import annotations

import json
import os
import plistlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.harness import BIN, CoordinatorProcess, Xvfb, base_env, tail, wait_until

ROOT = Path(__file__).resolve().parents[3]
LINUX = ROOT / "installers" / "linux"
DEPS = Path(sys.executable).parent.parent  # the project's .venv
UNIT = "deskfleet-worker.service"


def sh(
    *argv: str | Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env or os.environ.copy(),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def unit_entries(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file as {section: [(key, value), ...]} (keys may repeat, as systemd allows)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        key, _, value = line.partition("=")
        current.append((key, value))
    return sections


def values(sections: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    return [v for k, v in sections.get(section, []) if k == key]


def one(sections: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    found = values(sections, section, key)
    assert len(found) == 1, f"[{section}] {key}: {found}"
    return found[0]


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def require_systemd_analyze() -> None:
    require(
        shutil.which("systemd-analyze") is not None,
        "systemd-analyze is missing (apt-get install systemd; scripts/setup.sh does it)",
    )


@pytest.fixture
def wheel(project_wheel: Path) -> tuple[str, str]:
    """The installer's arguments that install the session's wheel instead of building one."""
    return ("--wheel", str(project_wheel))


@pytest.fixture
def system_units(tmp_path: Path) -> Iterator[None]:
    """Nothing of the staged tests may land on this machine's own system folders."""
    ours = [Path("/etc/systemd/system") / UNIT, Path("/opt/deskfleet"), Path("/var/lib/deskfleet")]
    before = {p: p.exists() for p in ours}
    yield
    assert {p: p.exists() for p in ours} == before


# --- Linux, staged into a DESTDIR root ------------------------------------------------------


def test_headless_staged_twice_verifies_is_hardened_and_uninstalls_to_nothing(
    tmp_path: Path, system_units: None, wheel: tuple[str, str]
) -> None:
    require_systemd_analyze()
    root = tmp_path / "root"
    install = [LINUX / "install.sh", "--headless", "--destdir", root, "--deps-from", DEPS, *wheel]
    first = ok(sh(*install))
    assert "not enrolling" in first.stdout
    second = ok(sh(*install))  # idempotent: same tree, no error
    assert "staged under" in second.stdout

    unit = root / "etc/systemd/system" / UNIT
    entries = unit_entries(unit)
    service = dict(entries["Service"])
    # The hardening the issue asks for, and the rest of what keeps the service contained.
    expected = {
        "User": "deskfleet",
        "Group": "deskfleet",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "StateDirectory": "deskfleet",
        "StateDirectoryMode": "0700",
        "CapabilityBoundingSet": "",
        "RestrictSUIDSGID": "yes",
        "UMask": "0077",
        "RestartPreventExitStatus": "3",
    }
    assert {k: service.get(k) for k in expected} == expected
    assert "MemoryDenyWriteExecute" not in service  # Chromium's JIT needs it off
    argv = shlex.split(service["ExecStart"])
    assert argv == [
        "/opt/deskfleet/venv/bin/deskfleet-worker",
        "run",
        "--state-dir",
        "/var/lib/deskfleet",
        "--no-computer-use",
    ]
    assert one(entries, "Install", "WantedBy") == "multi-user.target"
    assert (root / "etc/sysusers.d/deskfleet.conf").read_text().splitlines()[-1] == (
        'u deskfleet - "deskfleet worker" /var/lib/deskfleet /usr/sbin/nologin'
    )

    # The staged environment names its final place, never the staging root.
    venv_bin = root / "opt/deskfleet/venv/bin"
    assert (venv_bin / "deskfleet-worker").read_text().splitlines()[0] == (
        "#!/opt/deskfleet/venv/bin/python"
    )
    for path in [*venv_bin.iterdir(), venv_bin.parent / "pyvenv.cfg"]:
        if path.is_file() and not path.is_symlink():
            assert str(root) not in path.read_text(errors="replace"), path

    # systemd's own checker, on the staged tree (it resolves ExecStart under --root; the
    # unit's dependencies come from a copy of this machine's units, removed afterwards).
    units = root / "usr/lib/systemd/system"
    shutil.copytree("/usr/lib/systemd/system", units, symlinks=True)
    try:
        verify = subprocess.run(
            ["systemd-analyze", "verify", f"--root={root}", f"/etc/systemd/system/{UNIT}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (verify.returncode, verify.stderr, verify.stdout) == (0, "", "")
        security = subprocess.run(
            [
                "systemd-analyze",
                "security",
                "--offline=true",
                f"--root={root}",
                f"/etc/systemd/system/{UNIT}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        exposure = re.search(r"Overall exposure level for \S+: ([\d.]+)", security.stdout)
        assert exposure, security.stdout + security.stderr
        assert float(exposure.group(1)) <= 4.0  # systemd rates this "OK"
    finally:
        shutil.rmtree(root / "usr")

    # The uninstaller travels with the install; removing leaves nothing behind.
    done = ok(sh(root / "opt/deskfleet/uninstall.sh", "--destdir", root))
    assert "no enrollment was found" in done.stdout
    assert files_under(root) == []
    assert "nothing to remove" in ok(sh(LINUX / "uninstall.sh", "--destdir", root)).stdout


def test_desktop_staged_units_start_in_the_graphical_session(
    tmp_path: Path, system_units: None, wheel: tuple[str, str]
) -> None:
    require_systemd_analyze()
    root, home = tmp_path / "root", tmp_path / "home"
    env = {k: v for k, v in base_env(tmp_path).items() if not k.startswith("XDG_")}
    env["HOME"] = str(home)
    ok(
        sh(
            LINUX / "install.sh",
            "--desktop",
            "--destdir",
            root,
            "--deps-from",
            DEPS,
            *wheel,
            env=env,
        )
    )

    staged_home = root / str(home).lstrip("/")
    unit = staged_home / ".config/systemd/user" / UNIT
    entries = unit_entries(unit)
    assert one(entries, "Unit", "PartOf") == "graphical-session.target"
    assert one(entries, "Unit", "After") == "graphical-session.target"
    assert values(entries, "Unit", "ConditionEnvironment") == ["|DISPLAY", "|WAYLAND_DISPLAY"]
    assert one(entries, "Install", "WantedBy") == "graphical-session.target"
    service = dict(entries["Service"])
    assert service["NoNewPrivileges"] == "yes"
    assert "PrivateTmp" not in service  # the X server's socket is in /tmp/.X11-unix
    worker = f"{home}/.local/share/deskfleet/venv/bin/deskfleet-worker"
    state = f"{home}/.local/state/deskfleet"
    assert shlex.split(service["ExecStart"]) == [worker, "run", "--state-dir", state]

    # At login the desktop runs the session script, which hands the display to the unit.
    autostart = staged_home / ".config/autostart/deskfleet-worker.desktop"
    entry = dict(line.split("=", 1) for line in autostart.read_text().splitlines() if "=" in line)
    session_start = f"{home}/.local/share/deskfleet/bin/deskfleet-session-start"
    assert (entry["Type"], entry["Exec"]) == ("Application", session_start)
    script = root / session_start.lstrip("/")
    assert os.access(script, os.X_OK)
    assert "import-environment" in script.read_text()

    # systemd-analyze has no --root for user units: check a copy whose ExecStart points into
    # the staging root (the end-to-end test checks the installed unit itself).
    check = tmp_path / "verify" / UNIT
    check.parent.mkdir()
    check.write_text(unit.read_text().replace(f'"{worker}"', f'"{root}{worker}"'))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    verify = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(check)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env | {"XDG_RUNTIME_DIR": str(runtime)},
    )
    assert (verify.returncode, verify.stderr) == (0, "")

    prefix = root / str(home).lstrip("/") / ".local/share/deskfleet"
    ok(sh(prefix / "uninstall.sh", "--destdir", root, env=env))
    assert files_under(root) == []


# --- Linux, end to end on this machine ------------------------------------------------------


@pytest.mark.slow
def test_desktop_install_enrolls_runs_from_its_entry_point_and_uninstalls(
    coordinator: CoordinatorProcess, xvfb: Xvfb, tmp_path: Path, wheel: tuple[str, str]
) -> None:
    """Install under a temporary HOME, enroll, run the unit's own command, see it online."""
    require_systemd_analyze()
    home = tmp_path / "home"
    env = {k: v for k, v in base_env(tmp_path).items() if not k.startswith("XDG_")}
    env |= {"HOME": str(home)} | xvfb.env  # as from a terminal in the graphical session
    token = coordinator.create_token()
    install = [LINUX / "install.sh", "--desktop", "--coordinator", coordinator.address]
    done = ok(sh(*install, "--token", token, "--deps-from", DEPS, "--label", "site=e2e", env=env))
    assert "enrolled as wkr_" in done.stdout
    assert "all checks passed" in done.stdout, done.stdout  # doctor ran at the end
    state = home / ".local/state/deskfleet"
    worker_id = json.loads((state / "worker.json").read_text())["worker_id"]

    # Again: an upgrade in place that keeps the enrollment (and needs no token); from the
    # wheel, as the first install covered the build from the source.
    again = ok(sh(*install, "--deps-from", DEPS, *wheel, "--skip-doctor", env=env))
    assert "already holds an enrollment; keeping it" in again.stdout

    unit = home / ".config/systemd/user" / UNIT
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    verify = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env | {"XDG_RUNTIME_DIR": str(runtime)},
    )
    assert (verify.returncode, verify.stderr) == (0, "")

    # No systemd user manager runs here: run exactly what the unit would, in the session.
    argv = shlex.split(one(unit_entries(unit), "Service", "ExecStart"))
    venv = home / ".local/share/deskfleet/venv"
    assert argv[0] == str(venv / "bin/deskfleet-worker")
    # The code that runs is the copy installed into the new environment, not the checkout.
    # (Without PYTHONPATH, which may name a checkout and would win over site-packages.)
    where = subprocess.run(
        [venv / "bin/python", "-c", "import worker_agent; print(worker_agent.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        env={k: v for k, v in env.items() if k != "PYTHONPATH"},
    )
    assert where.stdout.startswith(str(venv / "lib")), where.stdout
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, env=env, cwd=tmp_path)
    try:

        def online() -> dict[str, object] | None:
            assert proc.poll() is None, tail(log)
            status = coordinator.status()
            row = next((w for w in status["workers"] if w["id"] == worker_id), None)
            return status if row and row["online"] else None

        status = wait_until(online, 60, 0.2, "the installed worker online")
        assert (status["headlessOnline"], status["computerUseOnline"]) == (1, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)

    done = ok(sh(home / ".local/share/deskfleet/uninstall.sh", env=env))
    assert f"nothing was revoked: worker {worker_id}" in done.stdout
    assert f"deskfleet workers revoke {worker_id} --coordinator {coordinator.address}" in (
        done.stdout
    )
    assert [p for p in home.rglob("*") if "deskfleet" in p.name] == []
    shown = coordinator.cli_json("workers", "show", worker_id)
    assert shown["state"] == "active"  # uninstalling revoked nothing by itself


def desktop_env(tmp_path: Path) -> dict[str, str]:
    """A terminal's environment without a display, under a temporary HOME."""
    env = {k: v for k, v in base_env(tmp_path).items() if not k.startswith("XDG_")}
    env = {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    return env | {"HOME": str(tmp_path / "home")}


@pytest.mark.slow
def test_install_with_the_ca_file_enrolls_over_mutual_tls_and_the_unit_connects(
    tmp_path: Path, wheel: tuple[str, str]
) -> None:
    """A TLS coordinator (as tests/integration/security/test_tls.py makes one): --ca-file
    reaches enroll, which keeps the CA and a client certificate in the state folder; the
    unit's own command then connects over mutual TLS with no flag of its own."""
    ca_dir = tmp_path / "ca"
    made = subprocess.run(
        [BIN / "deskfleet-coordinator", "ca", "init", "--dir", ca_dir],
        capture_output=True,
        text=True,
        env=base_env(tmp_path),
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    ca_pem = ca_dir / "ca.pem"
    serve_args = ("--tls-cert", str(ca_dir / "server.pem"), "--tls-key", str(ca_dir / "server.key"))
    coordinator = CoordinatorProcess(
        tmp_path / "coord", serve_args=(*serve_args, "--ca-dir", str(ca_dir)), ca_file=ca_pem
    ).start()
    try:
        env = desktop_env(tmp_path)
        home = Path(env["HOME"])
        token = coordinator.create_token()
        done = ok(
            sh(
                *(LINUX / "install.sh", "--desktop", "--deps-from", DEPS, *wheel, "--no-start"),
                *("--coordinator", coordinator.address, "--token", token, "--ca-file", ca_pem),
                "--skip-doctor",
                env=env,
            )
        )
        assert re.search(r"enrolled as wkr_\S+ \(with a client certificate\)", done.stdout)
        state = home / ".local/state/deskfleet"
        assert (state / "ca.pem").read_bytes() == ca_pem.read_bytes()
        assert (state / "client.pem").exists() and (state / "client.key").exists()
        identity = json.loads((state / "worker.json").read_text())
        assert identity["plaintext"] is False
        assert identity["stream_coordinators"] == [f"127.0.0.1:{coordinator.worker_port}"]

        # The service runs without --ca-file: enroll stored what it needs.
        unit = home / ".config/systemd/user" / UNIT
        argv = shlex.split(one(unit_entries(unit), "Service", "ExecStart"))
        assert argv[1:] == ["run", "--state-dir", str(state)]
        log = tmp_path / "worker.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [*argv, "--no-computer-use"], stdout=out, stderr=out, env=env, cwd=tmp_path
            )
        try:

            def online() -> bool:
                assert proc.poll() is None, tail(log)
                rows = coordinator.status()["workers"]
                return any(w["id"] == identity["worker_id"] and w["online"] for w in rows)

            wait_until(online, 60, 0.2, "the installed worker online over mutual TLS")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    finally:
        coordinator.stop()


@pytest.mark.slow
def test_plaintext_beyond_loopback_is_refused_then_passed_through(
    coordinator: CoordinatorProcess, tmp_path: Path, wheel: tuple[str, str]
) -> None:
    """A coordinator list with one address beyond this machine: enroll refuses plaintext
    without --plaintext (and the same command can be run again), and takes it with the flag.
    The loopback address comes first, so the enrollment itself needs no network."""
    env = desktop_env(tmp_path)
    addresses = f"{coordinator.address},fleet.invalid:50051"
    install = [LINUX / "install.sh", "--desktop", "--deps-from", DEPS, *wheel, "--skip-doctor"]
    install += ["--no-start", "--coordinator", addresses, "--token", coordinator.create_token()]
    refused = sh(*install, env=env)
    assert refused.returncode != 0
    assert "refusing plaintext to fleet.invalid:50051" in refused.stderr
    state = Path(env["HOME"]) / ".local/state/deskfleet"
    assert not (state / "credential").exists()

    done = ok(sh(*install, "--plaintext", env=env))  # the retry is not refused its prefix
    assert "(in plaintext)" in done.stdout
    assert "plaintext connection to fleet.invalid:50051" in done.stderr  # enroll's warning
    identity = json.loads((state / "worker.json").read_text())
    assert (identity["plaintext"], identity["coordinators"]) == (
        True,
        [coordinator.address, "fleet.invalid:50051"],
    )


def test_dry_run_stages_into_a_new_folder_and_says_where(
    tmp_path: Path, system_units: None, wheel: tuple[str, str]
) -> None:
    env = os.environ | {"TMPDIR": str(tmp_path)}
    done = ok(
        sh(LINUX / "install.sh", "--headless", "--dry-run", "--deps-from", DEPS, *wheel, env=env)
    )
    staged = re.search(r"staged under (\S+) ", done.stdout)
    assert staged, done.stdout
    root = Path(staged.group(1))
    assert root.parent == tmp_path
    assert (root / "etc/systemd/system" / UNIT).exists()
    ok(sh(LINUX / "uninstall.sh", "--headless", "--destdir", root))
    assert files_under(root) == []


# --- macOS: the launchd plists ---------------------------------------------------------------

MACOS = ROOT / "installers" / "macos"
CHROME = "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"


def test_macos_plists_parse_and_run_the_worker_in_the_right_session(
    tmp_path: Path, wheel: tuple[str, str]
) -> None:
    for template in sorted(MACOS.glob("*.plist")):
        with template.open("rb") as fh:
            assert plistlib.load(fh)["Label"] == "com.deskfleet.worker", template

    # The install script renders them (staged: launchctl and dscl are macOS's own, and the
    # script refuses to touch a Linux machine for real; it runs staged anywhere).
    root, home = tmp_path / "root", tmp_path / "home"
    env = base_env(tmp_path) | {"HOME": str(home)}
    install = [MACOS / "install.sh", "--destdir", root, "--deps-from", DEPS, *wheel]
    ok(sh(*install, "--desktop", "--chromium", CHROME, env=env))
    ok(sh(*install, "--headless", env=env))

    def load(path: str) -> dict[str, object]:
        with (root / path.lstrip("/")).open("rb") as fh:
            job: dict[str, object] = plistlib.load(fh)
        return job

    agent = load(f"{home}/Library/LaunchAgents/com.deskfleet.worker.plist")
    worker = f"{home}/Library/deskfleet/venv/bin/deskfleet-worker"
    assert agent["ProgramArguments"] == [
        worker,
        "run",
        "--state-dir",
        f"{home}/Library/Application Support/deskfleet",
        "--chromium",
        CHROME,
    ]
    assert (root / worker.lstrip("/")).exists()
    # In the user's GUI (Aqua) session, where the screen and input are; as that user.
    assert agent["LimitLoadToSessionType"] == "Aqua"
    assert agent["ProcessType"] == "Interactive"
    assert "UserName" not in agent
    assert (agent["RunAtLoad"], agent["KeepAlive"]) == (True, {"SuccessfulExit": False})
    assert agent["Umask"] == 0o077
    assert agent["StandardErrorPath"] == f"{home}/Library/Logs/deskfleet/worker.log"

    daemon = load("/Library/LaunchDaemons/com.deskfleet.worker.plist")
    state = "/Library/Application Support/deskfleet"
    assert daemon["ProgramArguments"] == [
        "/usr/local/deskfleet/venv/bin/deskfleet-worker",
        "run",
        "--state-dir",
        state,
        "--no-computer-use",
    ]
    # At boot, without a GUI session, under its own unprivileged user.
    assert "LimitLoadToSessionType" not in daemon
    assert (daemon["UserName"], daemon["GroupName"]) == ("_deskfleet", "_deskfleet")
    assert daemon["EnvironmentVariables"] == {"PYTHONUNBUFFERED": "1", "HOME": state}
    assert (daemon["WorkingDirectory"], daemon["Umask"]) == (state, 0o077)

    ok(sh(root / str(home).lstrip("/") / "Library/deskfleet/uninstall.sh", "--destdir", root))
    ok(sh(root / "usr/local/deskfleet/uninstall.sh", "--destdir", root))
    assert files_under(root) == []

    done = sh(MACOS / "install.sh", "--coordinator", "127.0.0.1:1", "--token", "x", env=env)
    if sys.platform != "darwin":
        assert done.returncode == 1
        assert "this installer is for macOS" in done.stderr


# --- Windows: the PowerShell scripts -------------------------------------------------------

WINDOWS = ROOT / "installers" / "windows"

# What install.ps1 must do, as the commands (or arguments) that do it. Checked by text because
# PowerShell cannot be installed here (it is not in Debian's archive, and its npm and NuGet
# packages download the binaries from elsewhere); where `pwsh` exists, the scripts are parsed
# by PowerShell's own parser too.
INSTALL_MUST_CONTAIN = {
    "stops at the first error": r"\$ErrorActionPreference = 'Stop'",
    "strict mode": r"Set-StrictMode -Version Latest",
    "creates the venv": r"@\('-m', 'venv', \$Venv\)",
    "installs with pip": r"'-m', 'pip', 'install'",
    "enrolls with the token": r"@\('enroll', '--coordinator', \$Coordinator, '--token', \$Token",
    "passes the CA file to enroll": r"\$enrollArgs \+= @\('--ca-file', \$CaFile\)",
    "passes plaintext to enroll": r"if \(\$Plaintext\) \{ \$enrollArgs \+= '--plaintext' \}",
    "refuses a missing CA file": r"Test-Path -LiteralPath \$CaFile -PathType Leaf",
    "locks the state folder down": r"icacls\.exe.*'/inheritance:r'",
    "desktop: a task at logon": r"New-ScheduledTaskTrigger -AtLogOn -User \$user",
    "desktop: in the interactive session": r"-UserId \$user -LogonType Interactive",
    "headless: at boot": r"New-ScheduledTaskTrigger -AtStartup",
    "headless: a service account": (
        r"-UserId 'NT AUTHORITY\\NETWORK SERVICE' -LogonType ServiceAccount"
    ),
    "headless: no desktop control": r"'--no-computer-use'",
    "registers the task": r"Register-ScheduledTask -TaskName \$TaskName",
    "starts it": r"Start-ScheduledTask -TaskName \$TaskName",
    "stops retrying when refused (exit 3)": r"ExitCode -eq 3",
    "runs doctor at the end": r"\$doctorArgs = @\('doctor', '--state-dir', \$StateDir\)",
    "ships its uninstaller": r"Copy-Item .*'uninstall\.ps1'",
}
UNINSTALL_MUST_CONTAIN = {
    "stops at the first error": r"\$ErrorActionPreference = 'Stop'",
    "removes the task": r"Unregister-ScheduledTask -TaskName \$installed\.taskName",
    "removes the state": r"Remove-Item -Recurse -Force \$StateDir",
    "removes the install": r"Remove-Item -Recurse -Force \$Prefix",
    "says how to revoke": r"deskfleet workers revoke \$\(\$worker\.worker_id\)",
}


@pytest.mark.parametrize(
    ("script", "must"),
    [("install.ps1", INSTALL_MUST_CONTAIN), ("uninstall.ps1", UNINSTALL_MUST_CONTAIN)],
)
def test_windows_scripts_do_what_they_must(script: str, must: dict[str, str]) -> None:
    text = (WINDOWS / script).read_text()
    missing = [what for what, pattern in must.items() if not re.search(pattern, text)]
    assert missing == []
    pwsh = shutil.which("pwsh")
    if pwsh:
        parse = (
            "$errors = $null; [System.Management.Automation.Language.Parser]::ParseFile("
            f"'{WINDOWS / script}', [ref]$null, [ref]$errors) | Out-Null; "
            "$errors | ForEach-Object { $_.ToString() }"
        )
        done = subprocess.run(
            [pwsh, "-NoProfile", "-NonInteractive", "-Command", parse],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
