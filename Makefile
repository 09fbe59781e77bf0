.PHONY: setup test test-all test-slow test-unit demo bench bench-quick proto lint

setup:
	bash scripts/setup.sh

# The suite but the modules marked slow: under 6 minutes on a fresh clone (two cores).
test:
	bash scripts/test.sh

# Every test, the slow modules included (CI runs `test` and then `test-slow`).
test-all:
	bash scripts/test.sh --all

# The modules marked slow alone: the browser leak check, the research and browser suites,
# fuzzing, the installers, presence and TLS timing.
test-slow:
	bash scripts/test.sh --slow

# The in-process tier only (tests/unit/): the ledger's rules, parsing, rendering; no program
# is started (tests/unit/conftest.py refuses one), about 45 s on two cores (docs/TESTING.md).
test-unit:
	bash scripts/test.sh --all -m unit

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
