"""Headless browser research on the worker: fetch, search and screenshot under a policy."""
