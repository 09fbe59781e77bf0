"""Runs as their owners see them: plans submitted and checked (`service`, `plan`), their
timelines, exact recall of their journals, per-owner quotas, the kill switch and the search
indexer; the kinds of run with rules of their own live in `research/` and `desktop/`."""
