"""Refusals as a person reads them: the coordinator's messages name RPCs ("ListAudit needs an
admin credential"), which mean nothing in a browser; here they become what the person tried to
do and who may do it."""

from __future__ import annotations

import re

from shared.errors import (
    AuthenticationError,
    DeskfleetError,
    PermissionDeniedError,
    UnavailableError,
)

# What each RPC does, as the end of "only an admin can ...". Every guarded RPC has one
# (tests/unit/console/test_console_reading.py holds this to the access rules).
DOING: dict[str, str] = {
    "CreateEnrollmentToken": "create enrollment tokens",
    "ListEnrollmentTokens": "list enrollment tokens",
    "RevokeEnrollmentToken": "revoke enrollment tokens",
    "CreateUser": "create users",
    "ListUsers": "list the users",
    "WhoAmI": "say who is signed in",
    "ListAudit": "read the audit log",
    "RotateUser": "rotate a user's token",
    "GetFleetActivity": "see what the fleet is doing",
    "GetUserLimits": "read a user's limits",
    "SetUserLimits": "set a user's limits",
    "GetWorkerStatus": "see the workers",
    "ListWorkers": "search every worker, revoked ones too",
    "GetWorker": "see a revoked worker",
    "RevokeWorker": "revoke a worker",
    "DrainWorker": "drain a worker",
    "UndrainWorker": "undrain a worker",
    "RotateWorker": "rotate a worker's credential",
    "Enroll": "enroll a worker",
    "Connect": "connect as a worker",
    "RenewCertificate": "renew a worker's certificate",
    "RotateCredential": "rotate a worker's credential",
    "SubmitRun": "submit a run",
    "StartResearch": "start research",
    "StartGoal": "start a goal",
    "GetRun": "open a run",
    "ListRuns": "list runs",
    "WaitRun": "wait for a run",
    "CancelRun": "cancel a run",
    "RetryRun": "retry a run",
    "AbandonRun": "abandon a run",
    "ReviseRun": "revise a run",
    "GuideRun": "guide a run",
    "ListQuestions": "list the questions goals asked",
    "AnswerQuestion": "answer a goal's question",
    "WatchRun": "watch a run",
    "ExportRun": "export a run's evidence",
    "ReadEntry": "read a journal entry",
    "SearchJournal": "search a run's journal",
    "VerifyJournal": "verify a run's journal",
    "RequestDesktop": "request a desktop",
    "Act": "act on a desktop",
    "Continue": "continue a desktop run",
    "WatchScreen": "watch a desktop's screen",
    "TakeOver": "take a desktop over",
    "SendInput": "send input to a taken-over desktop",
    "HandBack": "hand a desktop back",
    "GetArtifact": "open a run's screenshots and files",
    "SetSecret": "store a secret",
    "ListRecording": "list a run's recording",
    "GetRecordingFrame": "open a run's recorded frames",
    "ListApprovals": "list approvals",
    "Approve": "approve a request",
    "Deny": "deny a request",
    "GuideApproval": "answer a request with guidance",
    "DiscussApproval": "discuss a request",
    "AdviseApproval": "ask a model's advice on a request",
    "PeekScreen": "look at a requested screen",
    "Engage": "engage a kill switch",
    "Release": "release a kill switch",
    "Status": "see the kill switches",
}

# The coordinator's guard: "<Rpc> needs an admin credential; this one is an owner credential
# (usr_…)" and "<path> has no access rule; it is refused to everyone".
_NEEDS = re.compile(r"^(\w+) needs an? ([\w ]+?) credential; this one is an? (\w+) credential")
_NO_RULE = re.compile(r"^\S*?(\w+) has no access rule")
# An RPC name inside any other message: two or more capitalised parts ("GetRun", not "Status").
_RPC_NAME = re.compile(r"\b[A-Z][a-z]+(?:[A-Z][a-z]*)+\b")
# A value the message quotes (Python's repr, as the coordinator's messages quote them).
# An apostrophe inside a word ("owner's") opens no quote.
_QUOTED = re.compile(r"""((?<!\w)'(?:[^'\\]|\\.)*'(?!\w)|"(?:[^"\\]|\\.)*")""")


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def doing(rpc: str) -> str:
    return DOING.get(rpc, "do this")


def for_people(exc: DeskfleetError, name: str = "", role: str = "") -> str:
    """One sentence for the error page: what was refused and why, in the console's words."""
    text = str(exc)
    if isinstance(exc, PermissionDeniedError):
        needs = _NEEDS.match(text)
        if needs:
            rpc, roles, held = needs.groups()
            who = f"{name}, {article(held)} {held}" if name else f"{article(held)} {held}"
            return f"Only {article(roles)} {roles} can {doing(rpc)}: you are signed in as {who}."
        no_rule = _NO_RULE.match(text)
        if no_rule:
            return f"Nobody can {doing(no_rule.group(1))} here: the coordinator refuses it to all."
    elif isinstance(exc, AuthenticationError):
        return f"The coordinator no longer accepts your sign-in ({text}): sign in again."
    elif isinstance(exc, UnavailableError) and text.startswith("cannot reach"):
        return f"The console {text}; try again once the coordinator is running."
    # Not inside quotes: a quoted value is what the person typed ("no user 'GetRun'"), echoed
    # back as typed, never reworded into "no user '“open a run”'".
    return "".join(
        part
        if part[:1] in ("'", '"')
        else _RPC_NAME.sub(lambda m: f"“{doing(m[0])}”" if m[0] in DOING else m[0], part)
        for part in _QUOTED.split(text)
    )
