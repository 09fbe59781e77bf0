"""Sizes as people write them on a command line: `500MiB`, `2GiB`, `1048576`."""

from __future__ import annotations

import re

from shared.errors import InvalidArgumentError

SIZE = re.compile(r"([0-9]+)\s*(|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)", re.IGNORECASE)
UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(field: str, text: str) -> int:
    """Bytes from `N`, `NKiB`, `NMiB`, `NGiB` or `NTiB` (K, M, G, T alone are binary too)."""
    found = SIZE.fullmatch(text.strip())
    if found is None:
        raise InvalidArgumentError(f"{field}: a size such as 500MiB or 2GiB (got {text[:40]!r})")
    return int(found[1]) * int(1024 ** UNITS[found[2][:1].lower()])
