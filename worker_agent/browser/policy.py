"""Where the browser may go: schemes, domain allow/deny lists, private addresses, limits.

The URL check here (`refusal`) only stops what never becomes a connection (other schemes, a
URL with no host) and refuses a denied first URL early. What a connection may reach is
decided by the egress guard (`egress.py`), on the host Chromium actually connects to, for
every request of every page, frame and worker and every redirect hop; a refusal names the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ALLOWED_SCHEMES = ("http", "https")
# Not network requests: content a page already holds. A page may use them for its images and
# scripts, but a document may not be one (a data: or blob: page is code from the plan or the
# page, not the site asked for).
INLINE_SCHEMES = ("data", "blob", "about")
LIMITS: dict[str, tuple[type, float, float]] = {
    "max_redirects": (int, 0, 20),
    "max_bytes": (int, 1, 1024 * 1024 * 1024),
    "timeout": (float, 0.1, 600.0),
    "max_text": (int, 0, 10_000_000),
    "max_links": (int, 0, 10_000),
}


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

    @classmethod
    def from_args(cls, data: object) -> BrowserPolicy:
        """The policy a dispatch carries; ValueError naming the field when it is malformed."""
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError("policy: must be an object")
        numbers: dict[str, Any] = {}
        for name, (kind, low, high) in LIMITS.items():
            if name not in data:
                continue
            value = data[name]
            ok = isinstance(value, int | float) if kind is float else isinstance(value, int)
            if isinstance(value, bool) or not ok or not low <= value <= high:
                raise ValueError(f"policy.{name}: a number in {low:g}..{high:g}, not {value!r}")
            numbers[name] = kind(value)
        return cls(
            allow_domains=_domains(data, "allow_domains"),
            deny_domains=_domains(data, "deny_domains"),
            allow_private=data.get("allow_private", False) is True,
            **numbers,
        )

    def refusal(self, url: str, *, document: bool = False) -> str | None:
        """Why the browser may not request `url` (as a page or frame if `document`), or None."""
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
        except ValueError as exc:
            return f"not a URL: {exc}"
        scheme = parts.scheme.lower()
        if scheme in INLINE_SCHEMES and not document:
            return None  # content the page already has, not a network request
        if scheme not in ALLOWED_SCHEMES:
            return f"scheme {scheme or '(none)'}: is not allowed (http and https only)"
        host = (hostname or "").lower().rstrip(".")
        if not host:
            return "the URL has no host"
        if any(_matches(host, d) for d in self.deny_domains):
            return f"domain {host} is denied by the policy"
        if self.allow_domains and not any(_matches(host, d) for d in self.allow_domains):
            return f"domain {host} is not in the policy's allowed domains"
        return None

    @property
    def network(self) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
        """What decides where connections may go (the limits do not)."""
        return self.allow_domains, self.deny_domains, self.allow_private


def _domains(data: dict[str, Any], name: str) -> tuple[str, ...]:
    value = data.get(name, ())
    if not isinstance(value, list | tuple) or not all(isinstance(d, str) for d in value):
        raise ValueError(f"policy.{name}: a list of domain names")
    return tuple(d.lower() for d in value)


def _matches(host: str, domain: str) -> bool:
    domain = domain.lstrip(".")
    return host == domain or host.endswith("." + domain)
