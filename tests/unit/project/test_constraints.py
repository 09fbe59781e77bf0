"""constraints.txt (what setup installs) agrees with pyproject.toml's ranges and covers every
declared dependency, so a reproducible install is also an allowed one."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = version
    return found


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = pins()
    outside = []
    for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        req = Requirement(text)
        version = pinned.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            outside.append(f"{text}: pinned {version}")
        for extra in req.extras:  # psycopg[binary] pins psycopg-binary too
            assert canonicalize_name(f"{req.name}-{extra}") in pinned, text
    assert outside == []


def test_runtime_ranges_have_an_upper_bound() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    open_ended = [
        text
        for text in project["dependencies"]
        if not any(s.operator in ("<", "<=", "==", "~=") for s in Requirement(text).specifier)
    ]
    assert open_ended == []
