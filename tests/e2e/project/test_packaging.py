"""deskfleet as users install it: the wheel, built from the source, installed into a new virtual
environment with no extras and no shared site-packages, must run: `deskfleet-worker --version`,
`deskfleet --help`, and a real headless fetch by a worker of that environment. The Linux
installer's default path (no `--deps-from`) makes that environment: it is `python3 -m venv`
and `pip install` of the wheel, what a user's own install does, so one install proves both
(resolving and unpacking the dependencies is most of this module's time).

The framework adapters' extras (`[anthropic]`, `[openai-agents]`) are installed too, both into
one more new environment: the wheelhouse holds their dependencies as well.

The project's own environment holds the dev extras and more, which can hide a dependency the
wheel does not declare; these tests do not use it for anything the wheel must bring.

Downloads are slow, so the dependencies are resolved from the package index the way a user's
`pip install` resolves them (no extras, no constraints) into a wheelhouse kept between runs
(`DESKFLEET_WHEELHOUSE`, default ~/.cache/deskfleet/wheelhouse), one per set of declared
requirements and Python version, renewed after a week so that new releases upstream are met
here before users meet them. The install then reads that wheelhouse only (`--no-index`). The
first run on a machine fills it (several minutes); later runs take well under three.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require
from tests.harness import CoordinatorProcess, base_env, tail, wait_until, write_plan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"
WHEELHOUSE_MAX_AGE = 7 * 86400
# The extras an agent developer installs for the framework adapters (deskfleet.integrations).
EXTRAS = ("anthropic", "openai-agents")
MISSING_AGENTS_SDK = (
    "deskfleet.integrations.openai_agents needs the OpenAI Agents SDK:"
    " pip install 'deskfleet[openai-agents]'"
)


def run(
    argv: list[str | Path],
    env: dict[str, str] | None = None,
    timeout: float = 900,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run to completion or fail. Give a clean environment's commands a `cwd` outside the
    checkout: `python -c` puts the working directory first on sys.path."""
    done = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def clean_env(workdir: Path, wheelhouse: Path | None = None) -> dict[str, str]:
    """An environment that cannot reach this checkout or the project's venv: no PYTHONPATH,
    the project's venv off PATH; pip reads the wheelhouse only."""
    env = base_env(workdir)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    ours = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    if wheelhouse is not None:
        env["PIP_NO_INDEX"] = "1"
        env["PIP_FIND_LINKS"] = str(wheelhouse)
    return env


