"""The coordinator's tables (SQLAlchemy 2 declarative). Times are epoch seconds (float, UTC)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class PrincipalRow(Base):
    """A person or program holding an admin or owner token."""

    __tablename__ = "principals"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class EnrollmentTokenRow(Base):
    __tablename__ = "enrollment_tokens"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    capabilities: Mapped[list[str]] = mapped_column(JSON)
    uses_total: Mapped[int] = mapped_column(Integer)
    uses_left: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(64))


class WorkerRow(Base):
    """An enrolled machine. `advertisement` is the last capability report it made on connect."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    allowed_capabilities: Mapped[list[str]] = mapped_column(JSON)
    advertisement: Mapped[dict[str, Any]] = mapped_column(JSON)
    enrolled_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    enrollment_token_id: Mapped[str] = mapped_column(String(64))


class PresenceRow(Base):
    """A worker's lease: it is online while `lease_expires_at` is in the future."""

    __tablename__ = "presence"

    worker_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("workers.id", ondelete="CASCADE"), primary_key=True
    )
    replica: Mapped[str] = mapped_column(String(200))
    session_id: Mapped[str] = mapped_column(String(64))
    connected_at: Mapped[float] = mapped_column(Float)
    last_heartbeat_at: Mapped[float] = mapped_column(Float)
    lease_expires_at: Mapped[float] = mapped_column(Float, index=True)
