from shared.gen.deskfleet.v1 import desktop_pb2 as _desktop_pb2
from shared.gen.deskfleet.v1 import fleet_pb2 as _fleet_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnrollRequest(_message.Message):
    __slots__ = ("token", "name", "labels", "csr_pem")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CSR_PEM_FIELD_NUMBER: _ClassVar[int]
    token: str
    name: str
    labels: _containers.ScalarMap[str, str]
    csr_pem: str
    def __init__(self, token: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., csr_pem: _Optional[str] = ...) -> None: ...

class EnrollResponse(_message.Message):
    __slots__ = ("worker_id", "credential", "allowed_capabilities", "certificate_pem", "ca_pem")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    credential: str
    allowed_capabilities: _containers.RepeatedScalarFieldContainer[str]
    certificate_pem: str
    ca_pem: str
    def __init__(self, worker_id: _Optional[str] = ..., credential: _Optional[str] = ..., allowed_capabilities: _Optional[_Iterable[str]] = ..., certificate_pem: _Optional[str] = ..., ca_pem: _Optional[str] = ...) -> None: ...

class RenewCertificateRequest(_message.Message):
    __slots__ = ("csr_pem",)
    CSR_PEM_FIELD_NUMBER: _ClassVar[int]
    csr_pem: str
    def __init__(self, csr_pem: _Optional[str] = ...) -> None: ...

class Certificate(_message.Message):
    __slots__ = ("certificate_pem", "ca_pem", "not_after")
    CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    NOT_AFTER_FIELD_NUMBER: _ClassVar[int]
    certificate_pem: str
    ca_pem: str
    not_after: float
    def __init__(self, certificate_pem: _Optional[str] = ..., ca_pem: _Optional[str] = ..., not_after: _Optional[float] = ...) -> None: ...

