#!/usr/bin/env bash
# Run the whole test suite (unit, integration with real processes, slow e2e). Does its own setup.
# PostgreSQL tests run when a server answers on 127.0.0.1:5432 and say why when skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -ra --durations=15 "$@"
