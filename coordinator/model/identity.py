"""Who is calling: a principal (admin, owner or worker) as the guard resolved it from a
credential (`coordinator/security/principals.py`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.StrEnum):
    ADMIN = "admin"
    OWNER = "owner"
    WORKER = "worker"


@dataclass(frozen=True)
class Principal:
    id: str
    name: str
    role: Role
