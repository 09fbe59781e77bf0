"""Wiring: the configuration fixed at start-up, the gRPC server with its servicers, and the
`deskfleet-coordinator` command."""
