"""Output for people (aligned tables) and for programs (exactly one JSON document).

Text for people never carries a raw control character: table cells spell out every control
and bidi-override character (shared/text.py), and `VisibleWriter` does the same for whatever
else a command prints (keeping line breaks and tabs). JSON output is unchanged by it: the
encoder already writes those characters as `\\u` escapes.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO
from urllib.parse import quote

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from shared.text import visible


class VisibleWriter(io.TextIOBase):
    """A text stream that spells out control characters before they reach the terminal."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(visible(text, multiline=True))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()


def as_dict(message: Message) -> dict[str, Any]:
    return MessageToDict(message, always_print_fields_with_no_presence=True)


def print_json(document: Any) -> None:
    # ensure_ascii (the default) is what keeps control characters out of the terminal here.
    json.dump(document, sys.stdout, indent=2, sort_keys=False, ensure_ascii=True)
    sys.stdout.write("\n")


# A cut column keeps at least this many characters (or its header's width, if wider).
MIN_CUT_WIDTH = 12
ELLIPSIS = "\u2026"


def terminal_width() -> int | None:
    """The width tables must fit: the terminal's (or COLUMNS), or None when the output is not
    a terminal and COLUMNS is unset (a pipe or a file gets whole cells)."""
    if not sys.stdout.isatty() and not os.environ.get("COLUMNS"):
        return None
    return shutil.get_terminal_size().columns


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    cut: Sequence[int] = (),
    margin: int = 0,
) -> str:
    """Aligned columns. The columns in `cut` (free text: reasons, errors, details) are cut with
    an ellipsis, widest first, until a line fits the terminal less `margin`; `--json` is where
    the whole text is."""
    cells = [[str(h) for h in headers]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    limit = terminal_width()
    if limit is not None and cut:
        widths = _fit(widths, [len(h) for h in cells[0]], cut, limit - margin)
        cells = [cells[0]] + [
            [
                _shorten(c, w) if i in cut else c
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ]
            for r in cells[1:]
        ]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _fit(widths: list[int], floors: list[int], cut: Sequence[int], limit: int) -> list[int]:
    widths = list(widths)
    excess = sum(widths) + 2 * (len(widths) - 1) - limit
    while excess > 0:
        floor = {i: max(MIN_CUT_WIDTH, floors[i]) for i in cut}
        room = [i for i in cut if widths[i] > floor[i]]
        if not room:
            break  # the other columns alone are wider than the terminal: let it wrap
        widest = max(room, key=lambda i: widths[i])
        others = [widths[i] for i in room if i != widest]
        # Down to the next widest column (so wide columns shrink together), or as needed.
        target = max(floor[widest], widths[widest] - excess, max(others, default=0))
        if target >= widths[widest]:
            target = widths[widest] - 1
        excess -= widths[widest] - target
        widths[widest] = target
    return widths


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


_FRACTION = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d+Z$")


def _cell(value: Any) -> str:
    return visible(_cell_text(value))


def _cell_text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, str) and (match := _FRACTION.match(value)):
        return match.group(1) + "Z"  # whole seconds are enough to read
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items())) or "-"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def capabilities_cell(worker: dict[str, Any]) -> str:
    caps = [c["name"] for c in worker.get("capabilities", []) if c.get("available")]
    return ",".join(caps) or "none"


def displays_cell(worker: dict[str, Any]) -> str:
    shown = [f"{d['width']}x{d['height']}" for d in worker.get("displays", [])]
    return ",".join(shown) or "none"


def local_kill_text(state: dict[str, Any] | None) -> str:
    """A worker's own kill switch in a few words ("" when it is not engaged)."""
    if not state or not state.get("engaged"):
        return ""
    return f"engaged by {state.get('means') or '?'} since {_cell(state.get('since'))}"


def worker_rows(workers: list[dict[str, Any]]) -> str:
    return table(
        [
            "ID",
            "NAME",
            "STATE",
            "ONLINE",
            "CAPABILITIES",
            "DISPLAYS",
            "REPLICA",
            "LAST HEARTBEAT",
            "LOCAL KILL",
        ],
        [
            [
                w["id"],
                w["name"],
                w["state"],
                w["online"],
                capabilities_cell(w),
                displays_cell(w),
                w.get("replica"),
                w.get("lastHeartbeat"),
                local_kill_text(w.get("localKill")),
            ]
            for w in workers
        ],
    )


