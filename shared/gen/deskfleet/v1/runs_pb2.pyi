import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RouteConstraint(_message.Message):
    __slots__ = ("worker", "labels", "capability")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    worker: str
    labels: _containers.ScalarMap[str, str]
    capability: str
    def __init__(self, worker: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capability: _Optional[str] = ...) -> None: ...

class PlannedAction(_message.Message):
    __slots__ = ("kind", "args_json", "idempotent", "route", "intent", "postcondition")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    POSTCONDITION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    args_json: str
    idempotent: bool
    route: RouteConstraint
    intent: str
    postcondition: Postcondition
    def __init__(self, kind: _Optional[str] = ..., args_json: _Optional[str] = ..., idempotent: _Optional[bool] = ..., route: _Optional[_Union[RouteConstraint, _Mapping]] = ..., intent: _Optional[str] = ..., postcondition: _Optional[_Union[Postcondition, _Mapping]] = ...) -> None: ...

class Postcondition(_message.Message):
    __slots__ = ("kind", "args_json", "expect_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPECT_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    args_json: str
    expect_json: str
    def __init__(self, kind: _Optional[str] = ..., args_json: _Optional[str] = ..., expect_json: _Optional[str] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_actions", "max_seconds", "estimate_actions", "estimate_seconds", "action_timeout_seconds")
    MAX_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ACTION_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    max_actions: int
    max_seconds: float
    estimate_actions: int
    estimate_seconds: float
    action_timeout_seconds: float
    def __init__(self, max_actions: _Optional[int] = ..., max_seconds: _Optional[float] = ..., estimate_actions: _Optional[int] = ..., estimate_seconds: _Optional[float] = ..., action_timeout_seconds: _Optional[float] = ...) -> None: ...

class SubmitRunRequest(_message.Message):
    __slots__ = ("actions", "limits", "title", "wait_seconds")
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    actions: _containers.RepeatedCompositeFieldContainer[PlannedAction]
    limits: Limits
    title: str
    wait_seconds: float
    def __init__(self, actions: _Optional[_Iterable[_Union[PlannedAction, _Mapping]]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., title: _Optional[str] = ..., wait_seconds: _Optional[float] = ...) -> None: ...

class ReviseRunRequest(_message.Message):
    __slots__ = ("id", "actions")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    id: str
    actions: _containers.RepeatedCompositeFieldContainer[PlannedAction]
    def __init__(self, id: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[PlannedAction, _Mapping]]] = ...) -> None: ...

class ActionInfo(_message.Message):
    __slots__ = ("id", "index", "kind", "intent", "fingerprint", "idempotent", "status", "worker_id", "attempt_id", "epoch", "attempts", "dispatched_at", "finished_at", "error", "receipt_id", "route_json", "artifacts", "receipt_traceparent", "postcondition_json", "settled_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTE_JSON_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    POSTCONDITION_JSON_FIELD_NUMBER: _ClassVar[int]
    SETTLED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    index: int
    kind: str
    intent: str
    fingerprint: str
    idempotent: bool
    status: str
    worker_id: str
    attempt_id: str
    epoch: int
    attempts: int
    dispatched_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    error: str
    receipt_id: str
    route_json: str
    artifacts: _containers.RepeatedCompositeFieldContainer[ArtifactRef]
    receipt_traceparent: str
    postcondition_json: str
    settled_by: str
    def __init__(self, id: _Optional[str] = ..., index: _Optional[int] = ..., kind: _Optional[str] = ..., intent: _Optional[str] = ..., fingerprint: _Optional[str] = ..., idempotent: _Optional[bool] = ..., status: _Optional[str] = ..., worker_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., epoch: _Optional[int] = ..., attempts: _Optional[int] = ..., dispatched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., receipt_id: _Optional[str] = ..., route_json: _Optional[str] = ..., artifacts: _Optional[_Iterable[_Union[ArtifactRef, _Mapping]]] = ..., receipt_traceparent: _Optional[str] = ..., postcondition_json: _Optional[str] = ..., settled_by: _Optional[str] = ...) -> None: ...

class ArtifactRef(_message.Message):
    __slots__ = ("sha256", "media_type", "size", "role")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    media_type: str
    size: int
    role: str
    def __init__(self, sha256: _Optional[str] = ..., media_type: _Optional[str] = ..., size: _Optional[int] = ..., role: _Optional[str] = ...) -> None: ...

class WaitingReason(_message.Message):
    __slots__ = ("code", "detail")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    code: str
    detail: str
    def __init__(self, code: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("id", "owner", "title", "status", "stop_reason", "waiting", "created_at", "updated_at", "limits", "extensions", "actions_total", "actions_succeeded", "attempts_used", "last_seq", "trace_id", "actions", "guidance_queued", "timeline", "kind", "parent", "root", "children", "children_total", "execution", "guidance", "questions", "owner_name", "worker_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    EXTENSIONS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_USED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_QUEUED_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_FIELD_NUMBER: _ClassVar[int]
    QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    OWNER_NAME_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    owner: str
    title: str
    status: str
    stop_reason: str
    waiting: WaitingReason
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    limits: Limits
    extensions: int
    actions_total: int
    actions_succeeded: int
    attempts_used: int
    last_seq: int
    trace_id: str
    actions: _containers.RepeatedCompositeFieldContainer[ActionInfo]
    guidance_queued: int
    timeline: RunTimeline
    kind: str
    parent: str
    root: str
    children: _containers.RepeatedCompositeFieldContainer[RunChild]
    children_total: int
    execution: int
    guidance: _containers.RepeatedCompositeFieldContainer[GuidanceInfo]
    questions: _containers.RepeatedCompositeFieldContainer[Question]
    owner_name: str
    worker_id: str
    def __init__(self, id: _Optional[str] = ..., owner: _Optional[str] = ..., title: _Optional[str] = ..., status: _Optional[str] = ..., stop_reason: _Optional[str] = ..., waiting: _Optional[_Union[WaitingReason, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., extensions: _Optional[int] = ..., actions_total: _Optional[int] = ..., actions_succeeded: _Optional[int] = ..., attempts_used: _Optional[int] = ..., last_seq: _Optional[int] = ..., trace_id: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[ActionInfo, _Mapping]]] = ..., guidance_queued: _Optional[int] = ..., timeline: _Optional[_Union[RunTimeline, _Mapping]] = ..., kind: _Optional[str] = ..., parent: _Optional[str] = ..., root: _Optional[str] = ..., children: _Optional[_Iterable[_Union[RunChild, _Mapping]]] = ..., children_total: _Optional[int] = ..., execution: _Optional[int] = ..., guidance: _Optional[_Iterable[_Union[GuidanceInfo, _Mapping]]] = ..., questions: _Optional[_Iterable[_Union[Question, _Mapping]]] = ..., owner_name: _Optional[str] = ..., worker_id: _Optional[str] = ...) -> None: ...

class RunChild(_message.Message):
    __slots__ = ("id", "kind", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    status: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class RunTimeline(_message.Message):
    __slots__ = ("states", "actions", "retries", "recoveries", "events", "stop_reason", "wall_seconds", "submitted_at", "ended_at", "live", "as_of")
    STATES_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedCompositeFieldContainer[TimelineState]
    actions: _containers.RepeatedCompositeFieldContainer[TimelineAttempt]
    retries: _containers.RepeatedCompositeFieldContainer[TimelineRetry]
    recoveries: _containers.RepeatedCompositeFieldContainer[TimelineEvent]
    events: _containers.RepeatedCompositeFieldContainer[TimelineEvent]
    stop_reason: str
    wall_seconds: float
    submitted_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    live: bool
    as_of: _timestamp_pb2.Timestamp
    def __init__(self, states: _Optional[_Iterable[_Union[TimelineState, _Mapping]]] = ..., actions: _Optional[_Iterable[_Union[TimelineAttempt, _Mapping]]] = ..., retries: _Optional[_Iterable[_Union[TimelineRetry, _Mapping]]] = ..., recoveries: _Optional[_Iterable[_Union[TimelineEvent, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[TimelineEvent, _Mapping]]] = ..., stop_reason: _Optional[str] = ..., wall_seconds: _Optional[float] = ..., submitted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., live: _Optional[bool] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TimelineState(_message.Message):
    __slots__ = ("state", "entered_at", "left_at", "seconds", "reason", "cause", "seq")
    STATE_FIELD_NUMBER: _ClassVar[int]
    ENTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LEFT_AT_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    state: str
    entered_at: _timestamp_pb2.Timestamp
    left_at: _timestamp_pb2.Timestamp
    seconds: float
    reason: str
    cause: str
    seq: int
    def __init__(self, state: _Optional[str] = ..., entered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., left_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., seconds: _Optional[float] = ..., reason: _Optional[str] = ..., cause: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class TimelineAttempt(_message.Message):
    __slots__ = ("id", "index", "kind", "worker", "attempt", "attempt_id", "status", "dispatched_at", "started_at", "finished_at", "seconds", "error", "receipt_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    index: int
    kind: str
    worker: str
    attempt: int
    attempt_id: str
    status: str
    dispatched_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    seconds: float
    error: str
    receipt_id: str
    def __init__(self, id: _Optional[str] = ..., index: _Optional[int] = ..., kind: _Optional[str] = ..., worker: _Optional[str] = ..., attempt: _Optional[int] = ..., attempt_id: _Optional[str] = ..., status: _Optional[str] = ..., dispatched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., seconds: _Optional[float] = ..., error: _Optional[str] = ..., receipt_id: _Optional[str] = ...) -> None: ...

class TimelineRetry(_message.Message):
    __slots__ = ("action_id", "index", "attempt", "cause", "at", "kind")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    index: int
    attempt: int
    cause: str
    at: _timestamp_pb2.Timestamp
    kind: str
    def __init__(self, action_id: _Optional[str] = ..., index: _Optional[int] = ..., attempt: _Optional[int] = ..., cause: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ...) -> None: ...

class TimelineEvent(_message.Message):
    __slots__ = ("at", "kind", "detail", "action_id", "seq")
    AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    kind: str
    detail: str
    action_id: str
    seq: int
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., detail: _Optional[str] = ..., action_id: _Optional[str] = ..., seq: _Optional[int] = ...) -> None: ...

class RunRef(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("limit", "status", "kind", "owner", "parent")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    status: str
    kind: str
    owner: str
    parent: str
    def __init__(self, limit: _Optional[int] = ..., status: _Optional[str] = ..., kind: _Optional[str] = ..., owner: _Optional[str] = ..., parent: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class WaitRunRequest(_message.Message):
    __slots__ = ("id", "timeout_seconds")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    id: str
    timeout_seconds: float
    def __init__(self, id: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class GuideRunRequest(_message.Message):
    __slots__ = ("id", "text", "message_id", "expected_execution")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    message_id: str
    expected_execution: int
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., message_id: _Optional[str] = ..., expected_execution: _Optional[int] = ...) -> None: ...

class GuideRunResponse(_message.Message):
    __slots__ = ("guidance_id", "seq", "queued", "repeated_send", "message_id", "execution")
    GUIDANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    REPEATED_SEND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    guidance_id: str
    seq: int
    queued: int
    repeated_send: bool
    message_id: str
    execution: int
    def __init__(self, guidance_id: _Optional[str] = ..., seq: _Optional[int] = ..., queued: _Optional[int] = ..., repeated_send: _Optional[bool] = ..., message_id: _Optional[str] = ..., execution: _Optional[int] = ...) -> None: ...

class Question(_message.Message):
    __slots__ = ("id", "run_id", "call_id", "text", "required", "status", "asked_at", "expires_at", "answer", "answered_by", "answered_at", "guidance_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ASKED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_AT_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    call_id: str
    text: str
    required: bool
    status: str
    asked_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    answer: str
    answered_by: str
    answered_at: _timestamp_pb2.Timestamp
    guidance_id: str
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., call_id: _Optional[str] = ..., text: _Optional[str] = ..., required: _Optional[bool] = ..., status: _Optional[str] = ..., asked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., answer: _Optional[str] = ..., answered_by: _Optional[str] = ..., answered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., guidance_id: _Optional[str] = ...) -> None: ...

class ListQuestionsRequest(_message.Message):
    __slots__ = ("run_id", "include_closed", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CLOSED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    include_closed: bool
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., include_closed: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class ListQuestionsResponse(_message.Message):
    __slots__ = ("questions",)
    QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    questions: _containers.RepeatedCompositeFieldContainer[Question]
    def __init__(self, questions: _Optional[_Iterable[_Union[Question, _Mapping]]] = ...) -> None: ...

class AnswerQuestionRequest(_message.Message):
    __slots__ = ("id", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class GuidanceInfo(_message.Message):
    __slots__ = ("id", "message_id", "status", "delivered_to", "author", "created_at", "execution", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_TO_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    message_id: str
    status: str
    delivered_to: str
    author: str
    created_at: _timestamp_pb2.Timestamp
    execution: int
    text: str
    def __init__(self, id: _Optional[str] = ..., message_id: _Optional[str] = ..., status: _Optional[str] = ..., delivered_to: _Optional[str] = ..., author: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., execution: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class JournalEvent(_message.Message):
    __slots__ = ("run_id", "seq", "kind", "at", "data_json", "hash", "prev_hash", "trace_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    kind: str
    at: _timestamp_pb2.Timestamp
    data_json: str
    hash: str
    prev_hash: str
    trace_id: str
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., kind: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_json: _Optional[str] = ..., hash: _Optional[str] = ..., prev_hash: _Optional[str] = ..., trace_id: _Optional[str] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("id", "after_seq", "follow")
    ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    id: str
    after_seq: int
    follow: bool
    def __init__(self, id: _Optional[str] = ..., after_seq: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class ResearchRequest(_message.Message):
    __slots__ = ("query", "urls", "search_url", "max_sources", "thorough", "max_pages", "max_bytes", "search_format", "result_selector", "link_selector", "snippet_selector", "search_profile")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    URLS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_URL_FIELD_NUMBER: _ClassVar[int]
    MAX_SOURCES_FIELD_NUMBER: _ClassVar[int]
    THOROUGH_FIELD_NUMBER: _ClassVar[int]
    MAX_PAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FORMAT_FIELD_NUMBER: _ClassVar[int]
    RESULT_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LINK_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    SEARCH_PROFILE_FIELD_NUMBER: _ClassVar[int]
    query: str
    urls: _containers.RepeatedScalarFieldContainer[str]
    search_url: str
    max_sources: int
    thorough: bool
    max_pages: int
    max_bytes: int
    search_format: str
    result_selector: str
    link_selector: str
    snippet_selector: str
    search_profile: str
    def __init__(self, query: _Optional[str] = ..., urls: _Optional[_Iterable[str]] = ..., search_url: _Optional[str] = ..., max_sources: _Optional[int] = ..., thorough: _Optional[bool] = ..., max_pages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., search_format: _Optional[str] = ..., result_selector: _Optional[str] = ..., link_selector: _Optional[str] = ..., snippet_selector: _Optional[str] = ..., search_profile: _Optional[str] = ...) -> None: ...

class GoalRequest(_message.Message):
    __slots__ = ("text", "desktop", "model", "max_steps")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DESKTOP_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    text: str
    desktop: str
    model: str
    max_steps: int
    def __init__(self, text: _Optional[str] = ..., desktop: _Optional[str] = ..., model: _Optional[str] = ..., max_steps: _Optional[int] = ...) -> None: ...

class ReadEntryRequest(_message.Message):
    __slots__ = ("run_id", "seq", "offset", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    offset: int
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadEntryResponse(_message.Message):
    __slots__ = ("run_id", "seq", "kind", "text", "offset", "next_offset", "total_length", "archived")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    kind: str
    text: str
    offset: int
    next_offset: int
    total_length: int
    archived: bool
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., kind: _Optional[str] = ..., text: _Optional[str] = ..., offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., total_length: _Optional[int] = ..., archived: _Optional[bool] = ...) -> None: ...

class SearchJournalRequest(_message.Message):
    __slots__ = ("run_id", "text", "cursor", "limit")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    text: str
    cursor: str
    limit: int
    def __init__(self, run_id: _Optional[str] = ..., text: _Optional[str] = ..., cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class SearchMatch(_message.Message):
    __slots__ = ("seq", "kind", "offset", "excerpt")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    kind: str
    offset: int
    excerpt: str
    def __init__(self, seq: _Optional[int] = ..., kind: _Optional[str] = ..., offset: _Optional[int] = ..., excerpt: _Optional[str] = ...) -> None: ...

class SearchJournalResponse(_message.Message):
    __slots__ = ("matches", "cursor", "has_more", "match_limit_reached")
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    MATCH_LIMIT_REACHED_FIELD_NUMBER: _ClassVar[int]
    matches: _containers.RepeatedCompositeFieldContainer[SearchMatch]
    cursor: str
    has_more: bool
    match_limit_reached: bool
    def __init__(self, matches: _Optional[_Iterable[_Union[SearchMatch, _Mapping]]] = ..., cursor: _Optional[str] = ..., has_more: _Optional[bool] = ..., match_limit_reached: _Optional[bool] = ...) -> None: ...

class VerifyJournalResponse(_message.Message):
    __slots__ = ("ok", "events_checked", "receipts_checked", "problems")
    OK_FIELD_NUMBER: _ClassVar[int]
    EVENTS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    events_checked: int
    receipts_checked: int
    problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ok: _Optional[bool] = ..., events_checked: _Optional[int] = ..., receipts_checked: _Optional[int] = ..., problems: _Optional[_Iterable[str]] = ...) -> None: ...

class ExportRunRequest(_message.Message):
    __slots__ = ("id", "frames_only")
    ID_FIELD_NUMBER: _ClassVar[int]
    FRAMES_ONLY_FIELD_NUMBER: _ClassVar[int]
    id: str
    frames_only: bool
    def __init__(self, id: _Optional[str] = ..., frames_only: _Optional[bool] = ...) -> None: ...

class ExportChunk(_message.Message):
    __slots__ = ("data", "total_bytes", "fingerprint", "sha256")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    total_bytes: int
    fingerprint: str
    sha256: str
    def __init__(self, data: _Optional[bytes] = ..., total_bytes: _Optional[int] = ..., fingerprint: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...
