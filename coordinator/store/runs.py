"""Queries on runs, the action ledger, receipts, the journal and guidance."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, event, func, or_, select, text, update
from sqlalchemy.orm import Session, aliased

from coordinator.store import deferred
from coordinator.store.models import ActionRow, GuidanceRow, JournalRow, ReceiptRow, RunRow
from shared.errors import FailedPreconditionError
from shared.states import ACTIVE, DONE, IN_FLIGHT, ActionState, GuidanceState

LOCKED_KEY = "deskfleet.locked_runs"


@dataclass
class _Held:
    """What this transaction has locked and loaded for later use in it."""

    txn: object
    runs: set[str] = field(default_factory=set)  # run ids locked
    # Strong references: the session's identity map is weak, and rows loaded ahead of use
    # would otherwise be dropped and read again.
    rows: list[object] = field(default_factory=list)
    missing: set[str] = field(default_factory=set)  # action ids looked up ahead, not found
    # Locked runs whose undelivered guidance was looked up ahead, and those that have some:
    # guidance for a locked run cannot be added until this transaction ends.
    guidance_known: set[str] = field(default_factory=set)
    guided: set[str] = field(default_factory=set)


def _held(s: Session) -> _Held:
    """The runs this transaction has locked: their rows in the session are current until it
    ends (no other transaction can change them), so they are not read again."""
    txn = s.get_transaction()
    held: _Held | None = s.info.get(LOCKED_KEY)
    if held is None or held.txn is not txn:
        held = _Held(txn)
        s.info[LOCKED_KEY] = held
    return held


def is_held(s: Session, run_id: str) -> bool:
    """Whether this transaction holds the run's lock already."""
    return run_id in _held(s).runs


def hold_new_run(s: Session, run: RunRow) -> None:
    """A run this transaction wrote: as good as locked (no other transaction sees it before
    the commit) and with no guidance (none can name it yet), so the line service and the
    guidance check at its first dispatch read neither again."""
    held = _held(s)
    held.runs.add(run.id)
    held.rows.append(run)
    held.guidance_known.add(run.id)


def note_guided(s: Session, run_id: str) -> None:
    """This transaction queued guidance for the run: its undelivered guidance is read again."""
    _held(s).guided.add(run_id)


def run_for_update(s: Session, run_id: str) -> RunRow | None:
    """The run row, locked for this transaction: its journal head is about to move."""
    held = _held(s)
    if run_id in held.runs:
        known = s.get(RunRow, run_id)
        if known is not None:
            return known
    run = s.execute(
        select(RunRow).where(RunRow.id == run_id).with_for_update()
    ).scalar_one_or_none()
    if run is not None:
        held.runs.add(run_id)
        held.rows.append(run)
    return run


# A batch's statements, built once: their IN lists are bound at each call (expanding).
_BATCH_RUNS = (
    select(RunRow)
    .where(
        or_(
            RunRow.id.in_(bindparam("run_ids", expanding=True)),
            RunRow.id.in_(
                select(ActionRow.run_id)
                .where(ActionRow.id.in_(bindparam("started", expanding=True)))
                .scalar_subquery()
            ),
        )
    )
    .order_by(RunRow.id)
    .with_for_update()
)
_GUIDED_RUNS = (
    select(GuidanceRow.run_id)
    .where(
        GuidanceRow.run_id.in_(bindparam("run_ids", expanding=True)),
        GuidanceRow.status == GuidanceState.QUEUED,
    )
    .distinct()
)
_BATCH_ACTIONS = select(ActionRow).where(ActionRow.id.in_(bindparam("ids", expanding=True)))


def lock_for_messages(
    s: Session, run_ids: Collection[str], action_ids: Collection[str], started: Collection[str]
) -> None:
    """Lock every run a batch of worker messages touches, then load their actions and find
    which of the runs have guidance waiting: one query per table for the whole batch, where
    each message would read its action, its run and its run's guidance.

    `run_ids` are the runs receipts name, `action_ids` every action named, `started` the
    actions of start messages (their run is found through the action). Runs are locked in id
    order, so that two transactions never wait for each other's runs in opposite orders; the
    actions are read after the locks, so that they are current. Later `action` and
    `run_for_update` calls for these rows are answered from the session.
    """
    if not action_ids:
        return
    runs = (
        s.execute(_BATCH_RUNS, {"run_ids": sorted(run_ids), "started": sorted(started)})
        .scalars()
        .all()
    )
    held = _held(s)
    held.runs.update(run.id for run in runs)
    held.rows += runs
    ids = sorted(run.id for run in runs)
    held.guidance_known.update(ids)
    held.guided.update(s.execute(_GUIDED_RUNS, {"run_ids": ids}).scalars())
    actions = s.execute(_BATCH_ACTIONS, {"ids": sorted(action_ids)}).scalars().all()
    held.rows += actions
    # A worker naming actions that do not exist costs this query, not one more per message.
    held.missing.update(set(action_ids) - {a.id for a in actions})


