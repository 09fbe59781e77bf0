"""docs/BENCHMARKS.md from a suite document: the figures, the machine, the date, the command.

.venv/bin/python -m bench.report bench/results/latest.json [docs/BENCHMARKS.md]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from bench import figures

# The design notes that go with the figures (hand-written, rendered below them).
HOT_PATH = Path(__file__).with_name("hot_path.md")
HOW_TO_READ = """\
## How to read this

Each figure stands beside a baseline measured in the same run, on the same machine, right
before or after it: the ratio (figure / baseline) is what counts, since absolute times move
with the machine and its load while the ratio mostly does not. `lower` or `higher` says
which way is better. The baselines are the least the figure could cost: a raw gRPC two-hop
echo for a round trip through coordinator and worker, a raw batched insert for durable
receipts, a bare grab + encode for a screenshot, a naive Playwright loop for research, a
health check or a unary call for status and the kill switch. Figures without a baseline
(fleet scale, recovery, journal search) are absolute: compare them only between runs on the
same machine.

Load matters: the machine has few cores and the benchmark's own processes (coordinator,
workers, simulators, Chromium, Xvfb) share them. The load average at the start and at the end
of the run is recorded; a run that started above about one per core measured other work as
well, and its figures should be taken again on a quiet machine. Quick mode
(`make bench-quick`) uses smaller sizes and is for catching regressions in development and CI,
not for publishing.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _params(params: dict[str, Any]) -> str:
    def shown(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return "; ".join(f"{k}={shown(v)}" for k, v in params.items())


def settings_lines(entries: list[dict[str, Any]]) -> list[str]:
    """Per group, the settings its figures share, then what each figure adds."""
    lines: list[str] = []
    by_group: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry.get("error") is None:
            by_group.setdefault(entry["group"], []).append(entry)
    for group, members in by_group.items():
        first = members[0]["params"]
        common = {k: v for k, v in first.items() if all(m["params"].get(k) == v for m in members)}
        lines.append(f"- **{group}**: {_cell(_params(common)) or '-'}")
        for m in members:
            extra = {k: v for k, v in m["params"].items() if k not in common}
            if extra:
                lines.append(f"  - {_cell(m['name'])}: {_cell(_params(extra))}")
    return lines


def render(
    doc: dict[str, Any],
    source: str = "bench/results/latest.json",
    link: str = "../bench/results/latest.json",
) -> str:
    """The markdown page for `doc` (a suite document that bench/validate.py accepts), saying
    it comes from `source` (linked as `link`, relative to the page)."""
    m, load = doc["machine"], doc["load_average"]
    git = doc.get("git", {})
    commit = git.get("commit", "unknown")
    lines = [
        "# Benchmarks",
        "",
        "Rendered by `make bench` (bench/suite.py) from"
        f" [`{source}`]({link}); do not edit by hand.",
        "",
        f"- date: {doc['date']}",
        f"- command: `{doc['command']}` ({doc['mode']} mode, {doc['duration_s']:.0f} s)",
        f"- commit: `{commit[:12]}`" + (" (with uncommitted changes)" if git.get("dirty") else ""),
        f"- machine: {m['cpu_model']}, {m['cores']} cores, {m['ram_gib']} GiB RAM;"
        f" Linux {m['kernel']}; Python {m['python']}",
        f"- load average (1, 5, 15 min): {', '.join(str(x) for x in load['start'])} at the start,"
        f" {', '.join(str(x) for x in load['end'])} at the end",
        "",
        "| figure | value | baseline (same run) | ratio | better |",
        "| --- | --- | --- | --- | --- |",
    ]
    for entry, row in zip(doc["figures"], figures.rows(doc["figures"]), strict=True):
        better = entry.get("better", "") if entry.get("error") is None else ""
        lines.append("| " + " | ".join(_cell(c) for c in (*row, better)) + " |")
    lines += ["", "## Sizes and settings", "", *settings_lines(doc["figures"]), "", HOW_TO_READ]
    lines += ["", HOT_PATH.read_text().rstrip()]
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print("usage: python -m bench.report RESULTS.json [OUT.md]", file=sys.stderr)
        return 2
    source = Path(sys.argv[1])
    try:
        doc = json.loads(source.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"bench report: cannot read {source}: {exc}", file=sys.stderr)
        return 1
    from bench.validate import problems

    if found := problems(doc):
        print(f"bench report: {source}: {found[0]}", file=sys.stderr)
        return 1
    if len(sys.argv) == 3:
        page = Path(sys.argv[2])
        text = render(doc, str(source), os.path.relpath(source, page.parent))
        page.write_text(text)
    else:
        print(render(doc, str(source), str(source)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
