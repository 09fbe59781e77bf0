"""Computer Use on this machine's desktop: screenshots, pointer and keyboard, under a scope.

`DesktopActions().register(registry)` adds the `desktop.*` kinds to a worker's registry.
"""

from worker_agent.desktop.actions import DesktopActions, TypingInterrupted
from worker_agent.desktop.inputs import DesktopSession

__all__ = ["DesktopActions", "DesktopSession", "TypingInterrupted"]
