"""Code that the coordinator, the worker and the admin CLI all import."""

__version__ = "0.1.0"
