"""External research commands a worker offers: `deskfleet-worker run --research-app NAME=COMMAND`.

An app is a command-line research agent installed on the worker (it usually calls a model
service). COMMAND is split like a shell would split it (shlex) but no shell runs it. The
worker advertises the app's NAME (`Advertisement.research_apps`) and runs it for the
`app.research` action:

    stdin:  {"query": "...", "max_sources": N}
    stdout: {"sources": [{"url": "...", "title": "...", "excerpts": ["..."]}], "answer": "..."}

An app starts with an explicit environment, never the worker's own (which may hold model
provider keys and DESKFLEET_* settings): PATH, LANG, HOME and TMPDIR, plus only the variables
the operator names with `--research-app-env NAME`. HOME is the app's own directory under the
state directory (`<state-dir>/apps/NAME/home`, TMPDIR beside it, both 0700) and is its working
directory. It runs as the worker's user, so it can read what that user can, the state
directory's credential and key included; `--research-app-user USER` (the worker running as
root) runs it as another user instead, with a fresh HOME and TMPDIR of its own for each run
that are removed after it, and no access to the state directory. docs/SECURITY.md says what
each way allows.

Numbers in the action's args are the owner's wish, capped by the worker's settings: `timeout`
(seconds) by `--research-app-timeout` (default 3600, the largest route timeout), and
`max_sources` by MAX_SOURCES.

The action never fails because the app did: the command runs in its own process group under
the route's timeout, is killed on cancel or time-out, and its stdout is capped; what went
wrong comes back as a result with `outcome: "failed"`, a `code` and a `message`:

    not_started       the command could not be started
    timeout           no answer within the route's timeout (the process group is killed)
    credit_limit      it stopped on a credit, quota or billing limit (said on stderr or stdout)
    exit_status       it exited non-zero for another reason
    output_too_large  stdout passed MAX_OUTPUT bytes (the process group is killed)
    bad_output        stdout is not the JSON document above
    no_sources        a valid answer without a single usable source
    app_absent        this worker offers no app of that name
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from shared.errors import InvalidArgumentError
from worker_agent.actions import ActionCancelled, ActionContext, ActionRefused, ActionRegistry

KIND = "app.research"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 3600.0  # the worker's cap unless --research-app-timeout lowers it
APPS_DIR = "apps"  # under the state directory: one directory per app
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_OUTPUT = 1024 * 1024  # bytes of stdout
STDERR_TAIL = 4096  # bytes of stderr kept for the failure message
MAX_SOURCES = 20
MAX_EXCERPTS = 5
EXCERPT_CHARS = 500
TITLE_CHARS = 300
ANSWER_CHARS = 4000
MESSAGE_CHARS = 500
CREDIT_LIMIT = re.compile(
    r"credits?\b.{0,40}\b(limit|exhausted|exceeded|reached|insufficient|remaining)|"
    r"(out of|insufficient|no) credits?|quota\b.{0,20}\b(exceeded|exhausted|reached)|"
    r"billing|payment required|usage limit",
    re.I,
)


@dataclass(frozen=True)
class ResearchApp:
    name: str
    argv: tuple[str, ...]


def parse_apps(pairs: Iterable[str]) -> dict[str, ResearchApp]:
    """`NAME=COMMAND` flags to apps, checking that each command can be found now."""
    apps: dict[str, ResearchApp] = {}
    for pair in pairs:
        name, sep, command = pair.partition("=")
        where = f"--research-app {pair!r}"
        if not sep or not NAME.match(name):
            raise InvalidArgumentError(
                f"{where}: expected NAME=COMMAND, NAME of letters, digits, '.', '_' or '-'"
            )
        if name in apps:
            raise InvalidArgumentError(f"{where}: app {name} is given twice")
        try:
            argv = tuple(shlex.split(command))
        except ValueError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from exc
        if not argv:
            raise InvalidArgumentError(f"{where}: the command is empty")
        if shutil.which(argv[0]) is None:
            raise InvalidArgumentError(f"{where}: {argv[0]} is not an executable on this machine")
        apps[name] = ResearchApp(name, argv)
    return apps


def parse_env(names: Iterable[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """`--research-app-env NAME` flags to the variables passed on to apps, with the worker's
    values; a name that is malformed or not set in the worker's environment is refused."""
    environ = dict(os.environ if environ is None else environ)
    passed: dict[str, str] = {}
    for name in names:
        if not ENV_NAME.match(name):
            raise InvalidArgumentError(
                f"--research-app-env {name!r}: an environment variable name (letters, digits, _)"
            )
        if name not in environ:
            raise InvalidArgumentError(
                f"--research-app-env {name}: not set in this worker's environment"
            )
        passed[name] = environ[name]
    return passed


def app_user(name: str | None) -> pwd.struct_passwd | None:
    """The account `--research-app-user` names; refused unless the worker runs as root."""
    if not name:
        return None
    try:
        account = pwd.getpwnam(name)
    except KeyError as exc:
        raise InvalidArgumentError(f"--research-app-user {name}: no such user") from exc
    if os.geteuid() != 0:
        raise InvalidArgumentError(
            f"--research-app-user {name}: the worker must run as root to start apps as another user"
        )
    if account.pw_uid == 0:
        raise InvalidArgumentError(f"--research-app-user {name}: must not be root")
    return account


