"""Value types the coordinator's parts pass to each other, and nothing that acts: the orders
the ledger decides and what workers report, worker views, the notes a ledger transaction
leaves for the metrics, capability names, and who is calling. It imports only `shared` and the
store's row types, so every other folder may import it."""
