"""`deskfleet`: the admin and owner command line, a plain gRPC client of the coordinator."""