def metadata_of(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode().splitlines()


def requirements_of(wheel: Path, *, extras: tuple[str, ...] = ()) -> list[str]:
    """The wheel's requirements: those with no extra, and those of `extras`."""
    wanted = {f'extra == "{extra}"' for extra in extras}
    return sorted(
        line.split(":", 1)[1].strip()
        for line in metadata_of(wheel)
        if line.startswith("Requires-Dist:")
        and ("extra ==" not in line or any(w in line for w in wanted))
    )


@pytest.fixture(scope="module")
def wheelhouse(project_wheel: Path) -> Path:
    """Every dependency of the wheel as a wheel, resolved from the package index."""
    base = Path(
        os.environ.get("DESKFLEET_WHEELHOUSE") or Path.home() / ".cache/deskfleet/wheelhouse"
    )
    key = hashlib.sha256(
        json.dumps(
            [
                requirements_of(project_wheel, extras=EXTRAS),
                platform.python_version_tuple()[:2],
                platform.machine(),
            ]
        ).encode()
    ).hexdigest()[:16]
    house = base / key
    done = house / ".complete"
    if done.exists() and time.time() - done.stat().st_mtime < WHEELHOUSE_MAX_AGE:
        return house
    fresh = base / f".{key}.{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    # `pip wheel` resolves as `pip install` does and also builds the sdists (pyautogui's
    # family) into wheels, so that the installs below need nothing but this folder. With the
    # adapters' extras: the install with no extras takes only what it needs from here.
    wanted = f"{project_wheel}[{','.join(EXTRAS)}]"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", fresh, wanted])
    (fresh / project_wheel.name).unlink(missing_ok=True)  # the one under test comes from `wheel`
    requirements = requirements_of(project_wheel, extras=EXTRAS)
    (fresh / ".complete").write_text(" ".join(requirements) + "\n")
    shutil.rmtree(house, ignore_errors=True)
    fresh.rename(house)
    return house


@dataclass
class Installed:
    """deskfleet as the Linux installer's default path left it on this machine."""

    venv: Path
    state: Path
    env: dict[str, str]
    workdir: Path
    coordinator: CoordinatorProcess
    output: str


@pytest.fixture(scope="module")
def installed(
    project_wheel: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    """One install serves both tests: the installer's default path (no --deps-from) is
    `python3 -m venv` (with its own pip, no system site-packages) then `pip install` of the
    wheel with no extras, which is exactly what a user's `pip install deskfleet-*.whl` in a new
    environment does. Resolving and unpacking the dependencies is most of this module's time,
    so it is done once. Installed for real (not staged under a DESTDIR, whose scripts name
    /opt/deskfleet), as a desktop user under a temporary HOME, and enrolled by the installer
    with the environment's own `deskfleet-worker enroll`."""
    workdir = tmp_path_factory.mktemp("installed")
    env = {k: v for k, v in clean_env(workdir, wheelhouse).items() if not k.startswith("XDG_")}
    env["HOME"] = str(workdir / "home")
    coordinator = CoordinatorProcess(workdir / "coord").start()
    try:
        done = run(
            [
                "bash",
                ROOT / "installers/linux/install.sh",
                "--desktop",
                "--coordinator",
                coordinator.address,
                "--token",
                coordinator.create_token(),
                "--name",
                "clean",
                "--wheel",
                project_wheel,
                "--python",
                "python3",
                "--no-start",  # no systemd user manager here: the test runs the worker
                "--skip-doctor",  # the real fetch below proves more than doctor's checks
            ],
            env=env,
            cwd=workdir,
        )
        yield Installed(
            venv=workdir / "home/.local/share/deskfleet/venv",
            state=workdir / "home/.local/state/deskfleet",
            env=env,
            workdir=workdir,
            coordinator=coordinator,
            output=done.stdout,
        )
    finally:
        coordinator.stop()


@pytest.fixture
def site_url() -> Iterator[str]:
    from scripts.local_site.server import start

    server, url = start()
    yield url
    server.shutdown()
    server.server_close()


@pytest.mark.integration
def test_the_linux_installer_default_path_installs_a_clean_venv_with_everything(
    installed: Installed,
) -> None:
    """No --deps-from: the installer made a venv with its own pip and installed every
    dependency into it (here from the wheelhouse, through pip's own environment variables)."""
    assert re.search(r"enrolled as wkr_\S+", installed.output), installed.output
    venv = installed.venv
    cfg = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    assert not list(venv.rglob("deskfleet-deps.pth"))  # the --deps-from link is not there
    assert (venv / "bin/pip").exists()  # its own pip, as `python3 -m venv` gives it
    probe = (
        "import sys, lxml.html.clean, trafilatura, playwright, shtab\n"
        "from worker_agent.cli import main as worker\n"
        "from coordinator.admin_cli.main import main as admin\n"
        "import worker_agent, coordinator.console.app, pathlib\n"
        "pages = pathlib.Path(coordinator.console.app.__file__).parent / 'templates'\n"
        "assert (pages / 'base.html').is_file(), 'the console templates are not installed'\n"
        "assert worker_agent.__file__.startswith(sys.prefix), worker_agent.__file__\n"
        "assert admin(['completion', 'bash']) == 0\n"
        "worker(['--version'])  # exits\n"
    )
    ran = run(
        [venv / "bin/python", "-c", probe], env=installed.env, timeout=120, cwd=installed.workdir
    )
    assert "0.1.0" in ran.stdout and "complete" in ran.stdout


@pytest.mark.e2e  # a real Chromium, driven by the clean venv's worker
def test_the_wheel_in_a_clean_venv_runs_and_fetches_a_page(
    installed: Installed, site_url: str
) -> None:
    require(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}")
    env, cwd, bin_dir = installed.env, installed.workdir, installed.venv / "bin"
    coordinator = installed.coordinator

    # The entry points, from the environment's own site-packages.
    version = run([bin_dir / "deskfleet-worker", "--version"], env=env, timeout=120, cwd=cwd)
    assert version.stdout.split()[-1] == "0.1.0"
    helped = run([bin_dir / "deskfleet", "--help"], env=env, timeout=120, cwd=cwd)
    assert "usage: deskfleet" in helped.stdout and "runs" in helped.stdout
    completion = run([bin_dir / "deskfleet", "completion", "bash"], env=env, timeout=120, cwd=cwd)
    assert "complete" in completion.stdout
    where = run(
        [bin_dir / "python", "-c", "import worker_agent; print(worker_agent.__file__)"],
        env=env,
        cwd=cwd,
        timeout=120,
    )
    assert where.stdout.startswith(str(installed.venv)), where.stdout

    # One real headless fetch: the coordinator (the project's), the worker the installer
    # enrolled, run from the clean venv.
    log = cwd / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [
                bin_dir / "deskfleet-worker",
                "run",
                "--state-dir",
                installed.state,
                "--chromium",
                CHROMIUM,
                "--no-computer-use",
            ],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=env,
            cwd=cwd,
        )
    try:

        def online() -> bool:
            if worker.poll() is not None:
                raise AssertionError(f"the clean venv's worker exited:\n{tail(log)}")
            status = coordinator.status()
            return any(w["name"] == "clean" and w["online"] for w in status["workers"])

        wait_until(online, 120, 0.5, "the clean venv's worker online")
        plan = write_plan(
            cwd / "fetch.json",
            [
                {
                    "kind": "browser.fetch",
                    "args": {"url": f"{site_url}/varn/keepers.html"},
                    "idempotent": True,
                    "route": {"capability": "headless"},
                }
            ],
        )
        # Submitted with the clean venv's CLI too.
        done = subprocess.run(
            [
                bin_dir / "deskfleet",
                "runs",
                "submit",
                plan,
                "--wait",
                "--json",
                "--coordinator",
                coordinator.address,
                "--token-file",
                str(coordinator.admin_token_file),
                "--timeout",
                "120",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=300,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{tail(log)}"
        result = json.loads(done.stdout)
        assert (result["status"], result["actions"][0]["status"]) == ("SUCCEEDED", "SUCCEEDED")
        events = coordinator.cli_json(
            "runs", "watch", result["id"], "--no-follow", "--after-seq", "0"
        )["events"]
        [receipt] = [json.loads(e["dataJson"]) for e in events if e["kind"] == "receipt"]
        assert receipt["result"]["title"] == "Varn Keepers"
        assert receipt["result"]["outcome"] == "ok" and receipt["result"]["text"]
    finally:
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


@pytest.mark.integration
def test_the_framework_adapters_install_with_their_extras(
    project_wheel: Path,
    wheelhouse: Path,
    installed: Installed,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """An agent developer's installs. With no extra (the installer's environment above) the
    Anthropic adapter imports, its SDK being a dependency, and the Agents SDK's adapter names
    the extra it needs in one line. The wheel with both extras goes into one new environment
    (each install is about a minute of the two cores, and the extras do not conflict), where
    both adapters import against their SDKs."""
    metadata = metadata_of(project_wheel)
    for extra in EXTRAS:
        assert f"Provides-Extra: {extra}" in metadata, extra
    assert [r for r in requirements_of(project_wheel, extras=("openai-agents",)) if "agents" in r]

    without = (
        "import deskfleet.integrations.anthropic as adapter\n"
        "assert adapter.FleetComputer.toolset_name == 'computer'\n"
        "try:\n"
        "    import deskfleet.integrations.openai_agents\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('the Agents SDK adapter imported without its SDK')\n"
    )
    ran = run(
        [installed.venv / "bin/python", "-c", without],
        env=installed.env,
        timeout=120,
        cwd=installed.workdir,
    )
    assert ran.stdout.strip() == MISSING_AGENTS_SDK

    workdir = tmp_path_factory.mktemp("extras")
    env = clean_env(workdir, wheelhouse)
    venv = workdir / "venv"
    run(["python3", "-m", "venv", venv], env=env, cwd=workdir)
    wanted = f"{project_wheel}[{','.join(EXTRAS)}]"
    done = run([venv / "bin/python", "-m", "pip", "install", "-q", wanted], env=env, cwd=workdir)
    # (A dependency's own missing extra may be warned about: lxml's html_clean, for one.)
    assert not re.search(r"deskfleet \S+ does not provide the extra", done.stderr), done.stderr
    with_both = (
        "import sys, agents\n"
        "from agents.computer import AsyncComputer\n"
        "from anthropic.tools import BetaAsyncAbstractComputerToolset20260801 as Toolset\n"
        "from deskfleet.integrations import anthropic, openai_agents\n"
        "assert issubclass(anthropic.FleetComputer, Toolset)\n"
        "assert issubclass(openai_agents.FleetComputer, AsyncComputer)\n"
        "assert agents.__file__.startswith(sys.prefix), agents.__file__\n"
        "print('both adapters')\n"
    )
    ran = run([venv / "bin/python", "-c", with_both], env=env, timeout=120, cwd=workdir)
    assert ran.stdout.strip() == "both adapters"
