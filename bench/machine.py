"""Where and when a suite ran: the machine, the checkout, the load."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The model name Linux reports (platform.processor() is empty there)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, Any]:
    """The machine, as the figures need it to be read: CPU, cores, memory, kernel, Python."""
    import grpc
    import sqlalchemy

    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "sqlalchemy": sqlalchemy.__version__,
    }


def git_commit() -> dict[str, Any]:
    """The checked-out commit, and whether the tree had changes (figures of unsaved code)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD") or "unknown", "dirty": bool(status)}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