_LOCK_RUNS = (
    select(RunRow)
    .where(RunRow.id.in_(bindparam("run_ids", expanding=True)))
    .order_by(RunRow.id)
    .with_for_update()
)


def lock_runs(s: Session, run_ids: Collection[str]) -> None:
    """Lock the runs the line is about to serve and find which have guidance waiting: two
    statements for the group, where each run would be locked and looked up on its turn. Runs
    are locked in id order; those this transaction holds already are left out. Later
    `run_for_update` calls for them are answered from the session."""
    held = _held(s)
    ids = sorted(set(run_ids) - held.runs)
    if not ids:
        return
    runs = s.execute(_LOCK_RUNS, {"run_ids": ids}).scalars().all()
    held.runs.update(run.id for run in runs)
    held.rows += runs
    found = sorted(run.id for run in runs)
    held.guidance_known.update(found)
    held.guided.update(s.execute(_GUIDED_RUNS, {"run_ids": found}).scalars())


def run_of_owner(s: Session, run_id: str, owner_id: str) -> RunRow | None:
    # By primary key, then the owner: a WHERE on both lets SQLite pick the owner index and
    # scan every run of that owner.
    run = s.get(RunRow, run_id)
    return run if run is not None and run.owner_id == owner_id else None


def runs_listed(
    s: Session, owner_id: str | None, status: str, kind: str, limit: int, parent: str = ""
) -> Sequence[RunRow]:
    """Newest first: one owner's runs, or every owner's (`owner_id` None), filtered."""
    query = select(RunRow)
    if owner_id is not None:
        query = query.where(RunRow.owner_id == owner_id)
    if parent:
        query = query.where(RunRow.parent_id == parent)
    if status:
        query = query.where(RunRow.status == status)
    if kind:
        query = query.where(RunRow.kind == kind)
    return s.execute(query.order_by(RunRow.created_at.desc()).limit(limit)).scalars().all()


def action_of_origin(s: Session, run_id: str, origin: str) -> ActionRow | None:
    """The newest action of the run made for `origin` (`ActionRow.origin`)."""
    return s.execute(
        select(ActionRow)
        .where(ActionRow.origin == origin, ActionRow.run_id == run_id)
        .order_by(ActionRow.idx.desc())
        .limit(1)
    ).scalar_one_or_none()


def guidance_texts(s: Session, run_id: str, ids: Sequence[str]) -> dict[str, str]:
    """The text of each of these guidance messages of the run, by id."""
    if not ids:
        return {}
    rows = s.execute(
        select(GuidanceRow.id, GuidanceRow.text).where(
            GuidanceRow.run_id == run_id, GuidanceRow.id.in_(ids)
        )
    ).all()
    return {row.id: row.text for row in rows}


def children_of(s: Session, run_id: str, limit: int) -> tuple[Sequence[RunRow], int]:
    """A run's first `limit` children (oldest first), and how many it has."""
    rows = (
        s.execute(
            select(RunRow)
            .where(RunRow.parent_id == run_id)
            .order_by(RunRow.created_at, RunRow.id)
            .limit(limit)
        )
        .scalars()
        .all()
    )
    total = len(rows)
    if total == limit:
        total = s.execute(
            select(func.count()).select_from(RunRow).where(RunRow.parent_id == run_id)
        ).scalar_one()
    return rows, total


def refuse_stopped_parent(parent: RunRow | None) -> None:
    """A child starts only under an open run: one cancelled a moment ago (its goal's model
    still answering) starts nothing more. The parent row is locked by the caller."""
    if parent is not None and parent.status not in ACTIVE:
        raise FailedPreconditionError(
            f"run {parent.id} is {parent.status}: a stopped run starts no more runs"
        )


