"""Check a suite document's shape: `python -m bench.validate FILE` (exit 1, one line a problem).

What it requires: schema 1, a mode (quick or full), a UTC ISO date, the command, the machine
(cpu_model, cores, ram_gib, kernel, python), the commit, the duration, the load average at
the start and the end (1, 5 and 15 min), and at least one figure. Every figure has a name
and a group, and either a finite number with its unit and which way is better, a baseline
given in full or not at all, and a ratio that is value / baseline; or an error and no value.
"""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

SCHEMA = 1
MACHINE: dict[str, type | tuple[type, ...]] = {
    "cpu_model": str,
    "cores": int,
    "ram_gib": (int, float),
    "kernel": str,
    "python": str,
}


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _text(x: Any) -> bool:
    return isinstance(x, str) and bool(x.strip())


def problems(doc: Any) -> list[str]:
    """Everything wrong with `doc`, one sentence each; empty when it is well formed."""
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    found: list[str] = []
    if doc.get("schema") != SCHEMA:
        found.append(f"schema: expected {SCHEMA}, found {doc.get('schema')!r}")
    if doc.get("mode") not in ("quick", "full"):
        found.append(f"mode: expected 'quick' or 'full', found {doc.get('mode')!r}")
    found += _date(doc.get("date"))
    if not _text(doc.get("command")):
        found.append("command: missing (the exact command that produced the figures)")
    found += _machine(doc.get("machine"))
    git = doc.get("git")
    if not isinstance(git, dict) or not _text(git.get("commit")):
        found.append("git.commit: missing")
    if not _number(doc.get("duration_s")) or doc["duration_s"] < 0:
        found.append(f"duration_s: expected seconds, found {doc.get('duration_s')!r}")
    load = doc.get("load_average")
    for when in ("start", "end"):
        values = load.get(when) if isinstance(load, dict) else None
        if not (isinstance(values, list) and len(values) == 3 and all(map(_number, values))):
            found.append(f"load_average.{when}: expected three numbers (1, 5, 15 min)")
    entries = doc.get("figures")
    if not isinstance(entries, list) or not entries:
        found.append("figures: expected a non-empty list")
        return found
    names: set[str] = set()
    for i, entry in enumerate(entries):
        label = f"figures[{i}]"
        if not isinstance(entry, dict):
            found.append(f"{label}: not an object")
            continue
        if _text(entry.get("name")):
            label = f"figure {entry['name']!r}"
            if entry["name"] in names:
                found.append(f"{label}: the name appears twice")
            names.add(entry["name"])
        else:
            found.append(f"{label}: no name")
        if not _text(entry.get("group")):
            found.append(f"{label}: no group")
        found += _figure(label, entry)
    return found


def _date(value: Any) -> list[str]:
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.utcoffset() != timedelta(0):
        return [f"date: expected a UTC ISO 8601 time, found {value!r}"]
    return []


def _machine(value: Any) -> list[str]:
    if not isinstance(value, dict):
        return ["machine: missing"]
    found = []
    for key, kind in MACHINE.items():
        x = value.get(key)
        if not isinstance(x, kind) or isinstance(x, bool) or (isinstance(x, str) and not x):
            found.append(f"machine.{key}: missing or not a {getattr(kind, '__name__', 'number')}")
    return found


def _figure(label: str, entry: dict[str, Any]) -> list[str]:
    if "error" in entry and entry["error"] is not None:
        if not _text(entry["error"]):
            return [f"{label}: an empty error"]
        if entry.get("value") is not None:
            return [f"{label}: both a value and an error"]
        return []
    found = []
    value = entry.get("value")
    if not _number(value):
        return [f"{label}: value: expected a number or an error, found {value!r}"]
    if not isinstance(entry.get("unit"), str):
        found.append(f"{label}: no unit")
    if entry.get("better") not in ("lower", "higher"):
        found.append(f"{label}: better: expected 'lower' or 'higher'")
    if not isinstance(entry.get("params"), dict):
        found.append(f"{label}: params: expected an object")
    base_name, base_value, ratio = (
        entry.get("baseline_name"),
        entry.get("baseline_value"),
        entry.get("ratio"),
    )
    if base_name is None and base_value is None:
        if ratio is not None:
            found.append(f"{label}: a ratio without a baseline")
        return found
    if not _text(base_name) or not _number(base_value):
        found.append(f"{label}: a baseline needs both a name and a number")
        return found
    if base_value == 0:
        if ratio is not None:
            found.append(f"{label}: a ratio over a zero baseline")
    elif not _number(ratio) or not math.isclose(
        cast(float, ratio), cast(float, value) / cast(float, base_value), rel_tol=1e-6
    ):
        found.append(f"{label}: ratio {ratio!r} is not value / baseline_value")
    return found


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m bench.validate RESULTS.json", file=sys.stderr)
        return 2
    path = Path(sys.argv[1])
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        print(f"bench validate: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except json.JSONDecodeError as exc:
        print(f"bench validate: {path} is not JSON: {exc}", file=sys.stderr)
        return 1
    found = problems(doc)
    for problem in found:
        print(f"bench validate: {path}: {problem}", file=sys.stderr)
    if found:
        return 1
    entries = doc["figures"]
    errors = sum(1 for e in entries if e.get("error") is not None)
    print(
        f"{path}: well formed: {len(entries) - errors} figures, {errors} errors"
        f" ({doc['mode']} mode, {doc['date']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
