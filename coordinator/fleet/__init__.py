"""The enrolled fleet: status and worker rows, drain and revoke (`service`), enrollment tokens
exchanged for worker credentials, and what the fleet is doing now (`activity`)."""