MAX_LINEAGE = 64  # ancestors read for one run (a goal's children are one level below it)


def lineage(s: Session, run: RunRow) -> list[str]:
    """`run`'s id and its ancestors' ids, nearest first: a switch or a cancel on any of them
    is one on `run`."""
    ids = [run.id]
    parent = run.parent_id
    while parent and parent not in ids and len(ids) < MAX_LINEAGE:
        ids.append(parent)
        above = s.get(RunRow, parent)
        parent = above.parent_id if above is not None else None
    return ids


def _below(s: Session, run_id: str, root_id: str) -> list[str]:
    """The ids below `run_id` in the tree of `root_id`, parents before their children: the
    tree is read once by its root (rows from before trees have no root and no children)."""
    tree = s.execute(select(RunRow.id, RunRow.parent_id).where(RunRow.root_id == root_id)).all()
    below: dict[str, list[str]] = {}
    for child, parent in tree:
        if parent:
            below.setdefault(parent, []).append(child)
    out: list[str] = []
    todo = list(below.get(run_id, ()))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo.extend(below.get(child, ()))
    return out


def descendant_ids(s: Session, run_id: str) -> list[str]:
    """The ids of the runs below `run_id` in its tree, any status, unlocked (for reads)."""
    run = s.get(RunRow, run_id)
    return [] if run is None else _below(s, run_id, run.root_id or run.id)


def open_descendants(s: Session, run: RunRow, statuses: Sequence[str]) -> list[RunRow]:
    """The runs below `run` in its tree (children, theirs, ...) whose status is one of
    `statuses`, locked for writing, parents before their children."""
    out = []
    for child_id in _below(s, run.id, run.root_id or run.id):
        row = run_for_update(s, child_id)
        if row is not None and row.status in statuses:
            out.append(row)
    return out


def runs_in(s: Session, statuses: Sequence[str]) -> Sequence[RunRow]:
    return s.execute(select(RunRow).where(RunRow.status.in_(statuses))).scalars().all()


def line_is_empty(s: Session) -> bool:
    first = s.execute(select(RunRow.id).where(RunRow.queued_at.is_not(None)).limit(1)).first()
    return first is None


_LINE = (
    select(RunRow.id, RunRow.queued_at)
    .where(RunRow.queued_at.is_not(None))
    .order_by(RunRow.queued_at, RunRow.id)
    .limit(bindparam("limit"))
)
_LINE_AFTER = _LINE.where(
    or_(
        RunRow.queued_at > bindparam("at"),
        and_(RunRow.queued_at == bindparam("at"), RunRow.id > bindparam("run_id")),
    )
)


def line_page(
    s: Session, after: tuple[float, str] | None, limit: int
) -> Sequence[tuple[str, float]]:
    """Up to `limit` runs in line for a worker slot, oldest place first, after the place
    `after` (queued_at, run id) if given: (run id, place) pairs, from the index."""
    if after is None:
        rows = s.execute(_LINE, {"limit": limit})
    else:
        rows = s.execute(_LINE_AFTER, {"limit": limit, "at": after[0], "run_id": after[1]})
    # `queued_at` is never None here (the WHERE); the check only narrows its type.
    return [(run_id, at) for run_id, at in rows if at is not None]


# The stage queries run several times per receipt: built once, with their parameters bound at
# each call, they skip the statement construction and cache-key work (most of their cost).
_DONE = DONE
_LOWEST_OPEN = (
    select(func.min(ActionRow.stage))
    .where(ActionRow.run_id == bindparam("run_id"), ActionRow.status.not_in(_DONE))
    .scalar_subquery()
)
_FIRST_OPEN_STAGE = select(
    _LOWEST_OPEN,
    select(func.max(ActionRow.finished_at))
    .where(ActionRow.run_id == bindparam("run_id"), ActionRow.stage < _LOWEST_OPEN)
    .scalar_subquery(),
)
_NEXT_STAGE = select(func.min(ActionRow.stage)).where(
    ActionRow.run_id == bindparam("run_id"), ActionRow.stage > bindparam("after")
)
_STAGE_ACTIONS = (
    select(ActionRow)
    .where(ActionRow.run_id == bindparam("run_id"), ActionRow.stage == bindparam("stage"))
    .order_by(ActionRow.idx)
)


