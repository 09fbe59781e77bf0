"""Secrets handed to people and machines: how they look, how they are hashed, how they are sent.

A secret is `<kind>_<id>.<random>`: the kind tells a user what they hold (an admin or owner
token, a worker credential, an enrollment token) and lets the coordinator say so when one is used
in the wrong place; the random part carries 256 bits. Only a SHA-256 of the whole secret is
stored: the secrets are random, so a slow password hash would add nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from enum import StrEnum

METADATA_KEY = "authorization"
SCHEME = "Bearer "
# The web console names the browser it acts for: the coordinator records the address in the
# audit log as reported by the console, and never decides anything by it.
CONSOLE_CLIENT_KEY = "deskfleet-console-client"


class SecretKind(StrEnum):
    USER = "dfu"
    WORKER = "dfw"
    ENROLLMENT = "dfe"


def new_secret(kind: SecretKind, object_id: str) -> str:
    return f"{kind.value}_{object_id}.{secrets.token_urlsafe(32)}"


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def hashes_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def kind_of(secret: str) -> SecretKind | None:
    prefix = secret.split("_", 1)[0]
    try:
        return SecretKind(prefix)
    except ValueError:
        return None


def auth_metadata(secret: str) -> tuple[tuple[str, str], ...]:
    return ((METADATA_KEY, SCHEME + secret),)
