"""Writing the files that hold credentials, keys and certificates."""

from __future__ import annotations

import os
from pathlib import Path


def replace_atomically(path: Path, data: str | bytes, mode: int = 0o600) -> None:
    """Write through a temporary file created with its final mode, then rename it over `path`:
    a reader never sees half a file, and a secret is never readable by others, even for an
    instant."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a leftover may carry another mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)  # the umask may have narrowed what os.open asked for
    os.replace(tmp, path)


def create_private(path: Path, data: str | bytes) -> bool:
    """Write `data` to a new file only its owner may read (in a directory only its owner may
    enter, made if missing); False, and nothing written, when a file is already there, so that
    a key once made is never replaced."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    return True
