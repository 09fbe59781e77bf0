"""Who may call what: one rule per RPC. An RPC without a rule is refused to everyone."""

from __future__ import annotations

from coordinator.model.identity import Role

PUBLIC: frozenset[Role] = frozenset()  # no credential needed (the request carries its own)
ANY_PRINCIPAL = frozenset({Role.ADMIN, Role.OWNER, Role.WORKER})
ADMIN = frozenset({Role.ADMIN})
PEOPLE = frozenset({Role.ADMIN, Role.OWNER})
WORKER = frozenset({Role.WORKER})

RULES: dict[str, frozenset[Role]] = {
    "/deskfleet.v1.AdminService/CreateEnrollmentToken": ADMIN,
    "/deskfleet.v1.AdminService/ListEnrollmentTokens": ADMIN,
    "/deskfleet.v1.AdminService/RevokeEnrollmentToken": ADMIN,
    "/deskfleet.v1.AdminService/CreateUser": ADMIN,
    "/deskfleet.v1.AdminService/ListUsers": ADMIN,
    "/deskfleet.v1.AdminService/WhoAmI": ANY_PRINCIPAL,
    "/deskfleet.v1.AdminService/ListAudit": ADMIN,
    "/deskfleet.v1.AdminService/RotateUser": PEOPLE,
    # Owners see their own runs' part of it; admins the whole fleet.
    "/deskfleet.v1.AdminService/GetFleetActivity": PEOPLE,
    # Owners read their own limits; only admins set anyone's.
    "/deskfleet.v1.AdminService/GetUserLimits": PEOPLE,
    "/deskfleet.v1.AdminService/SetUserLimits": ADMIN,
    "/deskfleet.v1.FleetService/GetWorkerStatus": PEOPLE,
    "/deskfleet.v1.FleetService/ListWorkers": ADMIN,
    "/deskfleet.v1.FleetService/GetWorker": ADMIN,
    "/deskfleet.v1.FleetService/RevokeWorker": ADMIN,
    "/deskfleet.v1.FleetService/DrainWorker": ADMIN,
    "/deskfleet.v1.FleetService/UndrainWorker": ADMIN,
    "/deskfleet.v1.FleetService/RotateWorker": ADMIN,
    "/deskfleet.v1.WorkerGateway/Enroll": PUBLIC,
    "/deskfleet.v1.WorkerGateway/Connect": WORKER,
    "/deskfleet.v1.WorkerGateway/RenewCertificate": WORKER,
    "/deskfleet.v1.WorkerGateway/RotateCredential": WORKER,
    "/deskfleet.v1.RunService/SubmitRun": PEOPLE,
    "/deskfleet.v1.RunService/StartResearch": PEOPLE,
    "/deskfleet.v1.RunService/StartGoal": PEOPLE,
    "/deskfleet.v1.RunService/GetRun": PEOPLE,
    "/deskfleet.v1.RunService/ListRuns": PEOPLE,
    "/deskfleet.v1.RunService/WaitRun": PEOPLE,
    "/deskfleet.v1.RunService/CancelRun": PEOPLE,
    "/deskfleet.v1.RunService/RetryRun": PEOPLE,
    "/deskfleet.v1.RunService/AbandonRun": PEOPLE,
    "/deskfleet.v1.RunService/ReviseRun": PEOPLE,
    "/deskfleet.v1.RunService/GuideRun": PEOPLE,
    "/deskfleet.v1.RunService/ListQuestions": PEOPLE,
    "/deskfleet.v1.RunService/AnswerQuestion": PEOPLE,
    "/deskfleet.v1.RunService/WatchRun": PEOPLE,
    # Owners their own runs; admins any run (the domain decides which, and audits it).
    "/deskfleet.v1.RunService/ExportRun": PEOPLE,
    "/deskfleet.v1.JournalService/ReadEntry": PEOPLE,
    "/deskfleet.v1.JournalService/SearchJournal": PEOPLE,
    "/deskfleet.v1.JournalService/VerifyJournal": PEOPLE,
    "/deskfleet.v1.DesktopService/RequestDesktop": PEOPLE,
    "/deskfleet.v1.DesktopService/Act": PEOPLE,
    "/deskfleet.v1.DesktopService/Continue": PEOPLE,
    "/deskfleet.v1.DesktopService/GetArtifact": PEOPLE,
    "/deskfleet.v1.DesktopService/SetSecret": PEOPLE,
    # Owners their own runs' recordings; admins too only their own (as GetArtifact).
    "/deskfleet.v1.DesktopService/ListRecording": PEOPLE,
    "/deskfleet.v1.DesktopService/GetRecordingFrame": PEOPLE,
    # Admins any desktop; an owner through a desktop run of theirs while it holds the desktop
    # (and takes over only where the worker allows it): the domain decides, and audits it.
    "/deskfleet.v1.DesktopService/WatchScreen": PEOPLE,
    "/deskfleet.v1.DesktopService/TakeOver": PEOPLE,
    "/deskfleet.v1.DesktopService/SendInput": PEOPLE,
    "/deskfleet.v1.DesktopService/HandBack": PEOPLE,
    # Owners see their own requests; only admins answer them.
    "/deskfleet.v1.ApprovalService/ListApprovals": PEOPLE,
    "/deskfleet.v1.ApprovalService/Approve": ADMIN,
    "/deskfleet.v1.ApprovalService/Deny": ADMIN,
    "/deskfleet.v1.ApprovalService/GuideApproval": ADMIN,
    "/deskfleet.v1.ApprovalService/DiscussApproval": PEOPLE,
    "/deskfleet.v1.ApprovalService/AdviseApproval": ADMIN,
    # Reading a person's screen before any scope is granted: an admin's, audited.
    "/deskfleet.v1.ApprovalService/PeekScreen": ADMIN,
    # Owners may stop their own runs; the fleet and single workers are an admin's to stop.
    "/deskfleet.v1.KillSwitchService/Engage": PEOPLE,
    "/deskfleet.v1.KillSwitchService/Release": PEOPLE,
    "/deskfleet.v1.KillSwitchService/Status": PEOPLE,
}

GUARDED_PREFIX = "/deskfleet.v1."