def worker_detail(w: dict[str, Any]) -> str:
    lines = [
        f"id:            {w['id']}",
        f"name:          {w['name']}",
        f"state:         {w['state']}",
        f"online:        {_cell(w['online'])}",
        f"replica:       {_cell(w.get('replica'))}",
        f"heartbeat:     {_cell(w.get('lastHeartbeat'))}",
        f"enrolled at:   {_cell(w.get('enrolledAt'))}",
        f"labels:        {_cell(w.get('labels', {}))}",
        f"os:            {_cell(w.get('os'))}",
        f"versions:      {_cell(w.get('versions', {}))}",
        f"granted:       {_cell(w.get('allowedCapabilities') or ['all'])}",
        f"local kill:    {_local_kill_line(w.get('localKill'), bool(w.get('online')))}",
        "displays:",
    ]
    for d in w.get("displays", []) or []:
        lines.append(f"  #{d['index']}: {d['width']}x{d['height']} at {d['left']},{d['top']}")
    if not w.get("displays"):
        lines.append("  none")
    lines.append("capabilities:")
    for c in w.get("capabilities", []):
        state = "available" if c["available"] else f"absent: {c['reason'] or 'unknown reason'}"
        lines.append(f"  {c['name']}: {state}")
    return "\n".join(lines)


def run_rows(runs: list[dict[str, Any]]) -> str:
    return table(
        ["ID", "STATUS", "ACTIONS", "TITLE", "WAITING / STOP REASON", "UPDATED"],
        [
            [
                r["id"],
                r["status"],
                f"{r['actionsSucceeded']}/{r['actionsTotal']}",
                r["title"],
                _reason(r),
                r.get("updatedAt"),
            ]
            for r in runs
        ],
        cut=(3, 4),
    )


def safe_text(text: str) -> str:
    """Free text from people or models, printed as text: no terminal controls get through."""
    return visible(text, multiline=True)


def discussion(doc: dict[str, Any]) -> str:
    """An approval's discussion: the request, the goal's request, messages, advice, decision."""
    a = doc["approval"]
    lines = [
        f"approval:   {a['id']} ({a['status']}) for run {a['runId']} on worker {a['workerId']}",
        f"reason:     {visible(a.get('reason') or '-')}",
    ]
    if doc.get("goalRequest"):
        lines.append(f"goal:       {visible(doc['goalRequest'])}")
    for note in doc.get("notes", []):
        label = "advice" if note["kind"] == "advice" else "message"
        lines.append(f"{_cell(note.get('at'))}  {label} from {visible(note['author'])}:")
        lines += ["  " + line for line in safe_text(note["text"]).splitlines()]
    if a["status"] != "pending":
        lines.append(f"decision:   {a['status']} {visible(a.get('answer') or '')}".rstrip())
    return "\n".join(lines)


def question_rows(questions: Sequence[dict[str, Any]]) -> str:
    return table(
        ["QUESTION", "RUN", "STATUS", "REQUIRED", "ASKED", "QUESTION TEXT", "ANSWER"],
        [
            [
                q["id"],
                q["runId"],
                q["status"],
                bool(q.get("required")),
                q.get("askedAt"),
                q.get("text"),
                q.get("answer"),
            ]
            for q in questions
        ],
        cut=(5, 6),
    )


def _reason(run: dict[str, Any]) -> str:
    waiting = run.get("waiting")
    if waiting:
        return f"{waiting['code']}: {waiting['detail']}"
    return str(run.get("stopReason") or "")


