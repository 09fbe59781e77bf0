"""Property-based fuzzing of every RPC against a live coordinator: bad input is a clear error.

Requests are generated from the message descriptors (so a new RPC or field is fuzzed without
touching this file) and sent with real credentials. The properties: no answer is INTERNAL or
UNKNOWN (a crash), a refused request wrote nothing, the coordinator stays healthy, and
afterwards every run's journal verifies.

The seed is fixed (`derandomize`); `DESKFLEET_FUZZ_EXAMPLES` raises the count per RPC for a
longer local session (25 by default, which keeps the module at about two minutes).
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings, strategies as st

from coordinator.app.server import SERVICE_NAMES
from shared.credentials import auth_metadata
from shared.gen.deskfleet.v1 import admin_pb2, desktop_pb2, runs_pb2, worker_pb2
from tests.harness import CoordinatorProcess

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("DESKFLEET_FUZZ_EXAMPLES", "25"))
# Survey mode: record every violation and go on (no shrinking), to list them all at once.
SURVEY = os.environ.get("DESKFLEET_FUZZ_SURVEY", "") == "1"
CRASHES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
# RPCs that wait by design (for a run to stop, a receipt to come back): a client deadline
# is an answer for them, a hang for anything else.
BLOCKING = {"WaitRun", "WatchRun", "Act", "Connect"}
# RPCs that create a run: a refusal must leave no run behind.
CREATES_RUNS = {"SubmitRun", "StartResearch", "StartGoal", "RequestDesktop"}
DEADLINE = {"WaitRun": 2.0, "WatchRun": 2.0, "Act": 3.0, "Connect": 3.0}

# Values that have broken parsers before: NUL, control and bidi characters, emoji, path and
# URL tricks, JSON and SQL look-alikes, format strings, and lengths far past any limit.
NASTY_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\n\r\t\x0b\x0c",
    "\u202e\u200b\ufeff",
    "🦀🧪👩🏽‍🚀",
    "é" * 300,
    "../../etc/passwd",
    "file:///etc/passwd",
    "javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "chrome://settings",
    "about:blank",
    "view-source:http://127.0.0.1/",
    "http://127.0.0.1:1/",
    "http://[::1]:1/x",
    "https://example.com/search?q={query}",
    "{query}",
    "%s%n{0}{query!r}",
    "' OR 1=1; --",
    "null",
    "{}",
    "[]",
    '{"a":',
    "1e999",
    "-1",
    "x" * 70,
    "x" * 5_000,
    "x" * 300_000,
    "🦀" * 100_000,
]
INT32 = (-(2**31), -1, 0, 1, 2, 7, 100, 1000, 10_001, 2**31 - 1)
INT64 = (-(2**63), -1, 0, 1, 2**31, 2**53 + 1, 2**63 - 1)
UINT64 = (0, 1, 2**32, 2**64 - 1)
# Keys and values that reach past the JSON parse into the domain: action arguments of every
# known kind, scopes, policies, coordinates.
ARG_KEYS = [
    "x", "y", "to_x", "to_y", "text", "key", "keys", "url", "urls", "policy", "display",
    "space", "width", "height", "seconds", "value", "path", "name", "line", "fail_attempts",
    "query", "template", "profile", "max_results", "visible", "allow_domains", "deny_domains",
    "allow_private", "max_redirects", "max_bytes", "timeout", "format", "region", "amount",
    "direction", "app", "route", "max_sources", "full_page", "duration", "scale", "button",
]  # fmt: skip
KINDS = [
    "diag.echo", "diag.sleep", "diag.fail", "diag.append", "browser.fetch", "browser.search",
    "browser.screenshot", "app.research", "desktop.screenshot", "desktop.left_click",
    "desktop.type", "desktop.key", "screenshot", "left_click", "type", "key", "scroll",
    "left_click_drag", "mouse_move", "wait", "cursor_position",
]  # fmt: skip


def _methods() -> list[MethodDescriptor]:
    pool = descriptor_pool.Default()
    return [m for name in SERVICE_NAMES for m in pool.FindServiceByName(name).methods]


METHODS = _methods()


# ------------------------------------------------------------------------------ strategies


def _text(pool: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY_TEXT),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
        st.sampled_from(pool) if pool else st.nothing(),
        st.sampled_from(pool) if pool else st.nothing(),  # twice: real ids get further
        st.sampled_from(KINDS),
    )


def _json_values(pool: list[str]) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(INT64),
        st.integers(-5000, 5000),
        st.floats(allow_nan=False, allow_infinity=False),
        _text(pool),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.dictionaries(st.sampled_from(ARG_KEYS) | st.text(max_size=8), inner, max_size=5),
        ),
        max_leaves=12,
    )


def _json_text(pool: list[str]) -> st.SearchStrategy[str]:
    values = _json_values(pool)
    return st.one_of(
        st.dictionaries(st.sampled_from(ARG_KEYS), values, max_size=6).map(json.dumps),
        values.map(json.dumps),
        _text(pool),
        st.sampled_from(['{"x": 1e400}', '{"x": NaN}', '{"x": Infinity}', '{"a": {"a": {}}}']),
        st.integers(1_000, 100_000).map(lambda n: '{"a": ' + "[" * n + "]" * n + "}"),  # deep
    )


def _scalar(field: FieldDescriptor, pool: list[str]) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return _json_text(pool) if field.name.endswith("_json") else _text(pool)
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64) | st.sampled_from([b"", b"\x00" * 100_000])
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=64 if t == FieldDescriptor.TYPE_DOUBLE else 32) | st.sampled_from(
            [0.0, -0.0, -1.0, 1e-9, 1e308, float("inf"), float("-inf"), float("nan")]
        )
    if t in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return st.sampled_from(INT32) | st.integers(-(2**31), 2**31 - 1)
    if t in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
    ):
        return st.sampled_from(INT64) | st.integers(-(2**63), 2**63 - 1)
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.sampled_from(UINT64) | st.integers(0, 2**64 - 1)
    if t == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values]) | st.integers(-5, 99)
    raise AssertionError(f"no strategy for field {field.full_name} of type {t}")


def _many(element: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    """Few elements mostly; sometimes far more than any limit (copies, to stay fast)."""
    return st.one_of(
        st.lists(element, max_size=4),
        st.tuples(element, st.sampled_from([17, 101, 1001, 5000])).map(lambda p: [p[0]] * p[1]),
    )


def message_strategy(
    descriptor: Descriptor, pool: list[str], depth: int = 0
) -> st.SearchStrategy[Message]:
    """Messages of this type with any subset of fields set to awkward values."""
    cls = message_factory.GetMessageClass(descriptor)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_f, value_f = (
                field.message_type.fields_by_name["key"],
                field.message_type.fields_by_name["value"],
            )
            entries = st.dictionaries(
                _scalar(key_f, pool), _value(value_f, pool, depth), max_size=4
            )
            big = st.integers(200, 3000).map(lambda n: {f"k{i}": "v" * 10 for i in range(n)})
            fields[field.name] = (
                entries | big if key_f.type == FieldDescriptor.TYPE_STRING else entries
            )
        elif field.is_repeated:
            fields[field.name] = _many(_value(field, pool, depth))
        else:
            fields[field.name] = _value(field, pool, depth)

    def build(values: dict[str, Any]) -> Message:
        msg = cls()
        for name, value in values.items():
            field = descriptor.fields_by_name[name]
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                target = getattr(msg, name)
                for k, v in value.items():
                    if isinstance(v, Message):
                        target[k].CopyFrom(v)
                    else:
                        target[k] = v
            elif field.is_repeated:
                getattr(msg, name).extend(value)
            elif field.message_type is not None:
                getattr(msg, name).CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    optional = {name: st.none() | s for name, s in fields.items()}
    return st.fixed_dictionaries({}, optional=optional).map(
        lambda d: build({k: v for k, v in d.items() if v is not None})
    )


def _value(field: FieldDescriptor, pool: list[str], depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is None:
        return _scalar(field, pool)
    if depth >= 3:
        return st.just(message_factory.GetMessageClass(field.message_type)())
    return st.deferred(lambda: message_strategy(field.message_type, pool, depth + 1))


URLS = [
    "http://127.0.0.1:9/x",
    "https://example.com/a?b=c#d",
    "file:///etc/passwd",
    "FILE:///etc/passwd",
    "javascript:alert(1)",
    "data:text/html,<p>x</p>",
    "chrome://settings",
    "about:config",
    "view-source:https://example.com/",
    "ftp://example.com/",
    "blob:https://example.com/x",
    "http://",
    "//example.com/x",
    "example.com",
    "http://exa mple.com/\x00",
    "http://[::1/",
    "https://example.com/" + "x" * 10_000,
    "https://example.com/search?q={query}",
]


def _near_valid(pool: list[str]) -> dict[str, st.SearchStrategy[Message]]:
    """Requests that look right except for a thing or two, to reach the checks past the first.

    Random messages mostly stop at the first field checked; these pass it with known kinds,
    real ids and plausible shapes, and carry the awkward values in what comes after.
    """
    text, values = _text(pool), _json_values(pool)
    url = st.sampled_from(URLS) | text
    args = st.fixed_dictionaries(
        {},
        optional={
            "url": url,
            "template": url,
            "query": text,
            "value": values,
            "policy": st.fixed_dictionaries(
                {},
                optional={
                    k: values
                    for k in (
                        "allow_domains",
                        "deny_domains",
                        "allow_private",
                        "max_redirects",
                        "max_bytes",
                        "timeout",
                        "max_text",
                        "max_links",
                    )
                },
            )
            | values,
            **{k: values for k in ("x", "y", "key", "text", "seconds", "path", "line")},
        },
    ).map(json.dumps)
    action = st.builds(
        runs_pb2.PlannedAction,
        kind=st.sampled_from(KINDS),
        args_json=args | _json_text(pool),
        idempotent=st.booleans(),
        intent=st.just("") | text,
        route=st.builds(
            runs_pb2.RouteConstraint,
            worker=st.just("") | text,
            labels=st.dictionaries(text, text, max_size=3) | st.just({}),
            capability=st.sampled_from(["", "headless", "computer_use", "root"]),
        ),
    )
    limits = message_strategy(runs_pb2.Limits.DESCRIPTOR, pool)
    scope = st.builds(
        desktop_pb2.DesktopScope,
        actions=st.lists(st.sampled_from(["screenshot", "left_click", "key", "type"]), min_size=1),
        displays=st.lists(st.sampled_from(INT32), max_size=3),
        region=st.none()
        | st.builds(
            desktop_pb2.Region,
            x=st.sampled_from(INT32),
            y=st.sampled_from(INT32),
            width=st.sampled_from(INT32),
            height=st.sampled_from(INT32),
        ),
        ttl_seconds=_scalar(desktop_pb2.DesktopScope.DESCRIPTOR.fields_by_name["ttl_seconds"], []),
        max_actions=st.sampled_from(INT32),
    )
    hello = message_strategy(worker_pb2.Hello.DESCRIPTOR, pool)
    return {
        "SubmitRun": st.builds(
            runs_pb2.SubmitRunRequest,
            actions=st.lists(action, min_size=1, max_size=3) | _many(action),
            limits=limits,
            title=st.just("") | text,
        ),
        "StartResearch": st.builds(
            runs_pb2.ResearchRequest,
            query=st.just("lighthouse") | text,
            urls=st.lists(url, max_size=4) | _many(url),
            search_url=st.just("") | url,
            max_sources=st.integers(0, 21),
            thorough=st.booleans(),
            max_pages=st.sampled_from([0, 1, 500, 501, -1]),
            max_bytes=st.sampled_from([0, 1, 2**30, 2**30 + 1, -1]),
        ),
        "RequestDesktop": st.builds(
            desktop_pb2.RequestDesktopRequest,
            worker=st.sampled_from(pool),
            scope=scope,
            title=st.just("") | text,
            reason=st.just("") | text,
        ),
        "Approve": st.builds(
            desktop_pb2.ApproveRequest, id=st.sampled_from(pool), scope=scope, reason=text
        ),
        "Act": st.builds(
            desktop_pb2.DesktopActRequest,
            run_id=st.sampled_from(pool),
            action=st.sampled_from(["screenshot", "left_click", "key", "type", "wait"]) | text,
            args_json=args | _json_text(pool),
            timeout_seconds=st.sampled_from([0.0, 0.1, float("nan"), 601.0]),
        ),
        "Connect": hello.map(lambda h: worker_pb2.WorkerMessage(hello=h)),
        "Enroll": st.builds(
            worker_pb2.EnrollRequest,
            token=st.sampled_from([t for t in pool if t.startswith("dfe_")]),
            name=text,
            labels=st.dictionaries(text, text, max_size=4)
            | st.integers(100, 2000).map(lambda n: {f"k{i}": "v" for i in range(n)}),
        ),
    }


# ----------------------------------------------------------------------------- the target


class Target:
    """The live coordinator, its credentials, real ids to aim at, and the tallies."""

    def __init__(self, coordinator: CoordinatorProcess, channel: grpc.Channel) -> None:
        self.coordinator = coordinator
        self.channel = channel
        self.admin = auth_metadata(coordinator.admin_token_file.read_text().strip())
        self.owner_token = self.unary(
            "AdminService", "CreateUser", admin_pb2.CreateUserRequest(name="fuzz-owner")
        ).token
        self.owner = auth_metadata(self.owner_token)
        who = admin_pb2.WhoAmIRequest()
        self.admin_id = self.unary("AdminService", "WhoAmI", who).id
        self.owner_id = self.unary("AdminService", "WhoAmI", who, self.owner).id
        self.worker: Any = ()
        self.pool: list[str] = []
        self.requests: Counter[str] = Counter()
        self.codes: dict[str, Counter[str]] = defaultdict(Counter)
        self.violations: list[str] = []

    def unary(self, service: str, name: str, request: Message, metadata: Any = None) -> Any:
        """A plain call for setting up and checking (not counted as fuzzing)."""
        method = descriptor_pool.Default().FindMethodByName(f"deskfleet.v1.{service}.{name}")
        stub = self.channel.unary_unary(
            f"/deskfleet.v1.{service}/{name}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=message_factory.GetMessageClass(method.output_type).FromString,
        )
        return stub(request, metadata=self.admin if metadata is None else metadata, timeout=30)

    def call(self, method: MethodDescriptor, request: Message, metadata: Any) -> grpc.StatusCode:
        path = f"/{method.containing_service.full_name}/{method.name}"
        reply = message_factory.GetMessageClass(method.output_type).FromString
        timeout = DEADLINE.get(method.name, 20.0)
        self.requests[method.full_name] += 1
        kind = (
            self.channel.stream_stream
            if method.client_streaming
            else self.channel.unary_stream
            if method.server_streaming
            else self.channel.unary_unary
        )
        rpc = kind(
            path, request_serializer=type(request).SerializeToString, response_deserializer=reply
        )
        try:
            if method.client_streaming:
                # Only the first message is fuzzed; the stream then closes from our side.
                for _ in rpc(iter([request]), metadata=metadata, timeout=timeout):
                    pass
            elif method.server_streaming:
                for _ in rpc(request, metadata=metadata, timeout=timeout):
                    pass
            else:
                self._keep_credentials(rpc(request, metadata=metadata, timeout=timeout))
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details() or ""  # type: ignore[attr-defined]
        self.codes[method.full_name][code.name] += 1
        if code in CRASHES or (
            code == grpc.StatusCode.DEADLINE_EXCEEDED and method.name not in BLOCKING
        ):
            shown = str(request)[:600]
            self.violations.append(f"{method.full_name}: {code.name} {details!r} for {shown}")
        return code

    def _keep_credentials(self, reply: Message) -> None:
        """A fuzzed token rotation may replace our own credentials: carry on with the new ones."""
        if getattr(reply, "credential", ""):  # a worker's rotated credential
            self.worker = auth_metadata(reply.credential)  # type: ignore[attr-defined]
        token = getattr(reply, "token", "")
        if not token or reply.DESCRIPTOR.full_name != "deskfleet.v1.User":
            return
        if getattr(reply, "id", "") == self.admin_id:
            self.admin = auth_metadata(token)
            self.coordinator.admin_token_file.write_text(token)
        elif getattr(reply, "id", "") == self.owner_id:
            self.owner_token, self.owner = token, auth_metadata(token)

    def runs(self) -> list[tuple[str, Any]]:
        """Every run of both principals, with the credential that owns it."""
        return [
            (run.id, metadata)
            for metadata in (self.admin, self.owner)
            for run in self.unary(
                "RunService", "ListRuns", runs_pb2.ListRunsRequest(limit=1000), metadata
            ).runs
        ]

    def healthy(self) -> bool:
        health = health_pb2_grpc.HealthStub(self.channel)
        try:
            reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    coordinator = CoordinatorProcess(tmp_path_factory.mktemp("fuzz") / "coord").start()
    try:
        with grpc.insecure_channel(coordinator.address) as channel:
            t = Target(coordinator, channel)
            tokens = [
                t.unary(
                    "AdminService",
                    "CreateEnrollmentToken",
                    admin_pb2.CreateEnrollmentTokenRequest(uses=1000, capabilities=caps),
                ).token
                for caps in ([], ["headless"])
            ]
            enroll = [
                t.unary(
                    "WorkerGateway", "Enroll", worker_pb2.EnrollRequest(token=tokens[0], name=n)
                )
                for n in ("aimed", "gateway")
            ]
            # The gateway worker's credential fuzzes the worker RPCs; its id is not aimed at,
            # so that a fuzzed revocation cannot take it away.
            t.worker = auth_metadata(enroll[1].credential)
            plan = runs_pb2.SubmitRunRequest(
                actions=[runs_pb2.PlannedAction(kind="diag.echo", args_json='{"value": 1}')]
            )
            # Real ids among the random ones, so that requests get past "not found" checks.
            t.pool += [t.unary("RunService", "SubmitRun", plan, m).id for m in (t.admin, t.owner)]
            t.pool += [enroll[0].worker_id, *tokens]
            asked = desktop_pb2.RequestDesktopRequest(
                worker=enroll[0].worker_id,
                scope=desktop_pb2.DesktopScope(actions=["screenshot", "left_click", "key"]),
            )
            desktop_run = t.unary("DesktopService", "RequestDesktop", asked)
            approvals = t.unary(
                "ApprovalService", "ListApprovals", desktop_pb2.ListApprovalsRequest()
            )
            t.pool += [desktop_run.id, *(a.id for a in approvals.approvals)]
            yield t
    finally:
        coordinator.stop()


def _credentials(t: Target, method: MethodDescriptor) -> Callable[[int], Any]:
    # Read at each call: a fuzzed rotation may have replaced them.
    if method.containing_service.name == "WorkerGateway":
        return lambda i: t.worker
    return lambda i: t.owner if i % 3 == 2 else t.admin  # mostly an admin, sometimes an owner


@pytest.mark.timeout(600)
@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.containing_service.name}.{m.name}")
def test_every_rpc_refuses_bad_input_clearly(target: Target, method: MethodDescriptor) -> None:
    strategy = message_strategy(method.input_type, target.pool)
    near = _near_valid(target.pool).get(method.name)
    if method.name == "Enroll":
        # Its token is its credential: a wrong one is a failed authentication, and the
        # coordinator answers a host's failures as over the limit after a few a minute
        # (coordinator/security/ratelimit.py), which would change what the fuzzing of every RPC
        # after it sees. Wrong tokens are tested apart
        # (tests/integration/security/test_authorization.py); here every token is real and the
        # rest is fuzzed.
        strategy = near
    elif near is not None:  # mostly near-valid requests: random ones stop at the first check
        strategy = st.one_of(strategy, near, near)
    credential = _credentials(target, method)
    seen = {"n": 0}

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(request=strategy)
    def fuzz(request: Message) -> None:
        seen["n"] += 1
        before = len(target.runs()) if method.name in CREATES_RUNS else 0
        code = target.call(method, request, credential(seen["n"]))
        if SURVEY:
            return
        assert code not in CRASHES, target.violations[-1]
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            assert method.name in BLOCKING, target.violations[-1]
        if method.name in CREATES_RUNS and code != grpc.StatusCode.OK:
            assert len(target.runs()) == before, f"{method.name} refused ({code}) but wrote a run"
        assert target.healthy(), f"the coordinator is not healthy after {method.full_name}"

    fuzz()


def test_afterwards_the_store_is_consistent(target: Target) -> None:
    """Every run the fuzzing made verifies; the coordinator still answers status."""
    runs = target.runs()
    for run_id, metadata in runs:
        result = target.unary(
            "JournalService", "VerifyJournal", runs_pb2.RunRef(id=run_id), metadata
        )
        assert result.ok, (run_id, list(result.problems))
    owner_file = target.coordinator.workdir / "owner.token"
    owner_file.write_text(target.owner_token)
    for run_id, token_file in zip(target.pool[:2], (None, owner_file), strict=True):
        done = target.coordinator.cli(
            "journal", "verify", run_id, token_file=token_file, check=False
        )
        assert done.returncode == 0, done.stderr
    assert "headlessOnline" in target.coordinator.status()
    assert target.healthy()
    target.requests["(runs verified afterwards)"] = len(runs)


def test_summary(
    target: Target, capsys: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Requests fuzzed per RPC and the codes they got, printed and kept in a file."""
    lines = [f"{'RPC':<52} {'requests':>8}  codes"]
    for name, n in sorted(target.requests.items()):
        codes = ", ".join(f"{c}={k}" for c, k in target.codes[name].most_common())
        lines.append(f"{name:<52} {n:>8}  {codes}")
    lines.append(f"{'total':<52} {sum(target.requests.values()):>8}")
    lines += [f"VIOLATION {v}" for v in target.violations]
    text = "\n".join(lines)
    out = Path(
        os.environ.get(
            "DESKFLEET_FUZZ_SUMMARY", tmp_path_factory.getbasetemp() / "fuzz-summary.txt"
        )
    )
    out.write_text(text + "\n")
    with capsys.disabled():
        print(f"\n{text}\n(written to {out})")
    assert not target.violations