class HeldAction(_message.Message):
    __slots__ = ("action_id", "attempt_id", "epoch", "state")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    attempt_id: str
    epoch: int
    state: str
    def __init__(self, action_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., epoch: _Optional[int] = ..., state: _Optional[str] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("advertisement", "held", "stream_liveness", "local_kill")
    ADVERTISEMENT_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    STREAM_LIVENESS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_KILL_FIELD_NUMBER: _ClassVar[int]
    advertisement: _fleet_pb2.Advertisement
    held: _containers.RepeatedCompositeFieldContainer[HeldAction]
    stream_liveness: bool
    local_kill: _fleet_pb2.LocalKill
    def __init__(self, advertisement: _Optional[_Union[_fleet_pb2.Advertisement, _Mapping]] = ..., held: _Optional[_Iterable[_Union[HeldAction, _Mapping]]] = ..., stream_liveness: _Optional[bool] = ..., local_kill: _Optional[_Union[_fleet_pb2.LocalKill, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class ActionStarted(_message.Message):
    __slots__ = ("action_id", "attempt_id", "epoch")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    attempt_id: str
    epoch: int
    def __init__(self, action_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("action_id", "run_id", "attempt_id", "epoch", "status", "result_json", "error", "started_at", "finished_at", "artifacts", "traceparent")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    run_id: str
    attempt_id: str
    epoch: int
    status: str
    result_json: str
    error: str
    started_at: float
    finished_at: float
    artifacts: _containers.RepeatedCompositeFieldContainer[ReceiptArtifact]
    traceparent: str
    def __init__(self, action_id: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., epoch: _Optional[int] = ..., status: _Optional[str] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ..., started_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., artifacts: _Optional[_Iterable[_Union[ReceiptArtifact, _Mapping]]] = ..., traceparent: _Optional[str] = ...) -> None: ...

class ReceiptArtifact(_message.Message):
    __slots__ = ("sha256", "media_type", "data", "width", "height")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    media_type: str
    data: bytes
    width: int
    height: int
    def __init__(self, sha256: _Optional[str] = ..., media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ...) -> None: ...

class KillAck(_message.Message):
    __slots__ = ("kill_id", "engaged")
    KILL_ID_FIELD_NUMBER: _ClassVar[int]
    ENGAGED_FIELD_NUMBER: _ClassVar[int]
    kill_id: str
    engaged: bool
    def __init__(self, kill_id: _Optional[str] = ..., engaged: _Optional[bool] = ...) -> None: ...

class PeekResult(_message.Message):
    __slots__ = ("peek_id", "media_type", "data", "width", "height", "error", "code")
    PEEK_ID_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    peek_id: str
    media_type: str
    data: bytes
    width: int
    height: int
    error: str
    code: str
    def __init__(self, peek_id: _Optional[str] = ..., media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., error: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("hello", "heartbeat", "started", "receipt", "kill_ack", "peek_result", "local_kill", "frame", "input_result")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    KILL_ACK_FIELD_NUMBER: _ClassVar[int]
    PEEK_RESULT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_KILL_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_RESULT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    heartbeat: Heartbeat
    started: ActionStarted
    receipt: Receipt
    kill_ack: KillAck
    peek_result: PeekResult
    local_kill: _fleet_pb2.LocalKill
    frame: ScreenFrame
    input_result: HumanInputResult
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., started: _Optional[_Union[ActionStarted, _Mapping]] = ..., receipt: _Optional[_Union[Receipt, _Mapping]] = ..., kill_ack: _Optional[_Union[KillAck, _Mapping]] = ..., peek_result: _Optional[_Union[PeekResult, _Mapping]] = ..., local_kill: _Optional[_Union[_fleet_pb2.LocalKill, _Mapping]] = ..., frame: _Optional[_Union[ScreenFrame, _Mapping]] = ..., input_result: _Optional[_Union[HumanInputResult, _Mapping]] = ...) -> None: ...

class ScreenFrame(_message.Message):
    __slots__ = ("watch_id", "seq", "media_type", "data", "width", "height", "captured_at", "error", "code")
    WATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    watch_id: str
    seq: int
    media_type: str
    data: bytes
    width: int
    height: int
    captured_at: float
    error: str
    code: str
    def __init__(self, watch_id: _Optional[str] = ..., seq: _Optional[int] = ..., media_type: _Optional[str] = ..., data: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., captured_at: _Optional[float] = ..., error: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

class HumanInputResult(_message.Message):
    __slots__ = ("input_id", "applied", "error", "code")
    INPUT_ID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    input_id: str
    applied: int
    error: str
    code: str
    def __init__(self, input_id: _Optional[str] = ..., applied: _Optional[int] = ..., error: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("worker_id", "session_id", "replica", "heartbeat_interval_seconds", "lease_ttl_seconds", "kills", "rotate_credential", "stream_liveness", "local_kill_reports")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    KILLS_FIELD_NUMBER: _ClassVar[int]
    ROTATE_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    STREAM_LIVENESS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_KILL_REPORTS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    session_id: str
    replica: str
    heartbeat_interval_seconds: float
    lease_ttl_seconds: float
    kills: _containers.RepeatedCompositeFieldContainer[KillState]
    rotate_credential: bool
    stream_liveness: bool
    local_kill_reports: bool
    def __init__(self, worker_id: _Optional[str] = ..., session_id: _Optional[str] = ..., replica: _Optional[str] = ..., heartbeat_interval_seconds: _Optional[float] = ..., lease_ttl_seconds: _Optional[float] = ..., kills: _Optional[_Iterable[_Union[KillState, _Mapping]]] = ..., rotate_credential: _Optional[bool] = ..., stream_liveness: _Optional[bool] = ..., local_kill_reports: _Optional[bool] = ...) -> None: ...

class RotateCredentialNow(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RotateCredentialRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RotateCredentialResponse(_message.Message):
    __slots__ = ("credential",)
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    credential: str
    def __init__(self, credential: _Optional[str] = ...) -> None: ...

class KillState(_message.Message):
    __slots__ = ("kill_id", "engaged", "scope", "target", "reason")
    KILL_ID_FIELD_NUMBER: _ClassVar[int]
    ENGAGED_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kill_id: str
    engaged: bool
    scope: str
    target: str
    reason: str
    def __init__(self, kill_id: _Optional[str] = ..., engaged: _Optional[bool] = ..., scope: _Optional[str] = ..., target: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class Dispatch(_message.Message):
    __slots__ = ("action_id", "run_id", "attempt_id", "epoch", "attempt", "kind", "args_json", "idempotent", "timeout_seconds", "secrets", "traceparent", "scope")
    class SecretsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    run_id: str
    attempt_id: str
    epoch: int
    attempt: int
    kind: str
    args_json: str
    idempotent: bool
    timeout_seconds: float
    secrets: _containers.ScalarMap[str, str]
    traceparent: str
    scope: ScopeGrant
    def __init__(self, action_id: _Optional[str] = ..., run_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., epoch: _Optional[int] = ..., attempt: _Optional[int] = ..., kind: _Optional[str] = ..., args_json: _Optional[str] = ..., idempotent: _Optional[bool] = ..., timeout_seconds: _Optional[float] = ..., secrets: _Optional[_Mapping[str, str]] = ..., traceparent: _Optional[str] = ..., scope: _Optional[_Union[ScopeGrant, _Mapping]] = ...) -> None: ...

class ScopeGrant(_message.Message):
    __slots__ = ("actions", "displays", "region", "expires_in_seconds", "remaining_actions")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DISPLAYS_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REMAINING_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedScalarFieldContainer[str]
    displays: _containers.RepeatedScalarFieldContainer[int]
    region: _desktop_pb2.Region
    expires_in_seconds: float
    remaining_actions: int
    def __init__(self, actions: _Optional[_Iterable[str]] = ..., displays: _Optional[_Iterable[int]] = ..., region: _Optional[_Union[_desktop_pb2.Region, _Mapping]] = ..., expires_in_seconds: _Optional[float] = ..., remaining_actions: _Optional[int] = ...) -> None: ...

class ReceiptAck(_message.Message):
    __slots__ = ("action_id", "attempt_id", "accepted", "reason")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    attempt_id: str
    accepted: bool
    reason: str
    def __init__(self, action_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., accepted: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelAction(_message.Message):
    __slots__ = ("action_id", "attempt_id", "reason")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    attempt_id: str
    reason: str
    def __init__(self, action_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PeekScreenNow(_message.Message):
    __slots__ = ("peek_id", "display", "max_bytes")
    PEEK_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    peek_id: str
    display: int
    max_bytes: int
    def __init__(self, peek_id: _Optional[str] = ..., display: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class CoordinatorMessage(_message.Message):
    __slots__ = ("welcome", "heartbeat_ack", "dispatch", "receipt_ack", "cancel", "kill", "rotate_credential", "peek", "watch", "human_input")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_ACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    ROTATE_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    PEEK_FIELD_NUMBER: _ClassVar[int]
    WATCH_FIELD_NUMBER: _ClassVar[int]
    HUMAN_INPUT_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    heartbeat_ack: HeartbeatAck
    dispatch: Dispatch
    receipt_ack: ReceiptAck
    cancel: CancelAction
    kill: KillState
    rotate_credential: RotateCredentialNow
    peek: PeekScreenNow
    watch: WatchScreenNow
    human_input: HumanInputNow
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., dispatch: _Optional[_Union[Dispatch, _Mapping]] = ..., receipt_ack: _Optional[_Union[ReceiptAck, _Mapping]] = ..., cancel: _Optional[_Union[CancelAction, _Mapping]] = ..., kill: _Optional[_Union[KillState, _Mapping]] = ..., rotate_credential: _Optional[_Union[RotateCredentialNow, _Mapping]] = ..., peek: _Optional[_Union[PeekScreenNow, _Mapping]] = ..., watch: _Optional[_Union[WatchScreenNow, _Mapping]] = ..., human_input: _Optional[_Union[HumanInputNow, _Mapping]] = ...) -> None: ...

class WatchScreenNow(_message.Message):
    __slots__ = ("watch_id", "display", "max_fps", "quality", "max_bytes", "stop")
    WATCH_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    MAX_FPS_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    watch_id: str
    display: int
    max_fps: float
    quality: int
    max_bytes: int
    stop: bool
    def __init__(self, watch_id: _Optional[str] = ..., display: _Optional[int] = ..., max_fps: _Optional[float] = ..., quality: _Optional[int] = ..., max_bytes: _Optional[int] = ..., stop: _Optional[bool] = ...) -> None: ...

class HumanInputNow(_message.Message):
    __slots__ = ("input_id", "takeover_id", "display", "by_owner", "events")
    INPUT_ID_FIELD_NUMBER: _ClassVar[int]
    TAKEOVER_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    BY_OWNER_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    input_id: str
    takeover_id: str
    display: int
    by_owner: bool
    events: _containers.RepeatedCompositeFieldContainer[_desktop_pb2.HumanEvent]
    def __init__(self, input_id: _Optional[str] = ..., takeover_id: _Optional[str] = ..., display: _Optional[int] = ..., by_owner: _Optional[bool] = ..., events: _Optional[_Iterable[_Union[_desktop_pb2.HumanEvent, _Mapping]]] = ...) -> None: ...
