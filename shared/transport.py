"""Whether a connection may go in plaintext: only to this machine, unless asked for.

Credentials travel as bearer metadata; over plaintext anyone on the path can read and replay
them. Loopback stays allowed silently because nothing leaves the machine (the demo, the tests).
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def host_of(address: str) -> str:
    """The host of HOST:PORT, [V6]:PORT or unix:PATH (a unix socket's host is "localhost")."""
    if address.startswith(("unix:", "unix-abstract:")):
        return "localhost"
    address = address.removeprefix("dns:").removeprefix("ipv4:").removeprefix("ipv6:")
    address = address.removeprefix("///")
    if address.startswith("["):
        return address[1:].split("]", 1)[0]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or ":" in host:
        return address  # no port, or a bare IPv6 address
    return host


def is_loopback(address: str) -> bool:
    """True when HOST:PORT names this machine by a loopback name or address.

    Other names are not resolved: a name that resolves to loopback today may not tomorrow.
    """
    host = host_of(address).lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plaintext_warning(address: str) -> str:
    return (
        f"warning: plaintext connection to {address}: credentials cross the network unencrypted"
        " (give the coordinator's CA with --ca-file or DESKFLEET_CA_FILE for TLS)"
    )