def run_detail(r: dict[str, Any]) -> str:
    lim = r["limits"]
    lines = [
        f"run:        {r['id']}  ({r['title']})",
        f"status:     {r['status']}",
    ]
    if r.get("waiting"):
        lines.append(f"waiting:    {r['waiting']['code']}: {r['waiting']['detail']}")
    if r.get("stopReason"):
        lines.append(f"stopped:    {r['stopReason']}")
    lines += [
        f"progress:   {r['actionsSucceeded']}/{r['actionsTotal']} actions succeeded,"
        f" {r['attemptsUsed']} attempts used",
        f"budget:     {lim['maxActions']} attempts / {lim['maxSeconds']:g} s hard;"
        f" estimate {lim['estimateActions']} attempts / {lim['estimateSeconds']:g} s;"
        f" {r['extensions']} of 3 extensions used",
        f"journal:    {r['lastSeq']} events (trace {r['traceId']})",
        f"execution:  {r.get('execution') or 1} (moves at each retry, adoption and restart)",
        f"created:    {_cell(r.get('createdAt'))}   updated: {_cell(r.get('updatedAt'))}",
    ]
    if r.get("guidance"):
        lines.append(f"guidance:   {r.get('guidanceQueued') or 0} of {len(r['guidance'])} queued")
        lines += _indented(
            table(
                ["MESSAGE", "STATUS", "EXECUTION", "SENT", "TO", "TEXT"],
                [
                    [
                        g["messageId"],
                        g["status"],
                        g.get("execution") or 1,
                        g.get("createdAt"),
                        g.get("deliveredTo"),
                        g.get("text"),
                    ]
                    for g in r["guidance"]
                ],
                cut=(4, 5),
                margin=2,
            )
        )
    elif r.get("guidanceQueued"):
        lines.append(f"guidance:   {r['guidanceQueued']} message(s) queued")
    if r.get("questions"):
        waiting = sum(q["status"] == "open" for q in r["questions"])
        lines.append(f"questions:  {waiting} of {len(r['questions'])} open")
        lines += _indented(question_rows(r["questions"]))
    if r.get("parent"):
        lines.append(f"parent:     {r['parent']} (tree of {r.get('root') or r['parent']})")
    if r.get("children"):
        shown = ", ".join(f"{c['id']} ({c['kind']} {c['status']})" for c in r["children"])
        more = int(r.get("childrenTotal") or 0) - len(r["children"])
        lines.append(f"children:   {shown}" + (f", and {more} more" if more > 0 else ""))
    if r.get("actions"):
        lines.append("")
        lines.append(
            table(
                ["#", "KIND", "STATUS", "WORKER", "ATTEMPTS", "RECEIPT", "ARTIFACTS", "ERROR"],
                [
                    [
                        a["index"],
                        a["kind"],
                        # Settled by its postcondition's check: done, though not run again.
                        f"{a['status']} (observed)" if a.get("settledBy") else a["status"],
                        a.get("workerId"),
                        a["attempts"],
                        a.get("receiptId"),
                        [_artifact_cell(art) for art in a.get("artifacts", [])],
                        a.get("error"),
                    ]
                    for a in r["actions"]
                ],
                cut=(6, 7),
            )
        )
    if r.get("timeline"):
        lines.append("")
        lines += timeline_lines(r["timeline"])
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 120 else f"{value / 60:.1f} min"


def _indented(text: str) -> list[str]:
    return ["  " + line for line in text.splitlines()]


def timeline_lines(t: dict[str, Any]) -> list[str]:
    """Where the run has been and for how long: states, attempts, retries, recoveries."""
    states = t.get("states", [])
    if not states:
        return ["timeline:   (the journal holds no submission)"]
    if t["live"]:
        now = states[-1]
        why = f": {now['reason']}" if now.get("reason") else ""
        head = (
            f"timeline:   {_seconds(t['wallSeconds'])} so far; {now['state']} for"
            f" {_seconds(now['seconds'])}{why}"
        )
    else:
        head = (
            f"timeline:   {_seconds(t['wallSeconds'])} from submission to {states[-1]['state']}"
            f" ({_cell(t.get('submittedAt'))} to {_cell(t.get('endedAt'))})"
        )
    lines = [head]
    lines += _indented(
        table(
            ["STATE", "ENTERED", "SECONDS", "WHY"],
            [
                [
                    s["state"],
                    s.get("enteredAt"),
                    f"{s['seconds']:.2f}" if t["live"] or s.get("leftAt") else "(stopped)",
                    s.get("reason") or s.get("cause"),
                ]
                for s in states
            ],
            cut=(3,),
            margin=2,
        )
    )
    if t.get("actions"):
        lines.append("attempts:")
        lines += _indented(
            table(
                ["#", "KIND", "ATTEMPT", "WORKER", "STATUS", "SECONDS", "ERROR"],
                [
                    [
                        a["index"],
                        a["kind"],
                        a["attempt"],
                        a.get("worker"),
                        a["status"],
                        f"{a['seconds']:.2f}",
                        a.get("error"),
                    ]
                    for a in t["actions"]
                ],
                cut=(6,),
                margin=2,
            )
        )
    if t.get("retries"):
        lines.append("retries:")
        lines += [
            f"  {rt['kind']} of action {rt['index']} after attempt {rt['attempt']}"
            f" at {_cell(rt.get('at'))}: {rt['cause'] or '-'}"
            for rt in t["retries"]
        ]
    for title, key in (("recoveries:", "recoveries"), ("events:", "events")):
        if t.get(key):
            lines.append(title)
            lines += [
                f"  {_cell(e.get('at'))}  {e['kind']}: {e.get('detail') or '-'}" for e in t[key]
            ]
    if not t["live"]:
        lines.append(f"stop reason: {t.get('stopReason') or '-'}")
    return lines


