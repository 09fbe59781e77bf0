"""The coordinator's file descriptors: every connection holds one, and so do the store, its
logs and the embedded console.

Left alone, a host's idle or half-opened sockets could take them all: with a limit of 256,
600 sockets that never finished a handshake made gRPC log "File descriptor limit reached"
every second and refused `deskfleet kill engage` for 11 s, until its core's own timeout let
them go (and for as long as someone kept opening more). Three rules:

- at start the soft limit is raised to the hard one: service managers default to a soft 1,024
  while allowing far more, and one worker is one connection;
- gRPC accepts at most `connection_cap` connections (the limit less a reserve for the store,
  the logs and the embedded console's own connections), so a flood of sockets is refused at
  accept and never takes the descriptor the store needs to open a file;
- a connection must finish its TLS and HTTP/2 handshake within `handshake_timeout` seconds or
  is closed: a slot held without a word is given back in seconds, not in gRPC's 120.

gRPC has no per-address limit: one host with many sockets can still fill the cap, for as long
as it keeps them coming (docs/SECURITY.md).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# The store's pool and files, logs, the metrics listener, the key and token files.
RESERVED = 128
MIN_CAP = 32


def raise_open_files_limit() -> int:
    """Raise the soft limit of open files to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Linux refuses an infinite soft limit for open files (it is bounded by fs.nr_open).
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("open files: raised the soft limit from %d to %d", soft, target)
            soft = target
        except (OSError, ValueError) as exc:
            log.warning("open files: could not raise the soft limit of %d: %s", soft, exc)
    return int(soft)


def connection_cap(open_files: int, console_connections: int = 0) -> int:
    """How many gRPC connections fit beside the reserve and the console's (0 if none)."""
    return max(MIN_CAP, open_files - RESERVED - console_connections)
