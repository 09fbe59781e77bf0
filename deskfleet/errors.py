"""The errors the client raises: deskfleet's one error tree (`shared.errors`), re-exported, and
what a desktop action or an approval can end in on top of it.

    DeskfleetError (shared.errors: NotFoundError, PermissionDeniedError, UnavailableError, ...)
    ├── WatchLostError ............. (an UnavailableError) a watch that could not reconnect
    ├── ActionError ................ a desktop action that did not succeed
    │   ├── ActionRefusedError ..... refused before it ran (out_of_scope, kill_switch, ...)
    │   └── ActionFailedError ...... it ran and failed, or its outcome is unknown
    └── ApprovalError .............. a desktop request that was not approved
        ├── ApprovalDeniedError .... denied, withdrawn, expired, or its run stopped
        └── ApprovalGuidedError .... answered with guidance: nothing granted, asked anew

A call that fails at the coordinator is never a raw `grpc.RpcError`: it is the subclass of
`DeskfleetError` its status code names, carrying the coordinator's one-line reason.
"""

from __future__ import annotations

from typing import Any

from shared.errors import (
    AlreadyExistsError as AlreadyExistsError,
    AuthenticationError as AuthenticationError,
    DataIntegrityError as DataIntegrityError,
    DeskfleetError as DeskfleetError,
    FailedPreconditionError as FailedPreconditionError,
    InternalError as InternalError,
    InvalidArgumentError as InvalidArgumentError,
    MissingCredentialError as MissingCredentialError,
    NotFoundError as NotFoundError,
    PermissionDeniedError as PermissionDeniedError,
    ResourceExhaustedError as ResourceExhaustedError,
    RevokedError as RevokedError,
    StoreUnavailableError as StoreUnavailableError,
    TooManyFailuresError as TooManyFailuresError,
    UnavailableError as UnavailableError,
)


class ActionError(DeskfleetError):
    """A desktop action that did not succeed. `status` is the coordinator's (refused, failed,
    cancelled, unknown), `reason` the refusal or failure code (`out_of_scope`, `kill_switch`,
    ...; see `shared.desktop_scope.CODES`), `result` what the worker reported, if anything."""

    def __init__(
        self,
        message: str,
        *,
        action: str,
        status: str,
        reason: str,
        action_id: str = "",
        result: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.action = action
        self.status = status
        self.reason = reason
        self.action_id = action_id
        self.result = result


class ActionRefusedError(ActionError):
    """Refused before anything ran: nothing happened on the desktop."""


class ActionFailedError(ActionError):
    """It ran and failed, was interrupted, or its outcome is unknown."""


class ApprovalError(DeskfleetError):
    """A desktop request that ended without an approval to act under."""

    def __init__(self, message: str, *, run_id: str, status: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id
        self.status = status


class ApprovalDeniedError(ApprovalError):
    """Denied, withdrawn or expired, or the request's run stopped before an approval."""


class ApprovalGuidedError(ApprovalError):
    """A person answered with guidance instead of approving (`guidance` holds it). Nothing is
    granted; the request is asked anew, so `wait_approved` may be called again."""

    def __init__(self, message: str, *, run_id: str, guidance: str) -> None:
        super().__init__(message, run_id=run_id, status="WAITING_FOR_AUTHORITY")
        self.guidance = guidance


__all__ = [
    "ActionError",
    "ActionFailedError",
    "ActionRefusedError",
    "AlreadyExistsError",
    "ApprovalDeniedError",
    "ApprovalError",
    "ApprovalGuidedError",
    "AuthenticationError",
    "DataIntegrityError",
    "DeskfleetError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "MissingCredentialError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "RevokedError",
    "StoreUnavailableError",
    "TooManyFailuresError",
    "UnavailableError",
]


class WatchLostError(UnavailableError):
    """A run's watch lost the coordinator and could not reconnect in its window. `last_seq`
    is the last event it yielded: watch again with `after_seq=last_seq` to go on."""

    def __init__(self, message: str, *, run_id: str, last_seq: int) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.last_seq = last_seq
