"""Writing the files that hold credentials and keys."""

from __future__ import annotations

import os
from pathlib import Path


def replace_atomically(path: Path, text: str, mode: int = 0o600) -> None:
    """Write `text` to a temporary file created with its final mode, then rename it over `path`:
    a crash never leaves a half-written credential, and it is never readable by others."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a leftover may carry another mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)  # the umask may have narrowed what os.open asked for
    os.replace(tmp, path)
