"""What a replica tells about itself: Prometheus metrics and the trace spans of attempts."""
