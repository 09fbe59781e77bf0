"""Where a client finds its coordinator and credential: flags, then environment, then a file.

The file is `$XDG_CONFIG_HOME/deskfleet/config.json` (default `~/.config/deskfleet/config.json`):
`{"coordinator": "HOST:PORT", "token_file": "PATH", "ca_file": "PATH"}`. With a CA file (the
coordinator's `ca.pem`) the channel is TLS, verified against that CA.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from shared.errors import InvalidArgumentError

ENV_COORDINATOR = "DESKFLEET_COORDINATOR"
ENV_TOKEN_FILE = "DESKFLEET_TOKEN_FILE"
ENV_CA_FILE = "DESKFLEET_CA_FILE"
DEFAULT_COORDINATOR = "127.0.0.1:50051"


def config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "deskfleet" / "config.json"


def _file_settings() -> dict[str, str]:
    path = config_file()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{path}: expected a JSON object")
    return {k: str(v) for k, v in data.items() if isinstance(v, str)}


@dataclass(frozen=True)
class ClientConfig:
    coordinator: str
    token_file: Path | None
    ca_file: Path | None = None  # TLS verified against this CA; None: plaintext

    @classmethod
    def resolve(
        cls, coordinator: str | None, token_file: str | None, ca_file: str | None = None
    ) -> ClientConfig:
        settings = _file_settings()
        address = (
            coordinator
            or os.environ.get(ENV_COORDINATOR)
            or settings.get("coordinator")
            or DEFAULT_COORDINATOR
        )
        tf = token_file or os.environ.get(ENV_TOKEN_FILE) or settings.get("token_file")
        ca = ca_file or os.environ.get(ENV_CA_FILE) or settings.get("ca_file")
        return cls(
            address,
            Path(tf).expanduser() if tf else None,
            Path(ca).expanduser() if ca else None,
        )

    def read_ca(self) -> bytes | None:
        """The CA certificate to verify the coordinator with, or None for plaintext."""
        if self.ca_file is None:
            return None
        try:
            data = self.ca_file.read_bytes()
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot read CA file {self.ca_file}: {exc.strerror or exc}"
            ) from exc
        if b"-----BEGIN CERTIFICATE-----" not in data:
            raise InvalidArgumentError(f"CA file {self.ca_file} holds no PEM certificate")
        return data

    def read_token(self) -> str:
        if self.token_file is None:
            raise InvalidArgumentError(
                f"no credential: pass --token-file PATH or set {ENV_TOKEN_FILE}"
            )
        try:
            token = self.token_file.read_text().strip()
        except FileNotFoundError as exc:
            raise InvalidArgumentError(f"token file {self.token_file} does not exist") from exc
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot read token file {self.token_file}: {exc.strerror}"
            ) from exc
        if not token:
            raise InvalidArgumentError(f"token file {self.token_file} is empty")
        return token


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """`90`, `90s`, `10m`, `1h`, `2d` → seconds."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidArgumentError(f"not a duration: {text!r} (use e.g. 90s, 10m, 1h, 2d)")
    return float(match.group(1)) * _UNITS[match.group(2)]
