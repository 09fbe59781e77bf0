"""Files the CLI writes for its user: screens (`--out`) and a run's artifacts."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from shared.errors import DeskfleetError

PRIVATE = 0o600


def write_private(path: Path, data: bytes, option: str = "--out") -> None:
    """Write `data` to `path`, readable by the user alone.

    A screen shows whatever was on a person's desktop (mail, a password manager): it is
    created 0600 whatever the umask says, and a regular file that was already there is made
    0600 too before anything is written into it. Something that is not a regular file
    (`/dev/stdout`, a pipe) is written as it is. A failure is one line naming `option`.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.fchmod(fd, PRIVATE)
            with os.fdopen(fd, "wb", closefd=False) as out:
                out.write(data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise DeskfleetError(f"{option} {path}: {exc.strerror or exc}") from exc


def check_writable(path: Path, option: str = "--out") -> None:
    """Refuse, before anything runs, an output path that cannot be written: an action whose
    result has nowhere to go should not run at all."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise DeskfleetError(f"{option} {path}: is a directory")
    if not parent.is_dir():
        raise DeskfleetError(f"{option} {path}: no directory {parent}")
    if not os.access(parent, os.W_OK) and not (path.exists() and os.access(path, os.W_OK)):
        raise DeskfleetError(f"{option} {path}: the directory {parent} is not writable")
