"""The worker's own check of an approved desktop scope, before anything touches the screen.

The coordinator checks the scope before it dispatches; the worker checks it again (defense
in depth) so that a coordinator defect, a stale dispatch or a replayed message cannot make a
worker act outside what a person approved. The scope comes as `Dispatch.scope` (a
`ScopeGrant`); the contract, the rule and the codes are shared with the coordinator
(shared/desktop_scope.py). Everything here is pure: no display needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shared.desktop_scope import (
    EXPIRED,
    INVALID_SCOPE,
    MAX_ACTIONS_USED,
    NO_SCOPE,
    Grant,
    InvalidScope,
    Refusal,
    keys_in_text,
    outside,
)
from shared.gen.deskfleet.v1 import worker_pb2
from worker_agent.actions import ActionRefused


@dataclass(frozen=True)
class DesktopScope:
    """An approved scope as received, with the worker's clock reading at receipt."""

    grant: Grant
    received_at: float  # time.monotonic() when the action started here

    @classmethod
    def received(cls, message: worker_pb2.ScopeGrant | None, received_at: float) -> DesktopScope:
        """The dispatch's scope, checked against the contract; ActionRefused(no_scope |
        invalid_scope) if there is none or it breaks the contract."""
        if message is None:
            raise ActionRefused(
                "no approved scope came with this action: desktop input and screenshots need one",
                code=NO_SCOPE,
            )
        try:
            return cls(Grant.from_proto(message), received_at)
        except InvalidScope as exc:
            raise ActionRefused(f"the scope sent breaks the contract: {exc}", INVALID_SCOPE) from (
                exc
            )

    def seconds_left(self, now: float) -> float:
        return self.grant.expires_in - (now - self.received_at)


def refuse_scope_in_args(args: dict[str, object]) -> None:
    """A `scope` among the args is never read, and the action is refused (invalid_scope): a
    scope travels only as Dispatch.scope, so one in the args is a defect or an attempt."""
    if "scope" in args:
        raise ActionRefused(
            "'scope' came inside the action's args, where no scope is read: the approved scope"
            " travels as Dispatch.scope (a coordinator older than this worker?)",
            code=INVALID_SCOPE,
        )


def check_scope(
    scope: DesktopScope | None,
    action: str,
    display: int,
    points: Iterable[tuple[int, int]] = (),
    *,
    now: float,
) -> None:
    """Refuse (ActionRefused with a code) unless `action` on `display` at `points` is in scope.

    `points` are real pixels relative to the display, after any scaling: every point the
    action would touch, a drag's end included.
    """
    if scope is None:
        raise ActionRefused(f"{action} needs an approved scope and none was sent", code=NO_SCOPE)
    if scope.seconds_left(now) <= 0:
        raise ActionRefused("the approved scope has expired", code=EXPIRED)
    if scope.grant.remaining <= 0:
        raise ActionRefused(
            "the approved scope has no actions left (its maximum was reached)",
            code=MAX_ACTIONS_USED,
        )
    g = scope.grant
    _raise(outside(g.actions, g.displays, g.region, action, display, points))


def check_text_keys(scope: DesktopScope | None, text: object, what: str = "'text'") -> None:
    """Refuse (out_of_scope) `type` text with a control character unless `key` is approved too:
    typed, a newline presses Return and a tab presses Tab. For a secret's value (`what` other
    than 'text') the refusal says nothing about the character or where it is."""
    if scope is not None:
        _raise(keys_in_text(scope.grant.actions, text, what))


def _raise(refusal: Refusal | None) -> None:
    if refusal is not None:
        raise ActionRefused(refusal.message, code=refusal.code)
