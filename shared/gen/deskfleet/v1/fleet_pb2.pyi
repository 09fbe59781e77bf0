import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Display(_message.Message):
    __slots__ = ("index", "left", "top", "width", "height")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LEFT_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    index: int
    left: int
    top: int
    width: int
    height: int
    def __init__(self, index: _Optional[int] = ..., left: _Optional[int] = ..., top: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ...) -> None: ...

class Capability(_message.Message):
    __slots__ = ("name", "available", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    available: bool
    reason: str
    def __init__(self, name: _Optional[str] = ..., available: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class Advertisement(_message.Message):
    __slots__ = ("hostname", "labels", "displays", "capabilities", "os", "versions", "research_apps", "owner_takeover")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DISPLAYS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    RESEARCH_APPS_FIELD_NUMBER: _ClassVar[int]
    OWNER_TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    labels: _containers.ScalarMap[str, str]
    displays: _containers.RepeatedCompositeFieldContainer[Display]
    capabilities: _containers.RepeatedCompositeFieldContainer[Capability]
    os: str
    versions: _containers.ScalarMap[str, str]
    research_apps: _containers.RepeatedScalarFieldContainer[str]
    owner_takeover: bool
    def __init__(self, hostname: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., displays: _Optional[_Iterable[_Union[Display, _Mapping]]] = ..., capabilities: _Optional[_Iterable[_Union[Capability, _Mapping]]] = ..., os: _Optional[str] = ..., versions: _Optional[_Mapping[str, str]] = ..., research_apps: _Optional[_Iterable[str]] = ..., owner_takeover: _Optional[bool] = ...) -> None: ...

class LocalKill(_message.Message):
    __slots__ = ("engaged", "since", "means", "reason")
    ENGAGED_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    MEANS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    engaged: bool
    since: _timestamp_pb2.Timestamp
    means: str
    reason: str
    def __init__(self, engaged: _Optional[bool] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., means: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("id", "name", "labels", "capabilities", "displays", "state", "online", "last_heartbeat", "replica", "os", "versions", "enrolled_at", "allowed_capabilities", "lease_expires_at", "local_kill")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DISPLAYS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    OS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ENROLLED_AT_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_KILL_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    labels: _containers.ScalarMap[str, str]
    capabilities: _containers.RepeatedCompositeFieldContainer[Capability]
    displays: _containers.RepeatedCompositeFieldContainer[Display]
    state: str
    online: bool
    last_heartbeat: _timestamp_pb2.Timestamp
    replica: str
    os: str
    versions: _containers.ScalarMap[str, str]
    enrolled_at: _timestamp_pb2.Timestamp
    allowed_capabilities: _containers.RepeatedScalarFieldContainer[str]
    lease_expires_at: _timestamp_pb2.Timestamp
    local_kill: LocalKill
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., capabilities: _Optional[_Iterable[_Union[Capability, _Mapping]]] = ..., displays: _Optional[_Iterable[_Union[Display, _Mapping]]] = ..., state: _Optional[str] = ..., online: _Optional[bool] = ..., last_heartbeat: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., replica: _Optional[str] = ..., os: _Optional[str] = ..., versions: _Optional[_Mapping[str, str]] = ..., enrolled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., allowed_capabilities: _Optional[_Iterable[str]] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., local_kill: _Optional[_Union[LocalKill, _Mapping]] = ...) -> None: ...

class GetWorkerStatusRequest(_message.Message):
    __slots__ = ("limit", "page_token")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    limit: int
    page_token: str
    def __init__(self, limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ReplicaCount(_message.Message):
    __slots__ = ("replica", "online", "headless_online", "computer_use_online")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    HEADLESS_ONLINE_FIELD_NUMBER: _ClassVar[int]
    COMPUTER_USE_ONLINE_FIELD_NUMBER: _ClassVar[int]
    replica: str
    online: int
    headless_online: int
    computer_use_online: int
    def __init__(self, replica: _Optional[str] = ..., online: _Optional[int] = ..., headless_online: _Optional[int] = ..., computer_use_online: _Optional[int] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("headless_online", "computer_use_online", "workers", "next_page_token", "online", "replicas")
    HEADLESS_ONLINE_FIELD_NUMBER: _ClassVar[int]
    COMPUTER_USE_ONLINE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    headless_online: int
    computer_use_online: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    next_page_token: str
    online: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaCount]
    def __init__(self, headless_online: _Optional[int] = ..., computer_use_online: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., online: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaCount, _Mapping]]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ("include_revoked", "limit", "page_token", "state", "capability", "replica", "online", "text")
    INCLUDE_REVOKED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    include_revoked: bool
    limit: int
    page_token: str
    state: str
    capability: str
    replica: str
    online: bool
    text: str
    def __init__(self, include_revoked: _Optional[bool] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ..., state: _Optional[str] = ..., capability: _Optional[str] = ..., replica: _Optional[str] = ..., online: _Optional[bool] = ..., text: _Optional[str] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers", "next_page_token")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    next_page_token: str
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WorkerRef(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class RotateWorkerRequest(_message.Message):
    __slots__ = ("id", "while_offline")
    ID_FIELD_NUMBER: _ClassVar[int]
    WHILE_OFFLINE_FIELD_NUMBER: _ClassVar[int]
    id: str
    while_offline: bool
    def __init__(self, id: _Optional[str] = ..., while_offline: _Optional[bool] = ...) -> None: ...
