"""Every path the README and `docs/` name exists: a reader one hop from any behaviour lands on
a real file, and a move that leaves a document behind fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench/hot_path.md"]
TOPS = (
    "coordinator", "worker_agent", "shared", "tests", "bench", "scripts", "installers",
    "protos", "docs", ".ci",
)  # fmt: skip
# A path as documents write it: `coordinator/runs/plan.py`, `tests/harness/`,
# `shared/advertisement.HelloLimits` (a name inside a module), `heart/slots.py`... only from
# the top folders, so that prose and URLs are not read as paths.
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOPS) + r")/[\w./*{}-]*)")


def named_paths(text: str) -> set[str]:
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".,;:)")
        if any(c in path for c in "*{}") or path.endswith("/..."):
            continue  # a pattern, not a path
        found.add(path)
    return found


# What a command writes when it runs (`make bench`'s results), not a file of the tree.
OUTPUTS = ("bench/results/",)


def exists(path: str) -> bool:
    if (ROOT / path).exists() or path.startswith(OUTPUTS):
        return True
    # `module.Name` or `module.function`: the module, with a name inside it.
    head, dot, _ = path.rpartition(".")
    return bool(dot) and ((ROOT / f"{head}.py").exists() or (ROOT / head).is_dir())


def test_every_path_named_in_the_documents_exists() -> None:
    missing = {
        f"{doc.relative_to(ROOT)}: {path}"
        for doc in DOCUMENTS
        for path in named_paths(doc.read_text())
        if not exists(path)
    }
    assert sorted(missing) == []


def test_the_check_reads_paths_and_names_inside_modules() -> None:
    text = "see `coordinator/heart/slots.py`, shared/advertisement.HelloLimits and tests/nowhere."
    assert named_paths(text) == {
        "coordinator/heart/slots.py",
        "shared/advertisement.HelloLimits",
        "tests/nowhere",
    }
    assert exists("shared/advertisement.HelloLimits") and not exists("tests/nowhere")


def test_every_path_named_in_the_code_exists() -> None:
    """Docstrings and comments name files too (`see coordinator/store/journal.py`)."""
    sources = [
        p
        for top in ("coordinator", "worker_agent", "shared", "tests", "bench", "scripts")
        for p in sorted((ROOT / top).rglob("*.py"))
        if "gen" not in p.relative_to(ROOT).parts and p != Path(__file__).resolve()
    ]
    missing = {
        f"{src.relative_to(ROOT)}: {path}"
        for src in sources
        for path in named_paths(src.read_text())
        if not exists(path)
    }
    assert sorted(missing) == []
