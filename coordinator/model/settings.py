"""The coordinator's configuration, fixed at start-up."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from shared.advertisement import HelloLimits

# Per-owner limits (coordinator/runs/quota.py); an admin overrides them per owner. 0: no limit.
# Failed authentications a host may make a minute before they are answered as over the
# limit. Credentials and tokens are 256-bit random secrets, so this is not what keeps them
# safe: it tells a scanner to stop, and makes one visible in the logs.
DEFAULT_AUTH_FAILURES = 30
DEFAULT_OWNER_MAX_ACTIVE_RUNS = 200
DEFAULT_OWNER_MAX_STORED_BYTES = 5 * 1024**3
DEFAULT_OWNER_MAX_SECRETS = 1000  # a serve setting only: no per-owner override
# WatchRun and WaitRun calls one principal may hold open on a replica (bench/many_runs.py
# holds 40 at once). 0: no limit.
DEFAULT_MAX_WATCH_STREAMS = 256
# Refused receipts and starts one worker stream may make a minute before it is ended
# (`streams/worker_bounds.ReportBudget`). A correct worker's count stays at zero: it reports
# only on attempts it was given, and the late reports on those taken back from it are not
# counted. The limit is room for what no rule foresaw (a start read while its attempt's
# cancel was being queued), far below what would cost the store. 0: no limit.
DEFAULT_MAX_REFUSED_REPORTS = 100


DEFAULT_HANDSHAKE_TIMEOUT = 5.0  # seconds for a connection's TLS and HTTP/2 handshake


@dataclass(frozen=True)
class CoordinatorConfig:
    db_url: str
    listen: str = "127.0.0.1:50051"
    replica: str = socket.gethostname()
    # Every `heartbeat_interval` gRPC's core pings each worker stream; a worker that has not
    # answered by `lease_ttl` is cut off and goes offline. The ttl spans several pings so that
    # one late answer is not an outage. Attempt leases are renewed once per interval.
    heartbeat_interval: float = 5.0
    lease_ttl: float = 15.0
    # Connects and disconnects that failed to be written are tried again after this long.
    lease_flush_interval: float = 0.25
    # Failed authentications one host may make per minute before it is refused a while (0: no
    # limit). Per replica.
    auth_failures_per_minute: int = DEFAULT_AUTH_FAILURES
    # Runs one owner may have in flight, and bytes their runs may store, before a new run is
    # refused (RESOURCE_EXHAUSTED). 0: no limit.
    owner_max_active_runs: int = DEFAULT_OWNER_MAX_ACTIVE_RUNS
    owner_max_stored_bytes: int = DEFAULT_OWNER_MAX_STORED_BYTES
    owner_max_secrets: int = DEFAULT_OWNER_MAX_SECRETS  # secrets one owner may store
    max_watch_streams: int = DEFAULT_MAX_WATCH_STREAMS  # open WatchRun + WaitRun per principal
    # Live views of desktops (coordinator/runs/desktop/watches.py): viewers per console
    # session (or direct caller), and per worker.
    live_viewers_per_session: int = 2
    live_viewers_per_worker: int = 16
    # Recordings of desktop runs (coordinator/runs/desktop/recordings.py): frames kept per
    # second (0: none recorded), how long they are kept, and bytes per owner.
    recording_fps: float = 2.0
    recording_retention: float = 30 * 86400.0
    recording_max_bytes: int = 1024**3
    max_refused_reports: int = DEFAULT_MAX_REFUSED_REPORTS  # per worker stream and minute
    # gRPC connections accepted at once (0: no cap of ours) and how long one may take to finish
    # its handshake (coordinator/app/descriptors.py).
    max_connections: int = 0
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    # Each replica looks for orders other replicas left for its streams this often; on
    # PostgreSQL a notification wakes it sooner, so this only bounds a missed one.
    relay_poll_interval: float = 1.0
    enrollment_token_ttl: float = 3600.0
    # The recovery sweep resumes saved work: expired leases, overdue attempts, waiting runs.
    sweep_interval: float = 120.0
    # While runs wait in line, the line is also served this often: events (receipts, timeouts,
    # connects, undrains) give freed slots out at once; this catches capacity that no event
    # announces, such as a worker whose presence lease lapsed under load and was renewed.
    line_check_interval: float = 1.0
    # Automatic attempts of an idempotent action before the run stops for a person.
    max_attempts: int = 3
    # Research and browser actions may reach loopback and private addresses (tests, demo).
    allow_private_networks: bool = False
    policy_file: Path | None = None  # the routing policy; None: the documented default
    # Where `scripted:NAME` models come from (plain names only); None: no scripted models.
    scripted_models_dir: Path | None = None
    # The built-in computer tool each provider is sent (serve --anthropic-computer-tool,
    # --openai-computer-tool; coordinator/agent/providers): the generally available ones.
    anthropic_computer_tool: str = "computer_toolset_20260801"
    openai_computer_tool: str = "computer"
    # Seals secret values at rest (coordinator/security/secret_box.py); None or missing: no secrets.
    secrets_key_file: Path | None = None
    # Signs exported runs' manifests (coordinator/security/evidence_key.py, runs/export.py);
    # None: exports are refused, saying how to make one. Read at each export.
    evidence_key_file: Path | None = None
    # Estimated tokens a goal's working set may reach before results are archived (seed 000).
    goal_context_budget: int = 20_000
    goal_model_timeout: float = 120.0  # a whole model call; past it, one retry
    goal_question_wait: float = 60.0  # an optional ask_human question holds the work this long
    advice_model: str = ""  # asked about approvals outside a goal (`approvals advise`)
    # Transport security (coordinator/security/tls.py). With a certificate the listener speaks
    # TLS; with a CA directory as well, worker certificates are signed and a second listener
    # takes worker streams that must present one (gRPC Python cannot ask for a client
    # certificate without requiring it, and admins and enrolling workers have none).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    ca_dir: Path | None = None
    worker_listen: str | None = None  # None: the --listen host, its port + 1 (or any, for 0)
    worker_cert_days: float = 30.0  # short: a stolen key is only good until the next renewal
    plaintext: bool = False  # the operator accepts plaintext on a non-loopback address
    metrics_listen: str | None = None  # HOST:PORT of the Prometheus endpoint; None: none
    # What a worker's hello may hold (`serve --hello-limit NAME=N`); past it, it is refused.
    hello_limits: HelloLimits = field(default_factory=HelloLimits)
