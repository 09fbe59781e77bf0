"""The console's limits and their defaults, apart from the modules that apply them so that the
command line can show them without importing the web stack (Starlette, uvicorn)."""

from __future__ import annotations

DEFAULT_MAX_CONNECTIONS = 512  # HTTP connections open at once, in all
DEFAULT_MAX_PER_CLIENT = 64  # ... from one address
DEFAULT_REQUEST_TIMEOUT = 10.0  # seconds for a request's head and body to arrive
DEFAULT_LIVE_PER_SESSION = 4  # live streams (`/events`) one session may hold open
DEFAULT_SESSIONS_PER_USER = 10  # sign-ins of one user kept at once; the oldest ends first
# Failed sign-ins the console lets one browser (its sign-in cookie and address) make per
# minute, and one address in all, before it stops asking the coordinator about them.
DEFAULT_SIGNIN_FAILURES = 10
DEFAULT_SIGNIN_FAILURES_PER_ADDRESS = 60
# Past either, each sign-in from there waits this long before its token is checked.
DEFAULT_SIGNIN_DELAY = 1.0
