"""Agents on the fleet: the model-driven goal loop, its model providers and its context."""
