"""Fixtures that start real things: coordinators, workers, Xvfb, PostgreSQL databases."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import (
    IN_CI,
    ChromiumApp,
    CoordinatorProcess,
    DesktopSite,
    WorkerProcess,
    Xvfb,
    init_store,
    initialised_database,
    postgres_available,
    scratch_database,
)
from tests.harness.ledger import Store, ledger_store

# A table fits the terminal's width, or COLUMNS. A test process has no terminal, but pytest-xdist
# starts its workers with COLUMNS=80: without this, tables would be cut in one process and
# whole in the other, and so would those of the CLI processes the tests start. A test of
# widths sets COLUMNS itself.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)


def require(condition: bool, reason: str) -> None:
    """Skip (with the reason printed) where a dependency is missing; in CI, fail instead."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The ledger in-process (tests/harness/ledger.py): a SQLite store of the test's own; a
    module with a store of another kind names its own `store`."""
    with ledger_store(tmp_path) as made:
        yield made


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """A fresh coordinator on its own SQLite store, per test."""
    proc = CoordinatorProcess(tmp_path / "coord").start()
    yield proc
    proc.stop()


# A module whose tests can share one coordinator overrides `coordinator` with this one
# (`def coordinator(module_coordinator)`): each test then makes its own workers, users and
# runs, and a test that stops, restarts or reconfigures a coordinator asks for `own_coordinator`.
# A coordinator start and stop is seconds of the two cores; most tests need neither.
@pytest.fixture(scope="module")
def module_coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    """One coordinator for every test of a module (see above)."""
    proc = CoordinatorProcess(tmp_path_factory.mktemp("module-coord")).start()
    yield proc
    proc.stop()


@pytest.fixture
def own_coordinator(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    """A coordinator of the test's own in a module that shares one."""
    proc = CoordinatorProcess(tmp_path / "own-coord").start()
    yield proc
    proc.stop()


# Whether the `workers` and `module_workers` fixtures start workers with a browser. A module
# whose workers never browse overrides it (module-scoped, returning False): each of its workers
# then runs with --no-headless and starts without launching Chromium; a test that needs one
# browsing worker there asks for it with `browser=True`.
@pytest.fixture(scope="module")
def worker_browser() -> bool:
    return True


@pytest.fixture
def workers(
    coordinator: CoordinatorProcess, tmp_path: Path, worker_browser: bool
) -> Iterator[Callable[..., WorkerProcess]]:
    """Factory of enrolled, running workers of the test's coordinator (their state in the
    test's own directory, so that tests sharing a coordinator can reuse names)."""
    started: list[WorkerProcess] = []

    def make(
        name: str,
        *,
        display_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        start: bool = True,
        browser: bool | None = None,
    ) -> WorkerProcess:
        worker = WorkerProcess(
            coordinator,
            name,
            display_env=display_env,
            extra_args=extra_args,
            home=tmp_path / "workers",
            browser=worker_browser if browser is None else browser,
        )
        started.append(worker)
        return worker.start() if start else worker

    yield make
    for worker in started:
        worker.stop()


