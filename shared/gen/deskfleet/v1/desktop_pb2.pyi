import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from shared.gen.deskfleet.v1 import fleet_pb2 as _fleet_pb2
from shared.gen.deskfleet.v1 import runs_pb2 as _runs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Region(_message.Message):
    __slots__ = ("x", "y", "width", "height")
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    x: int
    y: int
    width: int
    height: int
    def __init__(self, x: _Optional[int] = ..., y: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ...) -> None: ...

class DesktopScope(_message.Message):
    __slots__ = ("actions", "displays", "region", "ttl_seconds", "max_actions")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DISPLAYS_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedScalarFieldContainer[str]
    displays: _containers.RepeatedScalarFieldContainer[int]
    region: Region
    ttl_seconds: float
    max_actions: int
    def __init__(self, actions: _Optional[_Iterable[str]] = ..., displays: _Optional[_Iterable[int]] = ..., region: _Optional[_Union[Region, _Mapping]] = ..., ttl_seconds: _Optional[float] = ..., max_actions: _Optional[int] = ...) -> None: ...

class RequestDesktopRequest(_message.Message):
    __slots__ = ("worker", "scope", "title", "reason")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    worker: str
    scope: DesktopScope
    title: str
    reason: str
    def __init__(self, worker: _Optional[str] = ..., scope: _Optional[_Union[DesktopScope, _Mapping]] = ..., title: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("id", "run_id", "owner", "kind", "worker_id", "status", "requested", "granted", "reason", "answer", "answered_by", "requested_at", "answered_at", "expires_at", "actions_used", "owner_name", "answered_by_name")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_USED_FIELD_NUMBER: _ClassVar[int]
    OWNER_NAME_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    owner: str
    kind: str
    worker_id: str
    status: str
    requested: DesktopScope
    granted: DesktopScope
    reason: str
    answer: str
    answered_by: str
    requested_at: _timestamp_pb2.Timestamp
    answered_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    actions_used: int
    owner_name: str
    answered_by_name: str
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., owner: _Optional[str] = ..., kind: _Optional[str] = ..., worker_id: _Optional[str] = ..., status: _Optional[str] = ..., requested: _Optional[_Union[DesktopScope, _Mapping]] = ..., granted: _Optional[_Union[DesktopScope, _Mapping]] = ..., reason: _Optional[str] = ..., answer: _Optional[str] = ..., answered_by: _Optional[str] = ..., requested_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., answered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actions_used: _Optional[int] = ..., owner_name: _Optional[str] = ..., answered_by_name: _Optional[str] = ...) -> None: ...

