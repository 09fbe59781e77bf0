"""Reading a run's recording back (ListRecording, GetRecordingFrame) in this process: the
servicer over the desktop domain over a SQLite store holding recorded JPEG frames. Pages
follow each other to the last frame, a limit is bounded, and only the run's owner reads it:
another owner and an admin alike get NOT_FOUND, as for the run's artifacts."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from coordinator.heart.dispatch import Dispatcher
from coordinator.model.identity import Principal, Role
from coordinator.runs.desktop.runs import RECORDING_PAGE_MAX, Desktop
from coordinator.servicers import guard
from coordinator.servicers.desktop import DesktopServicer
from coordinator.servicers.names import UserNames
from coordinator.store import Database
from coordinator.streams.journal_bus import JournalBus
from shared.errors import InvalidArgumentError, NotFoundError
from shared.gen.deskfleet.v1 import desktop_pb2
from shared.receipts import content_sha256
from tests.harness.evidence import OWNER_ID, add_frames, finished_run
from tests.harness.ledger import Store

OLIVE = Principal(OWNER_ID, "olive", Role.OWNER)
ADMIN = Principal("usr_admin", "ada", Role.ADMIN)
MALLORY = Principal("usr_mallory", "mallory", Role.OWNER)
T = TypeVar("T")


@pytest.fixture
async def servicer(store: Store, tmp_path: Path) -> AsyncIterator[DesktopServicer]:
    db = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    # Reading a recording dispatches nothing: no dispatcher is needed behind it.
    desktop = Desktop(db, cast(Dispatcher, None), JournalBus())
    yield DesktopServicer(desktop, UserNames(db))
    await db.close()


async def as_(who: Principal, call: Callable[[], Awaitable[T]]) -> T:
    """`call` as an RPC the guard let `who` make."""

    async def authenticated() -> T:
        guard._principal.set(who)
        return await call()

    return await contextvars.copy_context().run(authenticated)


def listing(s: DesktopServicer, run: str, after: int = 0, limit: int = 0) -> Any:
    request = desktop_pb2.ListRecordingRequest(run_id=run, after_seq=after, limit=limit)
    return lambda: s.ListRecording(request, cast(Any, None))


def frame(s: DesktopServicer, run: str, seq: int) -> Any:
    request = desktop_pb2.GetRecordingFrameRequest(run_id=run, seq=seq)
    return lambda: s.GetRecordingFrame(request, cast(Any, None))


async def test_pages_follow_each_other_to_the_last_frame(
    store: Store, servicer: DesktopServicer
) -> None:
    run = finished_run(store)
    add_frames(store.engine, run, [0.0, 0.5, 1.0, 1.5, 2.0], (64, 48))
    first = await as_(OLIVE, listing(servicer, run, limit=2))
    assert [f.seq for f in first.frames] == [1, 2] and first.next_seq == 2 and first.total == 5
    second = await as_(OLIVE, listing(servicer, run, after=first.next_seq, limit=2))
    assert [f.seq for f in second.frames] == [3, 4] and second.next_seq == 4
    last = await as_(OLIVE, listing(servicer, run, after=second.next_seq, limit=2))
    assert [f.seq for f in last.frames] == [5] and last.next_seq == 0
    whole = await as_(OLIVE, listing(servicer, run))  # limit 0: the default page
    assert [f.seq for f in whole.frames] == [1, 2, 3, 4, 5] and whole.next_seq == 0
    f = whole.frames[0]
    assert (f.width, f.height, f.held_by, f.media_type) == (64, 48, "agent", "image/jpeg")
    assert whole.frames[-1].held_by == "person" and f.captured_at.seconds > 0
    assert [x.captured_at.ToNanoseconds() for x in whole.frames] == sorted(
        x.captured_at.ToNanoseconds() for x in whole.frames
    )
    # More than a page may hold is one page at most, not a refusal.
    big = await as_(OLIVE, listing(servicer, run, limit=RECORDING_PAGE_MAX * 10))
    assert len(big.frames) == 5

    got = await as_(OLIVE, frame(servicer, run, 3))
    assert got.data.startswith(b"\xff\xd8") and content_sha256(got.data) == got.frame.sha256
    assert got.frame.seq == 3 and got.frame.size == len(got.data)


async def test_only_the_runs_owner_reads_its_recording(
    store: Store, servicer: DesktopServicer
) -> None:
    run = finished_run(store)
    add_frames(store.engine, run, [0.0, 0.5], (32, 24))
    for who in (MALLORY, ADMIN):  # an admin too, as for the run's artifacts
        with pytest.raises(NotFoundError, match=f"no run '{run}'"):
            await as_(who, listing(servicer, run))
        with pytest.raises(NotFoundError, match=f"no run '{run}'"):
            await as_(who, frame(servicer, run, 1))
    with pytest.raises(NotFoundError, match="no recorded frame 9"):
        await as_(OLIVE, frame(servicer, run, 9))
    with pytest.raises(InvalidArgumentError, match="seq"):
        await as_(OLIVE, frame(servicer, run, 0))
    with pytest.raises(InvalidArgumentError, match="run_id"):
        await as_(OLIVE, listing(servicer, "../x"))
    # A run that recorded nothing is an empty recording, not an error.
    quiet = finished_run(store)
    empty = await as_(OLIVE, listing(servicer, quiet))
    assert list(empty.frames) == [] and empty.total == 0 and empty.next_seq == 0
