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


def file_settings() -> dict[str, str]:
    """The config file's string settings (coordinator, token_file, ca_file, console)."""
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
    # False when no flag, variable or file named the coordinator (DEFAULT_COORDINATOR is used).
    coordinator_given: bool = True

    @classmethod
    def resolve(
        cls, coordinator: str | None, token_file: str | None, ca_file: str | None = None
    ) -> ClientConfig:
        settings = file_settings()
        given = (
            ("--coordinator", coordinator),
            (ENV_COORDINATOR, os.environ.get(ENV_COORDINATOR)),
            (str(config_file()), settings.get("coordinator")),
        )
        source, address = next(((src, a) for src, a in given if a), ("", DEFAULT_COORDINATOR))
        if source:
            check_address(address, source)
        tf = token_file or os.environ.get(ENV_TOKEN_FILE) or settings.get("token_file")
        ca = ca_file or os.environ.get(ENV_CA_FILE) or settings.get("ca_file")
        return cls(
            address,
            Path(tf).expanduser() if tf else None,
            Path(ca).expanduser() if ca else None,
            coordinator_given=bool(source),
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
            if not self.coordinator_given:
                raise InvalidArgumentError(
                    f"no coordinator and no credential given: pass --coordinator HOST:PORT"
                    f" (or set {ENV_COORDINATOR}; default {DEFAULT_COORDINATOR}) and"
                    f" --token-file PATH (or set {ENV_TOKEN_FILE})"
                )
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


def check_address(address: str, source: str) -> None:
    """HOST:PORT or [V6]:PORT with a port in 1-65535 (or a unix: socket), else a one-line error
    naming where the address came from (a flag, a variable or the config file)."""
    if address.startswith(("unix:", "unix-abstract:")):
        return
    bare = address.removeprefix("dns:").removeprefix("ipv4:").removeprefix("ipv6:")
    bare = bare.removeprefix("///")
    host, sep, port = bare.rpartition(":")
    if host.startswith("["):
        host = host[1:-1] if host.endswith("]") else ""
    elif ":" in host:
        host = ""  # an IPv6 address must be bracketed to carry a port
    if not sep or not host or not port:
        raise InvalidArgumentError(f"{source} {address}: expected HOST:PORT")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidArgumentError(f"{source} {address}: the port must be 1-65535")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """`90`, `90s`, `10m`, `1h`, `2d` → seconds."""
    match = _DURATION.match(text)
    if not match:
        raise InvalidArgumentError(f"not a duration: {text!r} (use e.g. 90s, 10m, 1h, 2d)")
    return float(match.group(1)) * _UNITS[match.group(2)]
