"""Real programs for tests and benchmarks, one module per kind of thing started:

processes  coordinators, workers and the console (`deskfleet-*` subprocesses), waits on them
client     the in-process gRPC client: plans submitted, runs waited on, journals read
x11        an X server (Xvfb)
postgres   the local PostgreSQL server: scratch databases and a relay a test can cut
sites      local web sites (desktop form page, search engines, pages hostile to the worker)

Everything starts a real program and cleans up after itself; nothing is simulated.
"""

from shared.states import STOPPED
from tests.harness.client import journal, submit, verify_journal, wait_run, write_plan
from tests.harness.postgres import (
    PG_ADMIN_URL,
    TcpProxy,
    initialised_database,
    postgres_available,
    scratch_database,
)
from tests.harness.processes import (
    BIN,
    IN_CI,
    ConsoleProcess,
    CoordinatorProcess,
    WorkerProcess,
    base_env,
    init_store,
    prepared,
    run_together,
    tail,
    wait_until,
)
from tests.harness.sites import FIELD, MARKER, DesktopSite, HostileSite, SearchSite
from tests.harness.x11 import ChromiumApp, Xvfb

__all__ = [
    "BIN",
    "FIELD",
    "IN_CI",
    "MARKER",
    "PG_ADMIN_URL",
    "STOPPED",
    "ChromiumApp",
    "ConsoleProcess",
    "CoordinatorProcess",
    "DesktopSite",
    "HostileSite",
    "SearchSite",
    "TcpProxy",
    "WorkerProcess",
    "Xvfb",
    "base_env",
    "init_store",
    "initialised_database",
    "journal",
    "postgres_available",
    "prepared",
    "run_together",
    "scratch_database",
    "submit",
    "tail",
    "verify_journal",
    "wait_run",
    "wait_until",
    "write_plan",
]
