"""The deskfleet coordinator: fleet registry, enrollment, presence and (later) the work journal."""
