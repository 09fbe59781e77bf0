.PHONY: setup test test-fast demo bench bench-quick proto lint

setup:
	bash scripts/setup.sh

# The whole suite, slow end-to-end tests included (what CI runs).
test:
	bash scripts/test.sh

# Everything but the tests marked slow.
test-fast:
	bash scripts/test.sh -m "not slow"

demo:
	bash scripts/demo.sh

bench: setup
	.venv/bin/python bench/fleet_status.py
	.venv/bin/python bench/runs.py
	.venv/bin/python bench/kill_switch.py
	.venv/bin/python bench/replicas.py
	.venv/bin/python bench/screenshot.py
	.venv/bin/python bench/research.py
	.venv/bin/python bench/goal.py
	.venv/bin/python bench/tls_auth.py

bench-quick: setup
	.venv/bin/python bench/fleet_status.py --quick
	.venv/bin/python bench/runs.py --quick
	.venv/bin/python bench/kill_switch.py --quick
	.venv/bin/python bench/replicas.py --quick
	.venv/bin/python bench/screenshot.py --quick
	.venv/bin/python bench/research.py --quick
	.venv/bin/python bench/goal.py --quick
	.venv/bin/python bench/tls_auth.py --quick

# ruff and mypy (strict) on the hand-written code; CI runs this too.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

# Regenerate shared/gen from protos/ (a test fails when they differ).
proto: setup
	.venv/bin/python scripts/gen_protos.py