def _failed(app: str, code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "app": app,
        "outcome": "failed",
        "code": code,
        "message": message[:MESSAGE_CHARS],
        "sources": [],
        "answer": "",
        **extra,
    }


class _Output:
    """Reads a pipe on its own thread: everything up to `cap` bytes, or only the last `cap`."""

    def __init__(self, pipe: IO[bytes], cap: int, *, keep_tail: bool = False) -> None:
        self.data = bytearray()
        self.total = 0
        self._fd, self._cap, self._tail = pipe.fileno(), cap, keep_tail
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    @property
    def overflow(self) -> bool:
        return self.total > self._cap

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := os.read(self._fd, 65536):
                self.total += len(chunk)
                if self._tail:
                    self.data = (self.data + chunk)[-self._cap :]
                elif len(self.data) <= self._cap:
                    self.data += chunk[: self._cap + 1 - len(self.data)]

    def close(self, pipe: IO[bytes]) -> None:
        # A process outside the killed group may still hold the pipe: then the reader
        # thread (a daemon) keeps the descriptor rather than reading a reused one.
        self._thread.join(2.0)
        if not self._thread.is_alive():
            pipe.close()


def _number(args: dict[str, Any], key: str, default: float, *, integer: bool = False) -> float:
    """An owner-supplied positive number (absent or null: the default); refused otherwise."""
    value = args.get(key)
    if value is None:
        return default
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or not math.isfinite(value) or value <= 0:
        kind = "an integer" if integer else "a number"
        raise ActionRefused(f"'{key}' must be {kind} > 0, not {value!r}", code="invalid_argument")
    return float(value)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _text_list(value: Any, limit: int, chars: int) -> list[str]:
    if not isinstance(value, list):
        return []
    return [v.strip()[:chars] for v in value if isinstance(v, str) and v.strip()][:limit]


def _sources(doc: Any, max_sources: int) -> tuple[list[dict[str, Any]], int] | str:
    """The usable sources and how many were dropped, or what is wrong with the document."""
    if not isinstance(doc, dict):
        return "stdout is JSON but not an object"
    raw = doc.get("sources")
    if not isinstance(raw, list):
        return 'the object has no "sources" list'
    out: list[dict[str, Any]] = []
    for item in raw:
        url = item.get("url") if isinstance(item, dict) else None
        if not isinstance(url, str) or not re.match(r"^https?://\S+$", url):
            continue
        title = item.get("title")
        out.append(
            {
                "url": url,
                "title": title.strip()[:TITLE_CHARS] if isinstance(title, str) else "",
                "excerpts": _text_list(item.get("excerpts"), MAX_EXCERPTS, EXCERPT_CHARS),
            }
        )
    return out[:max_sources], len(raw) - len(out)