# Counts, per session, the action rows added to it: what was read of a run's stages before a
# unit was added (a research search fans out its fetches) is not used after.
ADDED_KEY = "deskfleet.actions_added"


@event.listens_for(Session, "transient_to_pending")
def _count_added(s: Session, instance: object) -> None:
    if isinstance(instance, ActionRow):
        s.info[ADDED_KEY] = s.info.get(ADDED_KEY, 0) + 1


def units_added(s: Session) -> int:
    """Action rows added to the session so far (a counter that only grows)."""
    added: int = s.info.get(ADDED_KEY, 0)
    return added


@dataclass(frozen=True)
class OpenStages:
    """A run's lowest stage with an action the store has not seen done, its rows, when the
    stages before it were done, and the stage after it with its rows (None: no stage after)."""

    stage: int
    rows: Sequence[ActionRow]
    finished_before: float | None
    next_stage: int | None
    next_rows: Sequence[ActionRow]


_lowest = (
    select(ActionRow.run_id, func.min(ActionRow.stage).label("stage"))
    .where(ActionRow.run_id.in_(bindparam("run_ids", expanding=True)))
    .where(ActionRow.status.not_in(_DONE))
    .group_by(ActionRow.run_id)
    .subquery("lowest")
)
_later = aliased(ActionRow)
_earlier = aliased(ActionRow)
_heads = select(
    _lowest.c.run_id,
    _lowest.c.stage,
    select(func.max(_earlier.finished_at))
    .where(_earlier.run_id == _lowest.c.run_id, _earlier.stage < _lowest.c.stage)
    .scalar_subquery()
    .label("finished_before"),
    select(func.min(_later.stage))
    .where(_later.run_id == _lowest.c.run_id, _later.stage > _lowest.c.stage)
    .scalar_subquery()
    .label("next_stage"),
).subquery("heads")
# Each run's two stages, through the (run, stage) index; one statement, built once.
_OPEN_STAGES = (
    select(ActionRow, _heads.c.stage, _heads.c.finished_before, _heads.c.next_stage)
    .join(
        _heads,
        and_(
            ActionRow.run_id == _heads.c.run_id,
            ActionRow.stage.in_([_heads.c.stage, _heads.c.next_stage]),
        ),
    )
    .order_by(ActionRow.run_id, ActionRow.stage, ActionRow.idx)
)


def open_stages_of(s: Session, run_ids: Collection[str]) -> dict[str, OpenStages]:
    """`first_open_stage` and the rows of that stage and of the next, for many runs at once:
    one statement for a batch of receipts, where each receipt would read its run's stage, find
    it done and read the next. Runs the store has seen done are left out."""
    if not run_ids:
        return {}
    heads: dict[str, tuple[int, float | None, int | None]] = {}
    rows: dict[tuple[str, int], list[ActionRow]] = {}
    for action, stage, before, later in s.execute(_OPEN_STAGES, {"run_ids": sorted(run_ids)}):
        heads[action.run_id] = (stage, before, later)
        rows.setdefault((action.run_id, action.stage), []).append(action)
    return {
        run_id: OpenStages(
            stage,
            rows.get((run_id, stage), []),
            before,
            later,
            rows.get((run_id, later), []) if later is not None else [],
        )
        for run_id, (stage, before, later) in heads.items()
    }


def first_open_stage(s: Session, run_id: str) -> tuple[int | None, float | None]:
    """The lowest stage with an action the store has not seen done: a lower bound of the
    run's current stage (a batch's own changes may not be flushed yet); and when the last
    action before that stage finished. One statement, through the (run, stage) index."""
    stage, finished = s.execute(_FIRST_OPEN_STAGE, {"run_id": run_id}).one()
    return stage, finished


def next_stage(s: Session, run_id: str, after: int) -> int | None:
    found: int | None = s.execute(_NEXT_STAGE, {"run_id": run_id, "after": after}).scalar()
    return found


def stage_actions(s: Session, run_id: str, stage: int) -> Sequence[ActionRow]:
    """The actions of one stage (through the (run, stage) index), in plan order."""
    return s.execute(_STAGE_ACTIONS, {"run_id": run_id, "stage": stage}).scalars().all()


