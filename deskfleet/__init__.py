"""deskfleet: the Python client of a deskfleet coordinator, for agent developers."""
