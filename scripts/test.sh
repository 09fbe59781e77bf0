#!/usr/bin/env bash
# Run the whole test suite (unit, integration with real processes, slow e2e). Does its own setup.
# PostgreSQL tests run when a server answers on 127.0.0.1:5432 and say why when skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Which tests: by default all but the modules marked `slow` (`make test`, under 6 minutes on a
# fresh clone of a two-core machine); `--all` every test (`make test-all`, what CI runs, in two
# steps); `--slow` the slow ones alone. Further arguments go to pytest.
select=(-m "not slow")
case "${1:-}" in
  --all) select=(); shift ;;
  --slow) select=(-m slow); shift ;;
esac
# Two test processes by default (DESKFLEET_TEST_PROCESSES=N for N; 0 runs in this process), a
# module at a time each, their displays apart. Serially the two cores are busy only about 40%
# of the time: much of a real-process test waits (for a lease, a heartbeat, a page) while the
# other core is idle.
exec .venv/bin/python -m pytest -ra --durations=15 -n "${DESKFLEET_TEST_PROCESSES:-2}" --dist loadfile \
  ${select[@]+"${select[@]}"} "$@"
