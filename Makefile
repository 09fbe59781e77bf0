.PHONY: setup test test-fast test-unit demo bench bench-quick proto lint

setup:
	bash scripts/setup.sh

# The whole suite, slow end-to-end tests included (what CI runs).
test:
	bash scripts/test.sh

# Everything but the tests marked slow.
test-fast:
	bash scripts/test.sh -m "not slow"

# The in-process tier only (tests/unit/): the ledger's rules, parsing, rendering; no program
# is started (tests/unit/conftest.py refuses one), about 20 s.
test-unit:
	bash scripts/test.sh -m unit

demo:
	bash scripts/demo.sh

# Every SPEC §6 figure beside its baseline (bench/suite.py): bench/results/latest.json and
# docs/BENCHMARKS.md. For releases, on a quiet machine.
bench: setup
	.venv/bin/python -m bench.suite

# The same figures at smaller sizes (under 3 minutes): bench/results/quick.json, then its shape
# is checked; a failed benchmark still fails the target after the check.
bench-quick: setup
	.venv/bin/python -m bench.suite --quick; status=$$?; \
	.venv/bin/python -m bench.validate bench/results/quick.json && exit $$status

# ruff and mypy (strict) on the hand-written code; CI runs this too.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

# Regenerate shared/gen from protos/ (a test fails when they differ).
proto: setup
	.venv/bin/python scripts/gen_protos.py
