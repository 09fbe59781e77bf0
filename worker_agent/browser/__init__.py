"""Headless browser research on the worker: fetch, search and screenshot under a policy."""

# Here rather than in service.py: the worker's CLI names it without importing Playwright, which
# a worker run with --no-headless never does.
CONTEXT_IDLE = 30.0  # seconds a run's context stays open with nothing to do
DEFAULT_RENDERER_MEMORY = 1024  # MiB a page's renderer may hold (browser/memory.py)
MIN_RENDERER_MEMORY = 256
ACTION_KINDS = ("browser.fetch", "browser.search", "browser.screenshot", "browser.check")
