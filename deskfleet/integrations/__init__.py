"""Adapters that let agent frameworks drive a fleet desktop through `deskfleet`."""
