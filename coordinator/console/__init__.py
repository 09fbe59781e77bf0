"""The web console: fleet, runs, approvals, the kill switch and audit, over the gRPC API."""
