"""The capability names a worker can advertise and a token can grant."""

from __future__ import annotations

HEADLESS = "headless"
COMPUTER_USE = "computer_use"
ALL = (HEADLESS, COMPUTER_USE)
