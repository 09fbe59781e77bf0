"""What flows between this replica and the others: worker streams (presence), orders relayed
through the store, the in-memory worker index, the journal bus that wakes waiters, the feeds
that watchers of a run share, and the bounds of what a worker's stream may carry."""