_ACTION_VIEWS = (
    select(*cast(Table, ActionRow.__table__).c)
    .where(ActionRow.run_id == bindparam("run_id"))
    .order_by(ActionRow.idx)
)


def action_views_of(s: Session, run_id: str) -> Sequence[Any]:
    """The run's actions in plan order as plain read-only rows (the same attributes as an
    ActionRow): for views read again and again (GetRun), where building an ORM object per
    action, tracked by the session, was the largest part of the read."""
    rows: Sequence[Any] = _plain(s, _ACTION_VIEWS, {"run_id": run_id}).all()
    return rows


def _plain(s: Session, statement: Any, params: dict[str, Any]) -> Any:
    """A Core statement's plain rows, run on the session's connection: without the ORM's
    result processing (a third of a 50-row read). A write transaction's own changes are
    written first, as the ORM's autoflush would (a stopped run's view for its waiters)."""
    if s.info.get(deferred.KEY):
        deferred.write(s)
    elif s.new or s.dirty or s.deleted:
        s.flush()
    return s.connection().execute(statement, params)


def actions_of(s: Session, run_id: str) -> Sequence[ActionRow]:
    return (
        s.execute(select(ActionRow).where(ActionRow.run_id == run_id).order_by(ActionRow.idx))
        .scalars()
        .all()
    )


def action(s: Session, action_id: str) -> ActionRow | None:
    if action_id in _held(s).missing:
        return None
    return s.get(ActionRow, action_id)


def expired_in_flight(
    s: Session, now: float, expiring_after: float | None = None
) -> Sequence[ActionRow]:
    """In-flight attempts whose lease lapsed before `now` (and, if given, had been due to
    expire after `expiring_after`)."""
    lapsed = [ActionRow.status.in_(IN_FLIGHT), ActionRow.lease_expires_at < now]
    if expiring_after is not None:
        lapsed.append(ActionRow.lease_expires_at >= expiring_after)
    return s.execute(select(ActionRow).where(*lapsed)).scalars().all()


def overdue_in_flight(s: Session, now: float, grace: float) -> Sequence[ActionRow]:
    """In-flight attempts past their timeout (plus grace), whatever their lease says."""
    return (
        s.execute(
            select(ActionRow).where(
                ActionRow.status.in_(IN_FLIGHT),
                ActionRow.dispatched_at + ActionRow.timeout_seconds + grace < now,
            )
        )
        .scalars()
        .all()
    )


def renew_action_leases(s: Session, worker_ids: Sequence[str], until: float) -> None:
    if not worker_ids:
        return
    held = (ActionRow.worker_id.in_(worker_ids), ActionRow.status.in_(IN_FLIGHT))
    if s.get_bind().dialect.name == "postgresql":
        # Rows a receipt or a claim is changing right now are skipped, not waited for: those
        # transactions settle the lease themselves, and the next flush renews the rest. Waiting
        # would lock actions in another order than the ledger does, and deadlock with it.
        ids = select(ActionRow.id).where(*held).with_for_update(skip_locked=True)
        s.execute(
            update(ActionRow)
            .where(ActionRow.id.in_(ids.scalar_subquery()))
            .values(lease_expires_at=until)
            .execution_options(synchronize_session=False)
        )
        return
    s.execute(
        update(ActionRow)
        .where(*held)
        .values(lease_expires_at=until)
        .execution_options(synchronize_session=False)
    )


def run_head(s: Session, run_id: str) -> tuple[int, str] | None:
    """A run's last journal sequence number and status, without loading the row."""
    found = s.execute(
        select(RunRow.last_seq, RunRow.status).where(RunRow.id == run_id)
    ).one_or_none()
    return None if found is None else (int(found[0]), str(found[1]))


# Run ids in one IN list: SQLite before 3.32 takes at most 999 parameters a statement.
HEADS_AT_ONCE = 900


def run_heads(s: Session, run_ids: Collection[str]) -> dict[str, tuple[int, str]]:
    """The last journal sequence number and status of each run in `run_ids` that exists, in
    statements of at most HEADS_AT_ONCE ids (one transaction: the caller's)."""
    ids = list(run_ids)
    found: dict[str, tuple[int, str]] = {}
    for start in range(0, len(ids), HEADS_AT_ONCE):
        rows = s.execute(
            select(RunRow.id, RunRow.last_seq, RunRow.status).where(
                RunRow.id.in_(ids[start : start + HEADS_AT_ONCE])
            )
        )
        found.update((str(run_id), (int(seq), str(status))) for run_id, seq, status in rows)
    return found


