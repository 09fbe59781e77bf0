#!/usr/bin/env bash
# Run the whole test suite (unit, integration with real processes, slow e2e). Does its own setup.
# PostgreSQL tests run when a server answers on 127.0.0.1:5432 and say why when skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# DESKFLEET_TEST_PROCESSES=N runs N test processes (a module per process; displays apart). One
# by default: on two cores, two processes and their coordinators, workers and browsers finished
# no sooner and stretched timing-sensitive tests.
exec .venv/bin/python -m pytest -ra --durations=15 -n "${DESKFLEET_TEST_PROCESSES:-0}" --dist loadfile "$@"