@pytest.fixture(scope="module")
def module_workers(
    module_coordinator: CoordinatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
    worker_browser: bool,
) -> Iterator[Callable[..., WorkerProcess]]:
    """A module's worker pool on its shared coordinator: started once, stopped after the
    module's last test (each test still makes its own runs and users)."""
    home = tmp_path_factory.mktemp("module-workers")
    started: list[WorkerProcess] = []

    def make(
        name: str,
        *,
        display_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        browser: bool | None = None,
    ) -> WorkerProcess:
        worker = WorkerProcess(
            module_coordinator,
            name,
            display_env=display_env,
            extra_args=extra_args,
            home=home,
            browser=worker_browser if browser is None else browser,
        )
        started.append(worker)
        return worker.start()

    yield make
    for worker in started:
        worker.stop()


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once per session from a copy of the source (the checkout
    stays clean), for every test that installs deskfleet the way a user does: a build is
    seconds of the two cores, and the tree does not change during a run."""
    root = Path(__file__).resolve().parent.parent
    src = tmp_path_factory.mktemp("wheel-src")
    with tarfile.open(src / "src.tar", "w") as archive:
        for part in ("pyproject.toml", "coordinator", "worker_agent", "shared", "deskfleet"):
            archive.add(root / part, part, filter=lambda t: None if "__pycache__" in t.name else t)
    with tarfile.open(src / "src.tar") as archive:
        archive.extractall(src / "tree", filter="data")
    dist = tmp_path_factory.mktemp("wheel-dist")
    # --no-build-isolation: the build backend (setuptools) comes from this environment instead
    # of a new one per build; the wheel's content depends only on the tree and pyproject.toml.
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(
        [*argv, "--wheel-dir", str(dist), str(src / "tree")],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"building the wheel: {done.stdout}\n{done.stderr}"
    [built] = dist.glob("deskfleet-*.whl")
    return built


@pytest.fixture(scope="session")
def xvfb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Xvfb]:
    require(Xvfb.available(), "Xvfb and xauth are not installed (apt-get install xvfb xauth)")
    server = Xvfb(tmp_path_factory.mktemp("xvfb")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The project's local web site (scripts/local_site), served on loopback."""
    from scripts.local_site.server import start

    server, url = start()
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database on the local server, dropped afterwards."""
    if not postgres_available():
        pytest.skip("no PostgreSQL server answers on 127.0.0.1:5432")
    with scratch_database() as url:
        yield url


@pytest.fixture
def pg_store() -> Iterator[tuple[str, Path]]:
    """A new PostgreSQL database holding an initialised store (a copy of one `init` ran on
    once per test process), and the directory with its admin token and secrets key."""
    if not postgres_available():
        pytest.skip("no PostgreSQL server answers on 127.0.0.1:5432")
    with initialised_database(init_store) as store:
        yield store


@pytest.fixture(scope="session")
def desktop_site() -> Iterator[DesktopSite]:
    site = DesktopSite().start()
    yield site
    site.stop()


# Per module, not per session: another module's own window
# (tests/e2e/desktop/test_desktop_actions.py) must have the screen to itself.
@pytest.fixture(scope="module")
def window(
    xvfb: Xvfb, desktop_site: DesktopSite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], None]]:
    """A Chromium app window filling the display, with the form page; calling it gives the
    window the focus again (another test module's window may have taken it)."""
    require(shutil.which("chromium") is not None, "chromium is not installed")
    require(shutil.which("xdotool") is not None, "xdotool is not installed")
    app = ChromiumApp(xvfb.env, desktop_site.url, tmp_path_factory.mktemp("chromium-home"))
    wid = app.start()
    env = app.env

    def focus() -> None:
        # No window manager: focus does not follow clicks unless the window is given it.
        for verb in ("windowraise", "windowactivate", "windowfocus"):
            argv = ["xdotool", verb, *(["--sync"] if verb != "windowraise" else []), wid]
            subprocess.run(argv, env=env, capture_output=True, timeout=10)

    focus()
    time.sleep(1.0)  # first paint
    try:
        yield focus
    finally:
        app.stop()


# ------------------------------------------------------------------ tiers
#
# Every test gets one tier marker, from the folder it lives in:
#   tests/unit/         in process: rules, parsing, rendering, a store in a temporary file
#   tests/integration/  real coordinator, worker or database processes
#   tests/e2e/          a real browser or display (Chromium, Xvfb) besides the processes
# `slow` is set by modules left out of `make test` (which stays under 6 minutes): those whose
# tests take many seconds each and guard no ledger promise (the ledger's recovery, goals,
# postconditions and replicas stay in). CI runs them too (`make test-slow`). A test that starts
# a process belongs in integration/ or e2e/ (tests/unit/conftest.py refuses one in unit/).

TIERS = ("unit", "integration", "e2e")
TESTS = Path(__file__).resolve().parent


def tier_of(path: Path) -> str:
    """`tests/integration/runs/test_runs.py` -> `integration`."""
    parts = path.resolve().relative_to(TESTS).parts
    if not parts or parts[0] not in TIERS:
        raise pytest.UsageError(
            f"{path}: a test lives under tests/unit, tests/integration or tests/e2e"
        )
    return parts[0]


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.path)))
