"""The worker's scratch directory: the only place where an action writes a file an owner names.

`<state-dir>/scratch/` (mode 0700). An owner never chooses a path on a worker: a plan names a
file, and the name is one plain file name inside this directory — no '/', no '..', no
absolute path, no leading dot. The file is opened relative to the directory with O_NOFOLLOW,
so a symbolic link placed in the directory (by anyone) is refused rather than followed, and
a file that is not a regular file, or that has another hard link, is refused as well.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

SCRATCH = "scratch"
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
OUTSIDE = "outside_scratch"  # the refusal code for every name that would leave the directory


class ScratchRefused(ValueError):
    """A name or file the scratch directory will not write; `code` is the refusal code."""

    def __init__(self, message: str, code: str = OUTSIDE) -> None:
        super().__init__(message)
        self.code = code


_FILE_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# A scratch file read for a check is read whole: past this it is refused, not read.
MAX_READ = 16 * 1024 * 1024


def check_name(name: object, field: str = "name") -> str:
    """The name if it is one plain file name; ScratchRefused naming the rule otherwise."""
    if not isinstance(name, str) or not name:
        raise ScratchRefused(
            f"'{field}' must be a file name in the worker's scratch directory, such as"
            f" effects.txt, not {name!r}",
            code="invalid_argument",
        )
    shown = name[:80]
    if name.startswith("/") or os.path.isabs(name):
        raise ScratchRefused(
            f"'{field}' {shown!r} is an absolute path: files are written only inside the"
            " worker's scratch directory; give a file name such as effects.txt",
            code=OUTSIDE,
        )
    if "/" in name or "\\" in name or name in (".", ".."):
        raise ScratchRefused(
            f"'{field}' {shown!r} is not one file name: no '/', no '..' (files are written only"
            " inside the worker's scratch directory)",
            code=OUTSIDE,
        )
    if not NAME.match(name):
        raise ScratchRefused(
            f"'{field}' {shown!r}: a file name of letters, digits, '_', '.' or '-' (at most 128,"
            " not starting with '.' or '-')",
            code="invalid_argument",
        )
    return name


class ScratchDir:
    """`<state-dir>/scratch`: created 0700 on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def of(cls, state_dir: Path) -> ScratchDir:
        return cls(state_dir / SCRATCH)

    def append(self, name: str, data: bytes) -> int:
        """Append `data` to the scratch file `name` (checked), durably; the bytes written."""
        check_name(name)
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = self._file(name, _FILE_FLAGS)
        assert fd is not None
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        return written

    def read(self, name: str) -> bytes | None:
        """The whole scratch file `name` (checked), or None if there is none; one larger than
        MAX_READ is refused."""
        check_name(name)
        if not self.path.exists():
            return None
        fd = self._file(name, _READ_FLAGS)
        if fd is None:
            return None
        try:
            if os.fstat(fd).st_size > MAX_READ:
                raise ScratchRefused(
                    f"'name' {name!r} is larger than {MAX_READ} bytes: not read", code=OUTSIDE
                )
            chunks: list[bytes] = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _file(self, name: str, flags: int) -> int | None:
        """The file `name` opened in the scratch directory with `flags`; None if it does not
        exist (when `flags` does not create it)."""
        try:
            # O_NOFOLLOW on the directory too: a scratch directory replaced by a link is refused.
            dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise ScratchRefused(
                f"the scratch directory {self.path} is not a plain directory ({exc.strerror})",
                code=OUTSIDE,
            ) from exc
        try:
            return self._open(dir_fd, name, flags)
        except FileNotFoundError:
            if flags & os.O_CREAT:
                raise
            return None
        finally:
            os.close(dir_fd)

    @staticmethod
    def _open(dir_fd: int, name: str, flags: int) -> int:
        try:
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise ScratchRefused(
                    f"'name' {name!r} is a symbolic link in the scratch directory: links are"
                    " never followed",
                    code=OUTSIDE,
                ) from exc
            if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                raise ScratchRefused(
                    f"'name' {name!r} is not a regular file", code=OUTSIDE
                ) from exc
            raise
        info = os.fstat(fd)
        why = (
            "is not a regular file"
            if not stat.S_ISREG(info.st_mode)
            else "has other hard links"
            if info.st_nlink != 1
            else ""
        )
        if why:
            os.close(fd)
            raise ScratchRefused(f"'name' {name!r} {why}: refused", code=OUTSIDE)
        os.set_blocking(fd, True)
        return fd
