"""Write constraints.txt: the exact versions of deskfleet's dependency closure (dev extra
included) as installed in the running environment.

    .venv/bin/python scripts/freeze_constraints.py          # rewrite constraints.txt
    .venv/bin/python scripts/freeze_constraints.py --check  # exit 1 if it is out of date

The requirements come from pyproject.toml (not from the installed project's metadata, which
may be older); each one's own requirements are followed through the installed distributions,
with environment markers evaluated for this machine. `scripts/setup.sh` installs with
`pip install -c constraints.txt`, so every checkout gets the versions the suite passed with.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "constraints.txt"
HEADER = (
    "# The versions deskfleet's suite passed with: its dependencies and theirs, dev extra\n"
    "# included. Written by scripts/freeze_constraints.py; used by scripts/setup.sh\n"
    "# (pip install -c constraints.txt). pyproject.toml holds the compatible ranges.\n"
)


def _wanted(req: Requirement, extras: frozenset[str]) -> bool:
    if req.marker is None:
        return True
    env = {k: str(v) for k, v in default_environment().items()}
    return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))


def closure(roots: list[str]) -> dict[str, str]:
    """{distribution name: installed version} of the roots and everything they need here."""
    found: dict[str, str] = {}
    queue = [Requirement(r) for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        req = queue.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"freeze_constraints: {req.name} is not installed here") from None
        found[dist.metadata["Name"]] = dist.version
        extras = frozenset(req.extras)
        for line in dist.requires or []:
            sub = Requirement(line)
            if _wanted(sub, extras):
                queue.append(sub)
    return found


def render() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    roots = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pins = closure([r for r in roots if _wanted(Requirement(r), frozenset())])
    lines = sorted(f"{name}=={version}" for name, version in pins.items())
    return HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if OUT.read_text() != text:
            print("constraints.txt is out of date: run scripts/freeze_constraints.py")
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({text.count('==')} pins)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
