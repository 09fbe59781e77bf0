"""Who may do what: principals and how a secret resolves to one, the access rule of every RPC,
the audit log, the failed-authentication count, sealed secret values, and TLS (the CA and the
workers' client certificates)."""