def _artifact_cell(art: dict[str, Any]) -> str:
    return art.get("path") or f"{art.get('role', 'artifact')}:{art['sha256'][:16]}"


def event_line(e: dict[str, Any]) -> str:
    text = e.get("dataJson", "")
    if e["kind"] == "receipt":
        # The part a person reads a receipt for: its outcome and result.
        data = json.loads(text)
        result = data.get("result", data.get("result_preview", ""))
        text = (
            f"{data['status']} {data['receipt']}"
            f"{' error=' + data['error'] if data.get('error') else ''}"
            f" result={json.dumps(result, ensure_ascii=False)}"
        )
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{e['seq']:>5}  {_cell(e.get('at'))}  {e['kind']:<18} {text}"


def research_counts(report: dict[str, Any]) -> str:
    """What the report lists, counted the way it lists it."""
    sources = report["sources"]
    parts = [
        f"{sum(1 for s in sources if s['evidence'])} of {len(sources)} source(s) read hold"
        " matching text"
    ]
    if report.get("failures"):
        parts.append(f"{len(report['failures'])} not evidence")
    if report.get("skipped"):
        parts.append(f"{len(report['skipped'])} skipped")
    return ", ".join(parts)


def _no_evidence(report: dict[str, Any]) -> bool:
    return not any(s["evidence"] for s in report["sources"])


def research_totals(totals: dict[str, Any], failures: int) -> str:
    """Pages fetched and read: a page that failed (refused, unreachable, binary) was not read,
    and a report that read none says so instead of a count of bytes."""
    by_status = totals["sources_by_status"]
    fetched = totals["pages_fetched"]
    read = by_status.get("ok", max(fetched - failures, 0))
    statuses = ", ".join(f"{k} {v}" for k, v in by_status.items() if v)
    if fetched and not read:
        return "no page was read" + (f" ({statuses})" if statuses else "")
    return f"read {read} of {fetched} page(s), {totals['bytes_read']} bytes" + (
        f" ({statuses})" if statuses else ""
    )