def journal_after(s: Session, run_id: str, after_seq: int, limit: int) -> Sequence[JournalRow]:
    return (
        s.execute(
            select(JournalRow)
            .where(JournalRow.run_id == run_id, JournalRow.seq > after_seq)
            .order_by(JournalRow.seq)
            .limit(limit)
        )
        .scalars()
        .all()
    )


_JOURNAL_TAIL = (
    select(JournalRow.seq, JournalRow.kind, JournalRow.at, JournalRow.data)
    .where(JournalRow.run_id == bindparam("run_id"), JournalRow.seq > bindparam("after"))
    .order_by(JournalRow.seq)
    .limit(bindparam("limit"))
)


def journal_tail(s: Session, run_id: str, after_seq: int, limit: int) -> Sequence[Any]:
    """As `journal_after`, as plain rows of (seq, kind, at, data): for readers that decode
    the events themselves (a timeline), without building an ORM object per event."""
    params = {"run_id": run_id, "after": after_seq, "limit": limit}
    rows: Sequence[Any] = _plain(s, _JOURNAL_TAIL, params).all()
    return rows


# Archived events keep only a preview in the journal: their original text is elsewhere, so
# every one of them is a candidate for any search.
ARCHIVED_LIKE = '%"archive"%'


def journal_candidates(
    s: Session, run_id: str, after_seq: int, needle: str, limit: int
) -> Sequence[JournalRow]:
    """Events after `after_seq` that may hold `needle` (lower case, as stored), in order.

    The substring index answers `LIKE` (trigram GIN on PostgreSQL, FTS5 trigram on SQLite);
    the caller checks each candidate exactly. On SQLite the index holds the events up to its
    mark (`store/search.py`), and the events past it, not indexed yet, are matched directly:
    each event is looked up in exactly one of the two, in the same snapshot.

    The needle is stored text with its JSON escapes, so it often holds backslashes:
    PostgreSQL's LIKE reads them as its escape character, and there `\\`, `%` and `_` are
    escaped under an explicit ESCAPE. SQLite's LIKE has no escape character unless given one,
    and FTS5 only answers a LIKE without ESCAPE from its index: the needle goes as it is, and
    `%` and `_`, read as wildcards, only widen the candidates (in the unindexed events too).
    """
    query = select(JournalRow).where(JournalRow.run_id == run_id, JournalRow.seq > after_seq)
    if s.get_bind().dialect.name == "sqlite":
        query = query.where(
            text(
                "(journal.rowid IN (SELECT rowid FROM journal_fts WHERE data LIKE :pattern"
                " UNION SELECT rowid FROM journal_fts WHERE data LIKE :archived)"
                " OR (journal.rowid > (SELECT indexed_to FROM journal_search)"
                " AND (journal.data LIKE :pattern OR journal.data LIKE :archived)))"
            ).bindparams(pattern=f"%{needle}%", archived=ARCHIVED_LIKE)
        )
    else:
        pattern = f"%{like_escaped(needle)}%"
        lowered = func.lower(JournalRow.data)
        query = query.where(
            or_(lowered.like(pattern, escape=LIKE_ESCAPE), lowered.like(ARCHIVED_LIKE))
        )
    return s.execute(query.order_by(JournalRow.seq).limit(limit)).scalars().all()


LIKE_ESCAPE = "\\"


def like_escaped(needle: str) -> str:
    """`needle` as a LIKE pattern that matches exactly it, under ESCAPE LIKE_ESCAPE."""
    for special in (LIKE_ESCAPE, "%", "_"):
        needle = needle.replace(special, LIKE_ESCAPE + special)
    return needle


def journal_entry(s: Session, run_id: str, seq: int) -> JournalRow | None:
    return s.get(JournalRow, (run_id, seq))


def receipt(s: Session, receipt_id: str) -> ReceiptRow | None:
    return s.get(ReceiptRow, receipt_id)


def receipts_of(s: Session, run_id: str) -> Sequence[ReceiptRow]:
    return (
        s.execute(
            select(ReceiptRow).where(ReceiptRow.run_id == run_id).order_by(ReceiptRow.created_at)
        )
        .scalars()
        .all()
    )


