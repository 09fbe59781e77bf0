import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateEnrollmentTokenRequest(_message.Message):
    __slots__ = ("capabilities", "ttl_seconds", "uses")
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USES_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    ttl_seconds: int
    uses: int
    def __init__(self, capabilities: _Optional[_Iterable[str]] = ..., ttl_seconds: _Optional[int] = ..., uses: _Optional[int] = ...) -> None: ...

class EnrollmentToken(_message.Message):
    __slots__ = ("id", "token", "capabilities", "uses", "expires_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    USES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    token: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    uses: int
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., token: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., uses: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListEnrollmentTokensRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EnrollmentTokenInfo(_message.Message):
    __slots__ = ("id", "capabilities", "uses", "used", "expires_at", "revoked", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    USES_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    uses: int
    used: int
    expires_at: _timestamp_pb2.Timestamp
    revoked: bool
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ..., uses: _Optional[int] = ..., used: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked: _Optional[bool] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class EnrollmentTokens(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[EnrollmentTokenInfo]
    def __init__(self, tokens: _Optional[_Iterable[_Union[EnrollmentTokenInfo, _Mapping]]] = ...) -> None: ...

class RevokeEnrollmentTokenRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("name", "role")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class User(_message.Message):
    __slots__ = ("id", "name", "role", "token", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    role: str
    token: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[str] = ..., token: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserInfo(_message.Message):
    __slots__ = ("id", "name", "role", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    role: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Users(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserInfo]
    def __init__(self, users: _Optional[_Iterable[_Union[UserInfo, _Mapping]]] = ...) -> None: ...

class RotateUserRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetUserLimitsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SetUserLimitsRequest(_message.Message):
    __slots__ = ("name", "max_active_runs", "max_stored_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    MAX_STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_active_runs: int
    max_stored_bytes: int
    def __init__(self, name: _Optional[str] = ..., max_active_runs: _Optional[int] = ..., max_stored_bytes: _Optional[int] = ...) -> None: ...

class UserLimits(_message.Message):
    __slots__ = ("user_id", "name", "active_runs", "stored_bytes", "max_active_runs", "max_stored_bytes", "max_active_runs_set", "max_stored_bytes_set")
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    MAX_STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_SET_FIELD_NUMBER: _ClassVar[int]
    MAX_STORED_BYTES_SET_FIELD_NUMBER: _ClassVar[int]
    user_id: str
    name: str
    active_runs: int
    stored_bytes: int
    max_active_runs: int
    max_stored_bytes: int
    max_active_runs_set: bool
    max_stored_bytes_set: bool
    def __init__(self, user_id: _Optional[str] = ..., name: _Optional[str] = ..., active_runs: _Optional[int] = ..., stored_bytes: _Optional[int] = ..., max_active_runs: _Optional[int] = ..., max_stored_bytes: _Optional[int] = ..., max_active_runs_set: _Optional[bool] = ..., max_stored_bytes_set: _Optional[bool] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Principal(_message.Message):
    __slots__ = ("id", "name", "role", "server_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    role: str
    server_time: float
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., role: _Optional[str] = ..., server_time: _Optional[float] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("since", "limit")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    since: float
    limit: int
    def __init__(self, since: _Optional[float] = ..., limit: _Optional[int] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("seq", "at", "actor_id", "actor_name", "actor_role", "peer", "action", "target", "detail_json")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ROLE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DETAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at: float
    actor_id: str
    actor_name: str
    actor_role: str
    peer: str
    action: str
    target: str
    detail_json: str
    def __init__(self, seq: _Optional[int] = ..., at: _Optional[float] = ..., actor_id: _Optional[str] = ..., actor_name: _Optional[str] = ..., actor_role: _Optional[str] = ..., peer: _Optional[str] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., detail_json: _Optional[str] = ...) -> None: ...

class AuditEntries(_message.Message):
    __slots__ = ("entries", "more")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    more: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class FleetActivityRequest(_message.Message):
    __slots__ = ("worker", "recent")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIELD_NUMBER: _ClassVar[int]
    worker: str
    recent: int
    def __init__(self, worker: _Optional[str] = ..., recent: _Optional[int] = ...) -> None: ...

class WorkerActivity(_message.Message):
    __slots__ = ("worker_id", "run_id", "action_id", "index", "kind", "status", "attempt", "since", "finished_at", "error")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    run_id: str
    action_id: str
    index: int
    kind: str
    status: str
    attempt: int
    since: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    error: str
    def __init__(self, worker_id: _Optional[str] = ..., run_id: _Optional[str] = ..., action_id: _Optional[str] = ..., index: _Optional[int] = ..., kind: _Optional[str] = ..., status: _Optional[str] = ..., attempt: _Optional[int] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class FleetActivity(_message.Message):
    __slots__ = ("actions", "runs_by_state", "fleet_wide", "recent")
    class RunsByStateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    RUNS_BY_STATE_FIELD_NUMBER: _ClassVar[int]
    FLEET_WIDE_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedCompositeFieldContainer[WorkerActivity]
    runs_by_state: _containers.ScalarMap[str, int]
    fleet_wide: bool
    recent: _containers.RepeatedCompositeFieldContainer[WorkerActivity]
    def __init__(self, actions: _Optional[_Iterable[_Union[WorkerActivity, _Mapping]]] = ..., runs_by_state: _Optional[_Mapping[str, int]] = ..., fleet_wide: _Optional[bool] = ..., recent: _Optional[_Iterable[_Union[WorkerActivity, _Mapping]]] = ...) -> None: ...