def _by_evidence(sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(sources, key=lambda s: not s["evidence"])


def research_report(report: dict[str, Any]) -> str:
    # As the run's stop reason (no_evidence: ...): a report without evidence says so first.
    head = "no evidence" if _no_evidence(report) else "evidence"
    lines = [f"{head} for {report['query']!r}: {research_counts(report)}"]
    for branch in report.get("routes", []):
        why = f": {branch['code']}: {branch['message']}" if branch.get("code") else ""
        lines.append(f"route {branch['route']}: {branch['outcome']}{why}")
    for src in _by_evidence(report["sources"]):
        mark = "evidence" if src["evidence"] else "no matching text"
        lines.append(
            f"- {src['title'] or src['url']} <{src['final_url'] or src['url']}>"
            f" [{src.get('route', 'headless')}; {mark}; receipt {src['receipt']}]"
        )
        lines += [f'    "{e}"' for e in src["excerpts"]]
    for answer in report.get("answers", []):
        lines.append(f"answer from {answer['route']} (not evidence): {answer['answer']}")
    if report["failures"]:
        lines.append("not evidence:")
        lines += [f"- {f['url']}: {f['outcome']}: {f['reason']}" for f in report["failures"]]
    if report.get("skipped"):
        lines.append("skipped:")
        lines += [f"- {x['url']}: {x['reason']}" for x in report["skipped"]]
    if report.get("disagreements"):
        lines.append("where the routes disagree:")
        for d in report["disagreements"]:
            if d["kind"] == "only_one_route":
                lines.append(f"- {d['url']}: only {d['found_by']} ({d['detail']})")
            else:
                lines.append(f"- {d['url']}: {d['route']} quotes {d['excerpt']!r}: {d['detail']}")
    totals = report.get("totals")
    if totals:
        lines.append(research_totals(totals, len(report["failures"])))
    return "\n".join(lines)


def _md(text: Any) -> str:
    """Text as one Markdown line: control characters spelled out, markup characters escaped."""
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", visible(str(text or "")))


def _md_url(url: Any) -> str:
    """A link destination that cannot end early: anything but URL characters percent-encoded."""
    return quote(str(url or ""), safe=":/?#[]@!$&'()*+,;=%~-._")


def research_markdown(report: dict[str, Any], run: dict[str, Any] | None = None) -> str:
    """The report as Markdown a person reads: sources and their passages (with headings and
    links to the passage), then what was not evidence or was skipped, and why."""
    out = [f"# Research: {_md(report['query'])}", ""]
    if run is not None:
        line = f"Run `{run.get('id', '')}`: {run.get('status', '')}"
        if run.get("stopReason"):
            line += f" ({_md(run['stopReason'])})"
        out += [line, ""]
    counts = research_counts(report)
    out += [
        ("No evidence: " + counts if _no_evidence(report) else counts[0].upper() + counts[1:])
        + ".",
        "",
    ]
    if report.get("passages"):
        out += ["## Best passages", ""]
        for i, p in enumerate(report["passages"], 1):
            where = f" ({_md(p['heading'])})" if p.get("heading") else ""
            out.append(
                f"{i}. {_md(p['text'])}  \n   — [{_md(p['title'] or p['url'])}]"
                f"(<{_md_url(p['link'])}>)"
                f"{where}, score {p['score']}, receipt `{p['receipt']}`"
            )
        out.append("")
    out += ["## Sources", ""]
    for src in _by_evidence(report["sources"]):
        url = src["final_url"] or src["url"]
        mark = "evidence" if src["evidence"] else "no matching text"
        out.append(f"### [{_md(src['title'] or url)}](<{_md_url(url)}>)")
        out.append(f"{src.get('route', 'headless')}; {mark}; receipt `{src['receipt']}`")
        out.append("")
        for p in src.get("passages") or [{"text": e} for e in src["excerpts"]]:
            head = f"**{_md(p['heading'])}**: " if p.get("heading") else ""
            link = f" ([open](<{_md_url(p['link'])}>))" if p.get("link") else ""
            score = f" score {p['score']}" if p.get("score") is not None else ""
            out.append(f"> {head}{_md(p['text'])}{link}{score}")
            out.append("")
    for answer in report.get("answers", []):
        out += [f"Answer from {answer['route']} (not evidence): {_md(answer['answer'])}", ""]
    if report.get("failures"):
        out += ["## Not evidence", ""]
        out += [
            f"- {_md(f['url'])}: {f['outcome']}: {_md(f['reason'])}" for f in report["failures"]
        ]
        out.append("")
    if report.get("skipped"):
        out += ["## Skipped", ""]
        out += [f"- {_md(x['url'])}: {_md(x['reason'])}" for x in report["skipped"]]
        out.append("")
    if report.get("disagreements"):
        out += ["## Where the routes disagree", ""]
        for d in report["disagreements"]:
            if d["kind"] == "only_one_route":
                out.append(f"- {_md(d['url'])}: only {d['found_by']} ({_md(d['detail'])})")
            else:
                out.append(
                    f'- {_md(d["url"])}: {d["route"]} quotes "{_md(d["excerpt"])}":'
                    f" {_md(d['detail'])}"
                )
        out.append("")
    totals = report.get("totals")
    if totals:
        read = research_totals(totals, len(report.get("failures") or []))
        out.append(read[0].upper() + read[1:] + ".")
    return "\n".join(out).rstrip() + "\n"


def scope_text(scope: dict[str, Any]) -> str:
    if not scope:
        return "-"
    region = scope.get("region")
    where = (
        f" in {region.get('width', 0)}x{region.get('height', 0)}+{region.get('x', 0)}"
        f"+{region.get('y', 0)}"
        if region
        else ""
    )
    displays = ",".join(str(d) for d in scope.get("displays", [])) or "0"
    return (
        f"{','.join(scope.get('actions', []))} on display {displays}{where};"
        f" {scope.get('ttlSeconds', 0):g} s; at most {scope.get('maxActions', 0)} actions"
    )


def _answered_scope(approval: dict[str, Any]) -> dict[str, Any]:
    granted: dict[str, Any] = approval.get("granted") or {}
    return granted if granted.get("actions") else approval.get("requested") or {}


def approval_rows(approvals: list[dict[str, Any]]) -> str:
    return table(
        ["ID", "RUN", "WORKER", "STATUS", "SCOPE", "REASON", "REQUESTED"],
        [
            [
                a["id"],
                a["runId"],
                a["workerId"],
                a["status"],
                scope_text(_answered_scope(a)),
                a.get("reason"),
                a.get("requestedAt"),
            ]
            for a in approvals
        ],
        cut=(4, 5),
    )


def _waiting(kill: dict[str, Any]) -> str:
    """Who the switch still waits for: the names given, and how many more there are."""
    names: list[str] = kill.get("unacknowledged", [])
    more = int(kill.get("unacknowledgedCount", len(names))) - len(names)
    return ", ".join(names) + (f" (+{more} more)" if more > 0 else "")


def _local_kill_line(state: dict[str, Any] | None, online: bool) -> str:
    if not online:
        return "unknown (offline: no input runs)"
    if not state or not state.get("engaged"):
        return "released"
    return visible(f"{local_kill_text(state)}: {state.get('reason') or '-'}")


def local_kill_rows(local: list[dict[str, Any]]) -> str:
    """Workers' own kill switches, as the workers report them."""
    return table(
        ["WORKER", "NAME", "ENGAGED SINCE", "BY", "REASON"],
        [
            [
                k["workerId"],
                k.get("workerName"),
                k.get("state", {}).get("since"),
                k.get("state", {}).get("means"),
                k.get("state", {}).get("reason"),
            ]
            for k in local
        ],
        cut=(4,),
    )


def kill_rows(switches: list[dict[str, Any]]) -> str:
    return table(
        ["ID", "SCOPE", "TARGET", "ENGAGED", "BY", "REASON", "ACKED", "WAITING FOR"],
        [
            [
                k["id"],
                k["scope"],
                k.get("target"),
                k.get("engaged"),
                k.get("engagedByName") or k.get("engagedBy"),
                k.get("reason"),
                k.get("acknowledgedCount", 0),
                _waiting(k),
            ]
            for k in switches
        ],
        cut=(5, 7),
    )


def act_line(doc: dict[str, Any]) -> str:
    status = doc.get("status", "")
    head = f"{status}: action {doc.get('actionId', '')} (receipt {doc.get('receiptId') or '-'})"
    if status != "succeeded":
        return f"{head}\n  {doc.get('error', '')}"
    result = doc.get("result") or {}
    details = []
    if isinstance(result, dict):
        if "cursor" in result:
            details.append(f"cursor at {result['cursor']}")
        if "typed" in result:
            details.append(f"typed {result['typed']!r}")
    for art in doc.get("artifacts", []):
        details.append(
            f"{art.get('role', 'artifact')} {art['sha256'][:12]} ({art.get('width')}x"
            f"{art.get('height')} {art.get('mediaType')}, {art.get('size')} bytes)"
        )
    return head + "".join(f"\n  {d}" for d in details)


def audit_rows(entries: list[dict[str, Any]]) -> str:
    rows = [
        (
            datetime.fromtimestamp(e["at"], UTC).isoformat(timespec="seconds"),
            f"{e['actorName']} ({e['actorRole']})",
            e["peer"],
            e["action"],
            e["target"],
            json.dumps(e["detail"], sort_keys=True) if e["detail"] else "",
        )
        for e in entries
    ]
    return table(("TIME", "WHO", "FROM", "ACTION", "TARGET", "DETAIL"), rows, cut=(4, 5))
