"""The deskfleet coordinator: the durable work journal, the fleet registry and the routing
policy, in one folder per part (docs/ARCHITECTURE.md draws them and their imports)."""
