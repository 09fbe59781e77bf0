"""Where the browser may go: schemes, domain allow/deny lists, private addresses, limits.

Checked before every navigation, on every redirect hop, and for every request a page or
frame makes; a refusal names the rule.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

ALLOWED_SCHEMES = ("http", "https")


@dataclass(frozen=True)
class BrowserPolicy:
    allow_domains: tuple[str, ...] = ()  # empty: any domain not denied
    deny_domains: tuple[str, ...] = ()
    allow_private: bool = False  # loopback and private networks (tests and the demo only)
    max_redirects: int = 5
    max_bytes: int = 2 * 1024 * 1024  # per document
    timeout: float = 15.0  # per navigation
    max_text: int = 100_000  # characters of extracted text returned
    max_links: int = 100
    _resolved: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_args(cls, data: dict[str, Any] | None) -> BrowserPolicy:
        data = data or {}
        return cls(
            allow_domains=tuple(str(d).lower() for d in data.get("allow_domains", ())),
            deny_domains=tuple(str(d).lower() for d in data.get("deny_domains", ())),
            allow_private=bool(data.get("allow_private", False)),
            max_redirects=int(data.get("max_redirects", 5)),
            max_bytes=int(data.get("max_bytes", 2 * 1024 * 1024)),
            timeout=float(data.get("timeout", 15.0)),
            max_text=int(data.get("max_text", 100_000)),
            max_links=int(data.get("max_links", 100)),
        )

    def refusal(self, url: str) -> str | None:
        """Why the browser may not request `url`, or None when it may."""
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about"):
            return None  # content the page already has, not a network request
        if parts.scheme not in ALLOWED_SCHEMES:
            return f"scheme {parts.scheme or '(none)'}: is not allowed (http and https only)"
        host = (parts.hostname or "").lower().rstrip(".")
        if not host:
            return "the URL has no host"
        if any(_matches(host, d) for d in self.deny_domains):
            return f"domain {host} is denied by the policy"
        if self.allow_domains and not any(_matches(host, d) for d in self.allow_domains):
            return f"domain {host} is not in the policy's allowed domains"
        if not self.allow_private and self._is_private(host):
            return (
                f"{host} is a loopback or private address; the policy does not allow"
                " private networks"
            )
        return None

    def _is_private(self, host: str) -> bool:
        if host not in self._resolved:
            self._resolved[host] = _resolves_private(host)
        return self._resolved[host]


def _matches(host: str, domain: str) -> bool:
    domain = domain.lstrip(".")
    return host == domain or host.endswith("." + domain)


def _resolves_private(host: str) -> bool:
    """True when the host is, or resolves to, any non-public address (fail closed)."""
    try:
        addresses = {ipaddress.ip_address(host.strip("[]"))}
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False  # unresolvable: the navigation itself will fail with its own reason
        addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    return any(not a.is_global for a in addresses)
