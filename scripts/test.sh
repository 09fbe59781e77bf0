#!/usr/bin/env bash
# Run the whole test suite (unit, integration with real processes, slow e2e). Does its own setup.
# PostgreSQL tests run when a server answers on 127.0.0.1:5432 and say why when skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two test processes: most tests wait on real processes (leases, browsers, streams), so two
# interleave well on two cores. Each module stays in one process (its fixtures are shared).
exec .venv/bin/python -m pytest -ra --durations=15 -n "${DESKFLEET_TEST_PROCESSES:-2}" --dist loadfile "$@"
