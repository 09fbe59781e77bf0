"""The entries of a suite document: one figure beside its baseline, or why a benchmark failed.

A figure is a plain dict, so that the JSON file, the table and the validator read one shape:

    {"name", "group", "value", "unit", "better": "lower" | "higher",
     "baseline_name", "baseline_value", "ratio", "params"}

`ratio` is value / baseline_value (None without a baseline); `better` says which way a change
of the figure is an improvement. An error entry has the group, a name, `value` None and
`error`, the one-line reason the benchmark gave.
"""

from __future__ import annotations

from typing import Any

BETTER = ("lower", "higher")


def figure(
    group: str,
    name: str,
    value: float,
    unit: str,
    *,
    better: str = "lower",
    baseline: tuple[str, float] | None = None,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One figure; `baseline` is (what it is, its value in the same unit), measured in the
    same run."""
    if better not in BETTER:
        raise ValueError(f"better: one of {', '.join(BETTER)}, not {better!r}")
    base_name, base_value = baseline if baseline is not None else (None, None)
    ratio = value / base_value if base_value else None
    return {
        "name": name,
        "group": group,
        "value": float(value),
        "unit": unit,
        "better": better,
        "baseline_name": base_name,
        "baseline_value": None if base_value is None else float(base_value),
        "ratio": ratio,
        "params": params or {},
    }


def error(group: str, message: str) -> dict[str, Any]:
    """The entry that stands in for a group's figures when the group failed."""
    lines = message.strip().splitlines()
    return {
        "name": f"{group} (failed)",
        "group": group,
        "value": None,
        "error": lines[0] if lines else "failed",
    }


def format_value(value: float | None, unit: str) -> str:
    """A number with as many digits as its size deserves, then its unit."""
    if value is None:
        return "-"
    size = abs(value)
    digits = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 else 3
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}" if unit else text


def format_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.3g}x"


def rows(figures: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(figure, value, baseline, ratio) per entry, for the table and the markdown."""
    out = []
    for f in figures:
        if f.get("error") is not None:
            out.append((f["name"], f"ERROR: {f['error']}", "-", "-"))
            continue
        base = "-"
        if f.get("baseline_name"):
            base = f"{format_value(f['baseline_value'], f['unit'])} ({f['baseline_name']})"
        out.append((f["name"], format_value(f["value"], f["unit"]), base, format_ratio(f["ratio"])))
    return out