class ListApprovalsRequest(_message.Message):
    __slots__ = ("status", "limit")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    status: str
    limit: int
    def __init__(self, status: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListApprovalsResponse(_message.Message):
    __slots__ = ("approvals",)
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    def __init__(self, approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ...) -> None: ...

class PeekScreenRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ScreenPeek(_message.Message):
    __slots__ = ("approval_id", "worker_id", "display", "media_type", "data", "width", "height", "taken_at")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    TAKEN_AT_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    worker_id: str
    display: int
    media_type: str
    data: bytes
    width: int
    height: int
    taken_at: _timestamp_pb2.Timestamp
    def __init__(self, approval_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., display: _Optional[int] = ..., media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., taken_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ("id", "scope", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    scope: DesktopScope
    reason: str
    def __init__(self, id: _Optional[str] = ..., scope: _Optional[_Union[DesktopScope, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class DenyRequest(_message.Message):
    __slots__ = ("id", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DiscussApprovalRequest(_message.Message):
    __slots__ = ("id", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class AdviseApprovalRequest(_message.Message):
    __slots__ = ("id", "model")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    id: str
    model: str
    def __init__(self, id: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class ApprovalNote(_message.Message):
    __slots__ = ("id", "kind", "author", "text", "at")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    author: str
    text: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., author: _Optional[str] = ..., text: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ApprovalDiscussion(_message.Message):
    __slots__ = ("approval", "goal_request", "notes")
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    GOAL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    approval: Approval
    goal_request: str
    notes: _containers.RepeatedCompositeFieldContainer[ApprovalNote]
    def __init__(self, approval: _Optional[_Union[Approval, _Mapping]] = ..., goal_request: _Optional[str] = ..., notes: _Optional[_Iterable[_Union[ApprovalNote, _Mapping]]] = ...) -> None: ...

class GuideApprovalRequest(_message.Message):
    __slots__ = ("id", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class DesktopActRequest(_message.Message):
    __slots__ = ("run_id", "action", "args_json", "timeout_seconds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    action: str
    args_json: str
    timeout_seconds: float
    def __init__(self, run_id: _Optional[str] = ..., action: _Optional[str] = ..., args_json: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class ArtifactInfo(_message.Message):
    __slots__ = ("sha256", "media_type", "size", "width", "height", "role")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    media_type: str
    size: int
    width: int
    height: int
    role: str
    def __init__(self, sha256: _Optional[str] = ..., media_type: _Optional[str] = ..., size: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., role: _Optional[str] = ...) -> None: ...

class DesktopActResponse(_message.Message):
    __slots__ = ("run_id", "action_id", "status", "code", "error", "result_json", "receipt_id", "artifacts")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_ID_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    action_id: str
    status: str
    code: str
    error: str
    result_json: str
    receipt_id: str
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactInfo]
    def __init__(self, run_id: _Optional[str] = ..., action_id: _Optional[str] = ..., status: _Optional[str] = ..., code: _Optional[str] = ..., error: _Optional[str] = ..., result_json: _Optional[str] = ..., receipt_id: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactInfo, _Mapping]]] = ...) -> None: ...

class GetArtifactRequest(_message.Message):
    __slots__ = ("run_id", "sha256")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    sha256: str
    def __init__(self, run_id: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("info", "data")
    INFO_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    info: ArtifactInfo
    data: bytes
    def __init__(self, info: _Optional[_Union[ArtifactInfo, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class SetSecretRequest(_message.Message):
    __slots__ = ("name", "value", "owner")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    owner: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class SecretInfo(_message.Message):
    __slots__ = ("name", "owner", "updated_at", "updated_by")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    updated_at: _timestamp_pb2.Timestamp
    updated_by: str
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_by: _Optional[str] = ...) -> None: ...

class WatchScreenRequest(_message.Message):
    __slots__ = ("worker", "run", "display", "max_fps", "quality", "client")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    MAX_FPS_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    worker: str
    run: str
    display: int
    max_fps: float
    quality: int
    client: str
    def __init__(self, worker: _Optional[str] = ..., run: _Optional[str] = ..., display: _Optional[int] = ..., max_fps: _Optional[float] = ..., quality: _Optional[int] = ..., client: _Optional[str] = ...) -> None: ...

class LiveFrame(_message.Message):
    __slots__ = ("watch_id", "seq", "media_type", "data", "width", "height", "captured_at", "worker_id", "display")
    WATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    watch_id: str
    seq: int
    media_type: str
    data: bytes
    width: int
    height: int
    captured_at: _timestamp_pb2.Timestamp
    worker_id: str
    display: int
    def __init__(self, watch_id: _Optional[str] = ..., seq: _Optional[int] = ..., media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., captured_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., worker_id: _Optional[str] = ..., display: _Optional[int] = ...) -> None: ...

class TakeOverRequest(_message.Message):
    __slots__ = ("run", "worker", "reason")
    RUN_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run: str
    worker: str
    reason: str
    def __init__(self, run: _Optional[str] = ..., worker: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Takeover(_message.Message):
    __slots__ = ("id", "worker_id", "run_id", "display", "by", "started_at", "ended_at", "events", "status", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    worker_id: str
    run_id: str
    display: int
    by: str
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    events: int
    status: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., worker_id: _Optional[str] = ..., run_id: _Optional[str] = ..., display: _Optional[int] = ..., by: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., events: _Optional[int] = ..., status: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class HumanEvent(_message.Message):
    __slots__ = ("kind", "x", "y", "button", "dx", "dy", "key", "text")
    KIND_FIELD_NUMBER: _ClassVar[int]
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    BUTTON_FIELD_NUMBER: _ClassVar[int]
    DX_FIELD_NUMBER: _ClassVar[int]
    DY_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    x: int
    y: int
    button: str
    dx: int
    dy: int
    key: str
    text: str
    def __init__(self, kind: _Optional[str] = ..., x: _Optional[int] = ..., y: _Optional[int] = ..., button: _Optional[str] = ..., dx: _Optional[int] = ..., dy: _Optional[int] = ..., key: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class SendInputRequest(_message.Message):
    __slots__ = ("takeover", "events")
    TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    takeover: str
    events: _containers.RepeatedCompositeFieldContainer[HumanEvent]
    def __init__(self, takeover: _Optional[str] = ..., events: _Optional[_Iterable[_Union[HumanEvent, _Mapping]]] = ...) -> None: ...

class SendInputResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: int
    def __init__(self, applied: _Optional[int] = ...) -> None: ...

class HandBackRequest(_message.Message):
    __slots__ = ("takeover", "worker", "note")
    TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    takeover: str
    worker: str
    note: str
    def __init__(self, takeover: _Optional[str] = ..., worker: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class KillSwitch(_message.Message):
    __slots__ = ("id", "scope", "target", "reason", "engaged_by", "engaged_at", "engaged", "released_by", "released_at", "acknowledged", "unacknowledged", "acknowledged_count", "unacknowledged_count", "engaged_by_name", "released_by_name")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ENGAGED_BY_FIELD_NUMBER: _ClassVar[int]
    ENGAGED_AT_FIELD_NUMBER: _ClassVar[int]
    ENGAGED_FIELD_NUMBER: _ClassVar[int]
    RELEASED_BY_FIELD_NUMBER: _ClassVar[int]
    RELEASED_AT_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    UNACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNACKNOWLEDGED_COUNT_FIELD_NUMBER: _ClassVar[int]
    ENGAGED_BY_NAME_FIELD_NUMBER: _ClassVar[int]
    RELEASED_BY_NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    scope: str
    target: str
    reason: str
    engaged_by: str
    engaged_at: _timestamp_pb2.Timestamp
    engaged: bool
    released_by: str
    released_at: _timestamp_pb2.Timestamp
    acknowledged: _containers.RepeatedScalarFieldContainer[str]
    unacknowledged: _containers.RepeatedScalarFieldContainer[str]
    acknowledged_count: int
    unacknowledged_count: int
    engaged_by_name: str
    released_by_name: str
    def __init__(self, id: _Optional[str] = ..., scope: _Optional[str] = ..., target: _Optional[str] = ..., reason: _Optional[str] = ..., engaged_by: _Optional[str] = ..., engaged_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., engaged: _Optional[bool] = ..., released_by: _Optional[str] = ..., released_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., acknowledged: _Optional[_Iterable[str]] = ..., unacknowledged: _Optional[_Iterable[str]] = ..., acknowledged_count: _Optional[int] = ..., unacknowledged_count: _Optional[int] = ..., engaged_by_name: _Optional[str] = ..., released_by_name: _Optional[str] = ...) -> None: ...

class EngageKillRequest(_message.Message):
    __slots__ = ("worker", "run", "reason")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    worker: str
    run: str
    reason: str
    def __init__(self, worker: _Optional[str] = ..., run: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseKillRequest(_message.Message):
    __slots__ = ("id", "worker", "run", "fleet", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    worker: str
    run: str
    fleet: bool
    reason: str
    def __init__(self, id: _Optional[str] = ..., worker: _Optional[str] = ..., run: _Optional[str] = ..., fleet: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class KillStatusRequest(_message.Message):
    __slots__ = ("include_released",)
    INCLUDE_RELEASED_FIELD_NUMBER: _ClassVar[int]
    include_released: bool
    def __init__(self, include_released: _Optional[bool] = ...) -> None: ...

class KillStatusResponse(_message.Message):
    __slots__ = ("switches", "local", "local_count")
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    switches: _containers.RepeatedCompositeFieldContainer[KillSwitch]
    local: _containers.RepeatedCompositeFieldContainer[LocalKillSwitch]
    local_count: int
    def __init__(self, switches: _Optional[_Iterable[_Union[KillSwitch, _Mapping]]] = ..., local: _Optional[_Iterable[_Union[LocalKillSwitch, _Mapping]]] = ..., local_count: _Optional[int] = ...) -> None: ...

class LocalKillSwitch(_message.Message):
    __slots__ = ("worker_id", "worker_name", "state")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    worker_name: str
    state: _fleet_pb2.LocalKill
    def __init__(self, worker_id: _Optional[str] = ..., worker_name: _Optional[str] = ..., state: _Optional[_Union[_fleet_pb2.LocalKill, _Mapping]] = ...) -> None: ...

class ListRecordingRequest(_message.Message):
    __slots__ = ("run_id", "after_seq", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class RecordedFrame(_message.Message):
    __slots__ = ("seq", "captured_at", "held_by", "width", "height", "size", "sha256", "media_type")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    captured_at: _timestamp_pb2.Timestamp
    held_by: str
    width: int
    height: int
    size: int
    sha256: str
    media_type: str
    def __init__(self, seq: _Optional[int] = ..., captured_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., held_by: _Optional[str] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., media_type: _Optional[str] = ...) -> None: ...

class RecordingPage(_message.Message):
    __slots__ = ("frames", "next_seq", "total")
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedCompositeFieldContainer[RecordedFrame]
    next_seq: int
    total: int
    def __init__(self, frames: _Optional[_Iterable[_Union[RecordedFrame, _Mapping]]] = ..., next_seq: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class GetRecordingFrameRequest(_message.Message):
    __slots__ = ("run_id", "seq")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class RecordedFrameData(_message.Message):
    __slots__ = ("frame", "data")
    FRAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    frame: RecordedFrame
    data: bytes
    def __init__(self, frame: _Optional[_Union[RecordedFrame, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...
