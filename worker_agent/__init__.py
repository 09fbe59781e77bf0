"""The enrolled worker: measures its capabilities, keeps one stream to a coordinator."""
