"""The one interceptor on every deskfleet RPC: authenticate, authorize, and map errors.

Domain code raises `shared.errors.DeskfleetError`; this is the only place that turns those
into gRPC status codes. Any other exception is a defect: it is logged with a reference and
the caller gets INTERNAL with that reference, never a traceback.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from coordinator.model.identity import Principal
from coordinator.security import audit, authz
from coordinator.security.principals import Authenticator
from coordinator.security.ratelimit import FailureLimiter, host_of
from shared import tracing
from shared.credentials import CONSOLE_CLIENT_KEY, METADATA_KEY, SCHEME
from shared.errors import (
    ERROR_METADATA_KEY,
    AuthenticationError,
    DeskfleetError,
    MissingCredentialError,
    PermissionDeniedError,
    TooManyFailuresError,
)
from shared.ids import new_id

log = logging.getLogger(__name__)

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # generic only in the type stubs

_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "principal", default=None
)


def current_principal() -> Principal:
    principal = _principal.get()
    assert principal is not None, "called outside an authenticated RPC"
    return principal


def _bearer(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == METADATA_KEY and isinstance(value, str):
            return value[len(SCHEME) :] if value.startswith(SCHEME) else value
    return None


def _metadata(context: grpc.aio.ServicerContext[Any, Any], name: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == name and isinstance(value, str):
            return value
    return ""


class GuardInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, auth: Authenticator, limiter: FailureLimiter) -> None:
        self._auth = auth
        self._limiter = limiter

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or not method.startswith(authz.GUARDED_PREFIX):
            return handler  # health and reflection are public by design
        roles = authz.RULES.get(method)
        if handler.unary_unary is not None:
            inner = handler.unary_unary
            factory = grpc.unary_unary_rpc_method_handler
        elif handler.unary_stream is not None:
            inner = handler.unary_stream
            factory = grpc.unary_stream_rpc_method_handler
        elif handler.stream_stream is not None:
            inner = handler.stream_stream
            factory = grpc.stream_stream_rpc_method_handler
        else:
            raise TypeError(f"{method}: client-streaming RPCs are not guarded")

        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if handler.stream_stream is not None:
                # A worker's stream lives for hours: its actions have spans of their own.
                return await checked(request, context)
            with tracing.server_span(method, _metadata(context, tracing.METADATA_KEY)):
                return await checked(request, context)

        async def checked(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                await self._admit(method, roles, context)
                return await inner(request, context)  # type: ignore[arg-type]
            except DeskfleetError as failure:
                exc = self._counted(failure, context)
                await context.abort(
                    exc.code,
                    exc.message,
                    trailing_metadata=((ERROR_METADATA_KEY, type(exc).__name__),),
                )
            except (grpc.aio.AbortError, grpc.aio.UsageError):
                raise
            except Exception:
                ref = new_id("err")
                log.exception("unexpected error in %s (ref %s)", method, ref)
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error (ref {ref})")

        return factory(
            guarded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _counted(
        self, exc: DeskfleetError, context: grpc.aio.ServicerContext[Any, Any]
    ) -> DeskfleetError:
        """A failed authentication counts against its host, and past the limit it is answered
        as such. Only a request that already failed is ever answered so: the count never
        stands between a valid credential and its call (see `coordinator.security.ratelimit`)."""
        if not isinstance(exc, AuthenticationError) or isinstance(exc, MissingCredentialError):
            return exc
        host = host_of(context.peer() or "")
        wait = self._limiter.failed(host)
        if wait is None:
            return exc
        return TooManyFailuresError(
            f"too many failed authentications from {host}: try again in {wait:.0f} s"
            f" (last: {exc.message})"
        )

    async def _admit(
        self, method: str, roles: frozenset[Any] | None, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        audit.set_peer(context.peer() or "", _metadata(context, CONSOLE_CLIENT_KEY))
        if roles is None:
            raise PermissionDeniedError(f"{method} has no access rule; it is refused to everyone")
        if not roles:  # authz.PUBLIC
            return
        principal = await self._auth.authenticate(_bearer(context))
        if principal.role not in roles:
            needed = " or ".join(sorted(r.value for r in roles))
            raise PermissionDeniedError(
                f"{method.rsplit('/', 1)[-1]} needs {_article(needed)} {needed} credential;"
                f" this one is {_article(principal.role.value)} {principal.role.value}"
                f" credential ({principal.id})"
            )
        _principal.set(principal)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