def undelivered_guidance(s: Session, run_id: str) -> Sequence[GuidanceRow]:
    held = _held(s)
    if run_id in held.guidance_known and run_id not in held.guided:
        return []
    return (
        s.execute(
            select(GuidanceRow)
            .where(GuidanceRow.run_id == run_id, GuidanceRow.status == GuidanceState.QUEUED)
            .order_by(GuidanceRow.created_at)
        )
        .scalars()
        .all()
    )


def guidance_of(s: Session, run_id: str) -> Sequence[GuidanceRow]:
    """Every message given to the run, oldest first (at most `GUIDANCE_MESSAGES`)."""
    return (
        s.execute(
            select(GuidanceRow)
            .where(GuidanceRow.run_id == run_id)
            .order_by(GuidanceRow.created_at, GuidanceRow.id)
        )
        .scalars()
        .all()
    )


def guidance_by_message(s: Session, run_id: str, message_id: str) -> GuidanceRow | None:
    return s.execute(
        select(GuidanceRow).where(
            GuidanceRow.run_id == run_id, GuidanceRow.message_id == message_id
        )
    ).scalar_one_or_none()


def guidance_totals(s: Session, run_id: str) -> tuple[int, int]:
    """(messages, characters) of all guidance ever given to the run."""
    count, chars = s.execute(
        select(
            func.count(GuidanceRow.id), func.coalesce(func.sum(func.length(GuidanceRow.text)), 0)
        ).where(GuidanceRow.run_id == run_id)
    ).one()
    return int(count), int(chars)


def in_flight_counts(s: Session) -> dict[str, int]:
    """Attempts in flight per worker that has any: the cost follows the work in flight, not
    the number of enrolled workers."""
    return {worker: int(count) for worker, count in s.execute(_IN_FLIGHT_COUNTS)}


_IN_FLIGHT_COUNTS = (
    select(ActionRow.worker_id, func.count(ActionRow.id))
    .where(ActionRow.status.in_(IN_FLIGHT))
    .group_by(ActionRow.worker_id)
)


@dataclass
class HeldByWorker:
    """What the ledger says a (re)connecting worker holds."""

    in_flight: list[ActionRow] = field(default_factory=list)
    unknown: list[ActionRow] = field(default_factory=list)  # given up on, outcome unknown


def lock_for_reconnects(s: Session, worker_ids: Collection[str]) -> dict[str, HeldByWorker]:
    """Lock the runs of every attempt these workers hold in the ledger (in flight, or with
    an unknown outcome), in id order, then read those attempts: one query each for a whole
    batch of connects, where each connect would read its attempts and lock runs one by one.
    Later `run_for_update` calls for these runs are answered from the session."""
    ids = sorted(set(worker_ids))
    found = {worker_id: HeldByWorker() for worker_id in ids}
    if not ids:
        return found
    theirs = (ActionRow.worker_id.in_(ids), ActionRow.status.in_((*IN_FLIGHT, ActionState.UNKNOWN)))
    runs = (
        s.execute(
            select(RunRow)
            .where(RunRow.id.in_(select(ActionRow.run_id).where(*theirs).scalar_subquery()))
            .order_by(RunRow.id)
            .with_for_update()
        )
        .scalars()
        .all()
    )
    held = _held(s)
    held.runs.update(run.id for run in runs)
    held.rows += runs
    # Read after the locks, so that they are current; ordered so that a worker's attempts
    # are reconciled in the same order on every run of the transaction.
    actions = s.execute(select(ActionRow).where(*theirs).order_by(ActionRow.id)).scalars().all()
    held.rows += actions
    for action in actions:
        mine = found[action.worker_id]
        (mine.in_flight if action.status in IN_FLIGHT else mine.unknown).append(action)
    return found


_RECEIPT_TRACES = select(ReceiptRow.id, ReceiptRow.traceparent).where(
    ReceiptRow.run_id == bindparam("run_id"), ReceiptRow.traceparent != ""
)


def receipt_traces(s: Session, run_id: str) -> dict[str, str]:
    """The traceparent of each receipt of the run that has one, by receipt id."""
    rows = _plain(s, _RECEIPT_TRACES, {"run_id": run_id})
    return {str(row[0]): str(row[1]) for row in rows}