class ResearchApps:
    """The apps this worker offers, and the `app.research` action that runs them."""

    def __init__(
        self,
        apps: dict[str, ResearchApp],
        *,
        workdir: Path | None = None,
        env: dict[str, str] | None = None,
        max_timeout: float = MAX_TIMEOUT,
        user: pwd.struct_passwd | None = None,
    ) -> None:
        if not (math.isfinite(max_timeout) and max_timeout > 0):
            raise InvalidArgumentError(
                f"--research-app-timeout: seconds, more than 0, not {max_timeout:g}"
            )
        self._apps = dict(apps)
        # `<state-dir>/apps`; without one, a temporary directory per run.
        self._workdir = workdir
        self._env = dict(env or {})
        self._max_timeout = max_timeout
        self._user = user

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._apps))

    def register(self, registry: ActionRegistry) -> None:
        registry.register(KIND, self.research)

    def research(self, args: dict[str, Any], ctx: ActionContext) -> dict[str, Any]:
        name = str(args.get("app", ""))
        app = self._apps.get(name)
        if app is None:
            offered = ", ".join(self.names) or "none"
            return _failed(name, "app_absent", f"this worker offers no app {name} ({offered})")
        query = args.get("query", "")
        if not isinstance(query, str):
            raise ActionRefused("'query' must be a string", code="invalid_argument")
        max_sources = min(_number(args, "max_sources", 5, integer=True), MAX_SOURCES)
        asked = _number(args, "timeout", DEFAULT_TIMEOUT)
        timeout = min(asked, self._max_timeout)
        started = time.monotonic()
        result = self._run(app, {"query": query, "max_sources": int(max_sources)}, timeout, ctx)
        if asked > timeout:
            result["timeout_capped"] = timeout  # the worker's own limit, not the owner's wish
        result["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        return result

    def environment(self, home: Path, tmp: Path) -> dict[str, str]:
        """What an app sees: never the worker's own environment, only these names."""
        return {
            "PATH": os.environ.get("PATH") or os.defpath,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            **self._env,
            "HOME": str(home),
            "TMPDIR": str(tmp),
        }

    @contextlib.contextmanager
    def _home(self, app: ResearchApp) -> Iterator[tuple[Path, Path]]:
        """The app's HOME and TMPDIR: its own under the state directory, or, for another
        user (or without a state directory), fresh ones for this run, removed after it."""
        if self._workdir is not None and self._user is None:
            base = self._workdir / app.name
            for sub in ("home", "tmp"):
                (base / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
            yield base / "home", base / "tmp"
            return
        base = Path(tempfile.mkdtemp(prefix=f"deskfleet-app-{app.name}-"))
        try:
            for sub in ("home", "tmp"):
                (base / sub).mkdir(mode=0o700)
            if self._user is not None:
                for path in (base, base / "home", base / "tmp"):
                    os.chown(path, self._user.pw_uid, self._user.pw_gid)
            yield base / "home", base / "tmp"
        finally:
            shutil.rmtree(base, ignore_errors=True)

    def _run(
        self, app: ResearchApp, request: dict[str, Any], timeout: float, ctx: ActionContext
    ) -> dict[str, Any]:
        with self._home(app) as (home, tmp):
            return self._run_in(app, request, timeout, ctx, home, tmp)

    def _run_in(
        self,
        app: ResearchApp,
        request: dict[str, Any],
        timeout: float,
        ctx: ActionContext,
        home: Path,
        tmp: Path,
    ) -> dict[str, Any]:
        user = self._user
        try:
            proc = subprocess.Popen(
                app.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=os.name == "posix",  # one group: children die with it
                env=self.environment(home, tmp),
                cwd=home,
                close_fds=True,
                user=user.pw_uid if user else None,
                group=user.pw_gid if user else None,
                extra_groups=[] if user else None,
            )
        except OSError as exc:
            return _failed(app.name, "not_started", f"app {app.name} did not start: {exc}")
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stdout = _Output(proc.stdout, MAX_OUTPUT)
        stderr = _Output(proc.stderr, STDERR_TAIL, keep_tail=True)
        try:
            with contextlib.suppress(OSError):  # an app that ignores stdin may have exited
                proc.stdin.write(json.dumps(request).encode())
                proc.stdin.close()
            deadline = time.monotonic() + timeout
            while proc.poll() is None:
                if ctx.cancelled.wait(0.05):
                    raise ActionCancelled(f"app {app.name} stopped: the attempt was cancelled")
                if stdout.overflow:
                    return _failed(
                        app.name,
                        "output_too_large",
                        f"app {app.name} wrote more than {MAX_OUTPUT} bytes; stopped",
                    )
                if time.monotonic() > deadline:
                    return _failed(
                        app.name,
                        "timeout",
                        f"app {app.name} did not answer within {timeout:g} s; stopped",
                    )
        finally:
            _kill_group(proc)
            proc.wait()
            stdout.close(proc.stdout)
            stderr.close(proc.stderr)
        return self._interpret(app, proc.returncode, stdout, stderr, request["max_sources"])

    def _interpret(
        self, app: ResearchApp, status: int, stdout: _Output, stderr: _Output, max_sources: int
    ) -> dict[str, Any]:
        name = app.name
        out = bytes(stdout.data).decode("utf-8", errors="replace")
        err = bytes(stderr.data).decode("utf-8", errors="replace")
        meta = {"exit_status": status, "bytes": stdout.total}
        if stdout.overflow:
            return _failed(
                name, "output_too_large", f"app {name} wrote more than {MAX_OUTPUT} bytes", **meta
            )
        if status != 0:
            said = [x for x in (err + "\n" + out).splitlines() if CREDIT_LIMIT.search(x)]
            if said:
                line = said[0]
                return _failed(
                    name, "credit_limit", f"app {name} hit a credit limit: {line.strip()}", **meta
                )
            how = f"exited with status {status}" if status > 0 else f"was killed (signal {-status})"
            detail = _last_line(err) or _last_line(out)
            return _failed(
                name, "exit_status", f"app {name} {how}" + (f": {detail}" if detail else ""), **meta
            )
        try:
            doc = json.loads(out)
        except ValueError as exc:
            code = "credit_limit" if CREDIT_LIMIT.search(out) else "bad_output"
            return _failed(name, code, f"app {name} printed no JSON document ({exc})", **meta)
        parsed = _sources(doc, max_sources)
        if isinstance(parsed, str):
            return _failed(name, "bad_output", f"app {name}: {parsed}", **meta)
        sources, dropped = parsed
        if not sources:
            why = f" ({dropped} without a valid http(s) url)" if dropped else ""
            return _failed(name, "no_sources", f"app {name} named no usable source{why}", **meta)
        answer = doc.get("answer")
        return {
            "app": name,
            "outcome": "ok",
            "code": "",
            "message": "",
            "sources": sources,
            "dropped_sources": dropped,
            "answer": answer.strip()[:ANSWER_CHARS] if isinstance(answer, str) else "",
            **meta,
        }
