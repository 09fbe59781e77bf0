"""deskfleet: the Python client of a deskfleet coordinator, for agent developers.

    import deskfleet

    fleet = await deskfleet.AsyncClient.connect("127.0.0.1:50051", token_file="me.token")
    async with fleet:
        report = await fleet.research("what changed", urls=["https://example.org/changes"])
        desk = await fleet.request_desktop("lab-desktop", actions=["screenshot", "left_click"])
        await desk.wait_approved(timeout=600)
        png = await desk.screenshot()

`deskfleet.Client` is the same API without `await`. Errors are the one tree of
`deskfleet.errors` (NotFoundError, PermissionDeniedError, UnavailableError, ...). Adapters for
agent frameworks are in `deskfleet.integrations`.
"""

from deskfleet.client import AsyncClient, RunHandle as AsyncRunHandle
from deskfleet.desktop import DesktopSession as AsyncDesktopSession
from deskfleet.errors import (
    ActionError,
    ActionFailedError,
    ActionRefusedError,
    ApprovalDeniedError,
    ApprovalError,
    ApprovalGuidedError,
    AuthenticationError,
    DeskfleetError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    WatchLostError,
)
from deskfleet.sync import Client, DesktopSession, RunHandle
from deskfleet.types import (
    ActResult,
    DesktopGrant,
    Event,
    FleetStatus,
    GuidanceReceipt,
    Passage,
    ResearchReport,
    Run,
    Source,
    Worker,
)
from shared import __version__

__all__ = [
    "ActResult",
    "ActionError",
    "ActionFailedError",
    "ActionRefusedError",
    "ApprovalDeniedError",
    "ApprovalError",
    "ApprovalGuidedError",
    "AsyncClient",
    "AsyncDesktopSession",
    "AsyncRunHandle",
    "AuthenticationError",
    "Client",
    "DeskfleetError",
    "DesktopGrant",
    "DesktopSession",
    "Event",
    "FailedPreconditionError",
    "FleetStatus",
    "GuidanceReceipt",
    "InvalidArgumentError",
    "NotFoundError",
    "Passage",
    "PermissionDeniedError",
    "ResearchReport",
    "ResourceExhaustedError",
    "Run",
    "RunHandle",
    "Source",
    "UnavailableError",
    "WatchLostError",
    "Worker",
    "__version__",
]
