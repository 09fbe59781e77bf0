"""The one error tree of deskfleet, and its mapping to gRPC status codes (both ways).

    DeskfleetError
    ├── InvalidArgumentError ........ INVALID_ARGUMENT
    ├── NotFoundError ............... NOT_FOUND
    ├── AlreadyExistsError .......... ALREADY_EXISTS
    ├── FailedPreconditionError ..... FAILED_PRECONDITION
    ├── AuthenticationError ......... UNAUTHENTICATED   (unknown or expired credential)
    │   └── MissingCredentialError .. UNAUTHENTICATED   (no credential at all)
    ├── PermissionDeniedError ....... PERMISSION_DENIED (a known credential that may not do this)
    │   └── RevokedError ............ PERMISSION_DENIED (the credential was revoked)
    ├── ResourceExhaustedError ...... RESOURCE_EXHAUSTED (a limit: guidance, streams, quotas)
    │   └── TooManyFailuresError .... RESOURCE_EXHAUSTED (a failed credential, past the host's
    │                                                     failed-authentication limit)
    ├── UnavailableError ............ UNAVAILABLE
    │   └── StoreUnavailableError ... UNAVAILABLE       (the coordinator cannot read its store)
    ├── DataIntegrityError .......... DATA_LOSS         (a stored receipt or event was altered)
    └── InternalError ............... INTERNAL          (a defect; the message hides details)

Servers raise these from domain code; one place per process maps them to status codes
(`coordinator/servicers/guard.py`), and clients map codes back with `from_rpc_error`, which
keeps the subclasses a client acts on (`SUBCLASSES`) by the name the server tags them with.
"""

from __future__ import annotations

import grpc

# Servers tag the errors they raise on purpose with this trailing metadata key, so that a
# client can tell "the coordinator said UNAVAILABLE" from "the coordinator cannot be reached".
ERROR_METADATA_KEY = "deskfleet-error"


class DeskfleetError(Exception):
    """Base of every error deskfleet reports to a user."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgumentError(DeskfleetError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(DeskfleetError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(DeskfleetError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(DeskfleetError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AuthenticationError(DeskfleetError):
    code = grpc.StatusCode.UNAUTHENTICATED


class MissingCredentialError(AuthenticationError):
    """No credential at all: a mistake, not a guess (failed-authentication limits skip it)."""


class PermissionDeniedError(DeskfleetError):
    code = grpc.StatusCode.PERMISSION_DENIED


class RevokedError(PermissionDeniedError):
    pass


class ResourceExhaustedError(DeskfleetError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class TooManyFailuresError(ResourceExhaustedError):
    """A credential that failed, answered as over its host's limit: it is never a valid
    credential's answer (a client may treat it as an authentication failure)."""


class DataIntegrityError(DeskfleetError):
    code = grpc.StatusCode.DATA_LOSS


class UnavailableError(DeskfleetError):
    code = grpc.StatusCode.UNAVAILABLE


class StoreUnavailableError(UnavailableError):
    pass


class InternalError(DeskfleetError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE: dict[grpc.StatusCode, type[DeskfleetError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        AuthenticationError,
        PermissionDeniedError,
        ResourceExhaustedError,
        UnavailableError,
        DataIntegrityError,
        InternalError,
    )
}


# Subclasses a client tells apart from their code's class, by the server's tag.
SUBCLASSES: dict[str, type[DeskfleetError]] = {
    cls.__name__: cls
    for cls in (MissingCredentialError, RevokedError, TooManyFailuresError, StoreUnavailableError)
}


def from_status(code: grpc.StatusCode, details: str) -> DeskfleetError:
    """The client-side error for a status a server returned."""
    cls = _BY_CODE.get(code, DeskfleetError)
    return cls(details or code.name.lower().replace("_", " "))


def from_rpc_error(exc: grpc.RpcError, target: str) -> DeskfleetError:
    """A failed call as a one-line DeskfleetError (naming the coordinator if unreachable)."""
    call: grpc.Call = exc  # type: ignore[assignment]  # every RpcError raised by a call is one
    code = call.code()
    details = call.details() or ""
    from_server = any(m[0] == ERROR_METADATA_KEY for m in call.trailing_metadata() or ())
    if code == grpc.StatusCode.UNAVAILABLE and not from_server:
        return UnavailableError(f"cannot reach the coordinator at {target}: {_first_line(details)}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return UnavailableError(f"the coordinator at {target} did not answer in time")
    tags = [str(v) for k, v in call.trailing_metadata() or () if k == ERROR_METADATA_KEY]
    sub = SUBCLASSES.get(tags[0]) if tags else None
    if sub is not None and sub.code == code:
        return sub(_first_line(details) or code.name.lower().replace("_", " "))
    return from_status(code, _first_line(details))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
