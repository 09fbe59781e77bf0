"""AdminService: enrollment tokens and users."""

from __future__ import annotations

import re
import time
from typing import Any

import grpc

from coordinator.fleet import activity, enrollment
from coordinator.model.identity import Role
from coordinator.model.settings import CoordinatorConfig
from coordinator.runs.quota import Quotas, QuotaView
from coordinator.security import audit
from coordinator.security.principals import (
    Authenticator,
    NewUser,
    create_user,
    list_users,
    rotate_user,
)
from coordinator.servicers.guard import current_principal
from coordinator.store import Database
from shared.errors import InvalidArgumentError
from shared.gen.deskfleet.v1 import admin_pb2, admin_pb2_grpc
from shared.timestamps import to_timestamp

WORKER_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # ours are `wkr_<ulid>`; nothing else is read

Context = grpc.aio.ServicerContext[Any, Any]


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(
        self, db: Database, config: CoordinatorConfig, auth: Authenticator, quotas: Quotas
    ) -> None:
        self._db = db
        self._config = config
        self._auth = auth
        self._quotas = quotas

    async def CreateEnrollmentToken(
        self, request: admin_pb2.CreateEnrollmentTokenRequest, context: Context
    ) -> admin_pb2.EnrollmentToken:
        by = audit.actor(current_principal())
        token = await enrollment.create_token(
            self._db,
            by.principal,
            capability_names=list(request.capabilities),
            ttl=float(request.ttl_seconds) or self._config.enrollment_token_ttl,
            uses=request.uses or 1,
        )
        await audit.write(
            self._db,
            by,
            "token.create",
            token.id,
            capabilities=list(token.capabilities),
            uses=token.uses,
            expires_at=token.expires_at,
        )
        return admin_pb2.EnrollmentToken(
            id=token.id,
            token=token.secret,
            capabilities=list(token.capabilities),
            uses=token.uses,
            expires_at=to_timestamp(token.expires_at),
        )

    async def ListEnrollmentTokens(
        self, request: admin_pb2.ListEnrollmentTokensRequest, context: Context
    ) -> admin_pb2.EnrollmentTokens:
        tokens = await enrollment.list_tokens(self._db)
        return admin_pb2.EnrollmentTokens(tokens=[_token_info(t) for t in tokens])

    async def RevokeEnrollmentToken(
        self, request: admin_pb2.RevokeEnrollmentTokenRequest, context: Context
    ) -> admin_pb2.EnrollmentTokenInfo:
        token = await enrollment.revoke_token(
            self._db, audit.actor(current_principal()), request.id
        )
        return _token_info(token)

    async def ListUsers(
        self, request: admin_pb2.ListUsersRequest, context: Context
    ) -> admin_pb2.Users:
        return admin_pb2.Users(
            users=[
                admin_pb2.UserInfo(
                    id=u.id, name=u.name, role=u.role.value, created_at=to_timestamp(u.created_at)
                )
                for u in await list_users(self._db)
            ]
        )

    async def CreateUser(
        self, request: admin_pb2.CreateUserRequest, context: Context
    ) -> admin_pb2.User:
        try:
            role = Role(request.role or "owner")
        except ValueError as exc:
            raise InvalidArgumentError("role: must be owner or admin") from exc
        user = await create_user(self._db, request.name, role, audit.actor(current_principal()))
        return _user(user)

    async def RotateUser(
        self, request: admin_pb2.RotateUserRequest, context: Context
    ) -> admin_pb2.User:
        user = await rotate_user(self._db, audit.actor(current_principal()), request.name)
        # The old secret stops at once here; other replicas remember successes for 2 s at most.
        self._auth.forget(user.principal.id)
        return _user(user)

    async def ListAudit(
        self, request: admin_pb2.ListAuditRequest, context: Context
    ) -> admin_pb2.AuditEntries:
        rows, more = await audit.entries(self._db, request.since, request.limit)
        return admin_pb2.AuditEntries(
            entries=[
                admin_pb2.AuditEntry(
                    seq=r.seq,
                    at=r.at,
                    actor_id=r.actor_id,
                    actor_name=r.actor_name,
                    actor_role=r.actor_role,
                    peer=r.peer,
                    action=r.action,
                    target=r.target,
                    detail_json=r.detail,
                )
                for r in rows
            ],
            more=more,
        )

    async def GetFleetActivity(
        self, request: admin_pb2.FleetActivityRequest, context: Context
    ) -> admin_pb2.FleetActivity:
        if not 0 <= request.recent <= 100:
            raise InvalidArgumentError("recent: between 0 and 100")
        if request.worker and not WORKER_ID.fullmatch(request.worker):
            raise InvalidArgumentError(
                f"worker: a worker id (see `deskfleet status`), not {request.worker[:40]!r}"
            )
        now = await activity.read(self._db, current_principal(), request.worker, request.recent)
        return admin_pb2.FleetActivity(
            actions=[_worker_activity(a) for a in now.attempts],
            runs_by_state=now.runs_by_status,
            fleet_wide=now.fleet_wide,
            recent=[_worker_activity(a) for a in now.recent],
        )

    async def GetUserLimits(
        self, request: admin_pb2.GetUserLimitsRequest, context: Context
    ) -> admin_pb2.UserLimits:
        return _limits(await self._quotas.view(current_principal(), request.name))

    async def SetUserLimits(
        self, request: admin_pb2.SetUserLimitsRequest, context: Context
    ) -> admin_pb2.UserLimits:
        view = await self._quotas.set(
            audit.actor(current_principal()),
            request.name,
            request.max_active_runs if request.HasField("max_active_runs") else None,
            request.max_stored_bytes if request.HasField("max_stored_bytes") else None,
        )
        return _limits(view)

    async def WhoAmI(
        self, request: admin_pb2.WhoAmIRequest, context: Context
    ) -> admin_pb2.Principal:
        me = current_principal()
        # The coordinator's clock lets a caller (`deskfleet-worker doctor`) measure its skew.
        return admin_pb2.Principal(
            id=me.id, name=me.name, role=me.role.value, server_time=time.time()
        )


def _token_info(token: enrollment.TokenInfo) -> admin_pb2.EnrollmentTokenInfo:
    return admin_pb2.EnrollmentTokenInfo(
        id=token.id,
        capabilities=list(token.capabilities),
        uses=token.uses,
        used=token.used,
        expires_at=to_timestamp(token.expires_at),
        revoked=token.revoked,
        created_at=to_timestamp(token.created_at),
    )


def _user(user: NewUser) -> admin_pb2.User:
    return admin_pb2.User(
        id=user.principal.id,
        name=user.principal.name,
        role=user.principal.role.value,
        token=user.secret,
        created_at=to_timestamp(user.created_at),
    )


def _limits(view: QuotaView) -> admin_pb2.UserLimits:
    return admin_pb2.UserLimits(
        user_id=view.owner_id,
        name=view.name,
        active_runs=view.active_runs,
        stored_bytes=view.stored_bytes,
        max_active_runs=view.limits.max_active_runs,
        max_stored_bytes=view.limits.max_stored_bytes,
        max_active_runs_set=view.overridden[0],
        max_stored_bytes_set=view.overridden[1],
    )


def _worker_activity(a: activity.AttemptInFlight) -> admin_pb2.WorkerActivity:
    return admin_pb2.WorkerActivity(
        worker_id=a.worker_id,
        run_id=a.run_id,
        action_id=a.action_id,
        index=a.index,
        kind=a.kind,
        status=a.status,
        attempt=a.attempt,
        since=to_timestamp(a.since),
        finished_at=to_timestamp(a.finished_at),
        error=a.error,
    )
