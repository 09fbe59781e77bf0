"""deskfleet as users install it: the wheel, built from the source, installed into a new virtual
environment with no extras and no shared site-packages, must run: `deskfleet-worker --version`,
`deskfleet --help`, and a real headless fetch by a worker of that environment. The Linux
installer's default path (no `--deps-from`) is exercised too.

The project's own environment holds the dev extras and more, which can hide a dependency the
wheel does not declare; these tests do not use it for anything the wheel must bring.

Downloads are slow, so the dependencies are resolved from the package index the way a user's
`pip install` resolves them (no extras, no constraints) into a wheelhouse kept between runs
(`DESKFLEET_WHEELHOUSE`, default ~/.cache/deskfleet/wheelhouse), one per set of declared
requirements and Python version, renewed after a week so that new releases upstream are met
here before users meet them. The installs then read that wheelhouse only (`--no-index`). The
first run on a machine fills it (several minutes); later runs take well under three.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.harness import CoordinatorProcess, base_env, tail, wait_until, write_plan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
WHEELHOUSE_MAX_AGE = 7 * 86400


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


def requirements_of(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    return sorted(
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from a copy of the source (the checkout stays clean)."""
    src = tmp_path_factory.mktemp("src")
    with tarfile.open(src / "src.tar", "w") as archive:
        for part in ("pyproject.toml", "coordinator", "worker_agent", "shared"):
            archive.add(
                ROOT / part,
                part,
                filter=lambda t: None if "__pycache__" in t.name else t,
            )
    with tarfile.open(src / "src.tar") as archive:
        archive.extractall(src / "tree", filter="data")
    dist = tmp_path_factory.mktemp("dist")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--wheel-dir",
            dist,
            src / "tree",
        ]
    )
    [built] = dist.glob("deskfleet-*.whl")
    return built


@pytest.fixture(scope="module")
def wheelhouse(wheel: Path) -> Path:
    """Every dependency of the wheel as a wheel, resolved from the package index."""
    base = Path(
        os.environ.get("DESKFLEET_WHEELHOUSE") or Path.home() / ".cache/deskfleet/wheelhouse"
    )
    key = hashlib.sha256(
        json.dumps(
            [requirements_of(wheel), platform.python_version_tuple()[:2], platform.machine()]
        ).encode()
    ).hexdigest()[:16]
    house = base / key
    done = house / ".complete"
    if done.exists() and time.time() - done.stat().st_mtime < WHEELHOUSE_MAX_AGE:
        return house
    fresh = base / f".{key}.{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    # `pip wheel` resolves as `pip install` does and also builds the sdists (pyautogui's
    # family) into wheels, so that the installs below need nothing but this folder.
    run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", fresh, wheel])
    (fresh / wheel.name).unlink(missing_ok=True)  # the one under test comes from `wheel`
    (fresh / ".complete").write_text(" ".join(requirements_of(wheel)) + "\n")
    shutil.rmtree(house, ignore_errors=True)
    fresh.rename(house)
    return house


@pytest.fixture
def site_url() -> Iterator[str]:
    from scripts.local_site.server import start

    server, url = start()
    yield url
    server.shutdown()
    server.server_close()


@pytest.mark.e2e  # a real Chromium, driven by the clean venv's worker
def test_the_wheel_in_a_clean_venv_runs_and_fetches_a_page(
    wheel: Path, wheelhouse: Path, site_url: str, tmp_path: Path
) -> None:
    require(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}")
    venv = tmp_path / "venv"
    env = clean_env(tmp_path, wheelhouse)
    run(["python3", "-m", "venv", venv], env=env, cwd=tmp_path)  # no --system-site-packages
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    bin_dir = venv / "bin"
    run(
        [bin_dir / "pip", "install", "-q", "--disable-pip-version-check", wheel],
        env=env,
        cwd=tmp_path,
    )

    # The entry points, from the environment's own site-packages.
    version = run([bin_dir / "deskfleet-worker", "--version"], env=env, timeout=120, cwd=tmp_path)
    assert version.stdout.split()[-1] == "0.1.0"
    helped = run([bin_dir / "deskfleet", "--help"], env=env, timeout=120, cwd=tmp_path)
    assert "usage: deskfleet" in helped.stdout and "runs" in helped.stdout
    completion = run(
        [bin_dir / "deskfleet", "completion", "bash"], env=env, timeout=120, cwd=tmp_path
    )
    assert "complete" in completion.stdout
    where = run(
        [bin_dir / "python", "-c", "import worker_agent; print(worker_agent.__file__)"],
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert where.stdout.startswith(str(venv)), where.stdout

    # One real headless fetch: a coordinator (the project's), a worker of the clean venv.
    coordinator = CoordinatorProcess(tmp_path / "coord").start()
    worker: subprocess.Popen[str] | None = None
    state = tmp_path / "worker-state"
    log = tmp_path / "worker.log"
    try:
        token = coordinator.create_token()
        run(
            [
                bin_dir / "deskfleet-worker",
                "enroll",
                "--coordinator",
                coordinator.address,
                "--token",
                token,
                "--state-dir",
                state,
                "--name",
                "clean",
            ],
            env=env,
            cwd=tmp_path,
            timeout=120,
        )
        with log.open("w") as out:
            worker = subprocess.Popen(
                [
                    bin_dir / "deskfleet-worker",
                    "run",
                    "--state-dir",
                    state,
                    "--chromium",
                    CHROMIUM,
                    "--no-computer-use",
                ],
                stdout=subprocess.DEVNULL,
                stderr=out,
                env=env,
                cwd=tmp_path,
            )

        def online() -> bool:
            if worker is not None and worker.poll() is not None:
                raise AssertionError(f"the clean venv's worker exited:\n{tail(log)}")
            status = coordinator.status()
            return any(w["name"] == "clean" and w["online"] for w in status["workers"])

        wait_until(online, 120, 0.5, "the clean venv's worker online")
        plan = write_plan(
            tmp_path / "fetch.json",
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
            cwd=tmp_path,
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
        if worker is not None and worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        coordinator.stop()


@pytest.mark.integration
def test_the_linux_installer_default_path_installs_a_worker_that_runs(
    wheel: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    """No --deps-from: the installer makes a venv with its own pip and installs every
    dependency into it (here from the wheelhouse, through pip's own environment variables)."""
    root = tmp_path / "root"
    env = clean_env(tmp_path, wheelhouse)
    done = run(
        [
            "bash",
            ROOT / "installers/linux/install.sh",
            "--headless",
            "--destdir",
            root,
            "--wheel",
            wheel,
            "--python",
            "python3",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert "staged under" in done.stdout
    venv = root / "opt/deskfleet/venv"
    cfg = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    assert not list(venv.rglob("deskfleet-deps.pth"))  # the --deps-from link is not there
    # The staged scripts name their final place (/opt/deskfleet), so run the entry points'
    # modules with the staged interpreter instead.
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
    ran = run([venv / "bin/python", "-c", probe], env=env, timeout=120, cwd=tmp_path)
    assert "0.1.0" in ran.stdout and "complete" in ran.stdout
