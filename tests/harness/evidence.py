"""Evidence bundles in tests: a run with every kind of evidence (journal, receipts, an artifact,
recorded frames that are real JPEGs), and a tar rewritten with one thing changed."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageDraw
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from coordinator.store.models import ArtifactRow, PrincipalRow, RecordingFrameRow, RunRow
from shared.receipts import content_sha256
from tests.harness.ledger import Store, apply_all, in_flight, receipt

OWNER_ID = "owner"  # the ledger store's runs belong to this principal


def jpeg(width: int, height: int, shade: int, label: str) -> bytes:
    """A real JPEG: a shaded screen with a label, as a recorded frame might show."""
    image = Image.new("RGB", (width, height), (shade, 255 - shade, 128))
    ImageDraw.Draw(image).text((4, 4), label, fill=(0, 0, 0))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=80)
    return out.getvalue()


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def finished_run(store: Store, actions: int = 2) -> str:
    """A plan run whose actions all succeeded, each with its receipt, owned by `olive`."""
    with Session(store.engine) as s, s.begin():
        if s.get(PrincipalRow, OWNER_ID) is None:
            s.add(
                PrincipalRow(
                    id=OWNER_ID,
                    name="olive",
                    role="owner",
                    secret_hash=f"h-{time.time_ns()}",
                    created_at=time.time(),
                )
            )
    store.worker("w")
    run_id = store.submit(actions)
    while flying := [o for o in in_flight(store) if o.run_id == run_id]:
        store.run(
            apply_all([receipt(o, result_json='{"echo": "\\u0000 \\u00e9"}') for o in flying])
        )
    return run_id


def add_artifact(engine: Engine, run_id: str, data: bytes) -> str:
    digest = content_sha256(data)
    with Session(engine) as s, s.begin():
        s.add(
            ArtifactRow(
                run_id=run_id,
                sha256=digest,
                action_id="act_x",
                role="screenshot",
                media_type="image/png",
                size=len(data),
                width=8,
                height=8,
                data=data,
                created_at=time.time(),
            )
        )
    return digest


def add_frames(engine: Engine, run_id: str, times: list[float], size: tuple[int, int]) -> None:
    """Recorded frames at `times` (seconds after now), the second half held by a person."""
    start = time.time()
    with Session(engine) as s, s.begin():
        run = s.get(RunRow, run_id)
        assert run is not None
        for i, offset in enumerate(times, 1):
            data = jpeg(*size, shade=(40 * i) % 256, label=f"frame {i}")
            s.add(
                RecordingFrameRow(
                    run_id=run_id,
                    seq=i,
                    owner_id=run.owner_id,
                    worker_id="wkr_x",
                    display=0,
                    held_by="agent" if i <= len(times) // 2 else "person",
                    captured_at=start + offset,
                    media_type="image/jpeg",
                    width=size[0],
                    height=size[1],
                    size=len(data),
                    sha256=content_sha256(data),
                    data=data,
                    created_at=start + offset,
                )
            )


Change = Callable[[bytes], bytes] | None  # None: the member is left out


def rewrite(
    src: Path,
    dst: Path,
    changes: dict[str, Change] | None = None,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """`src` copied to `dst` member by member, `changes` applied, `extra` members added."""
    changes = changes or {}
    with tarfile.open(src) as old, tarfile.open(dst, "w", format=tarfile.PAX_FORMAT) as new:
        for member in old.getmembers():
            fh = old.extractfile(member)
            data = fh.read() if fh is not None else b""
            if member.name in changes:
                change = changes[member.name]
                if change is None:
                    continue
                data = change(data)
            info = tarfile.TarInfo(member.name)
            info.size, info.mtime, info.mode = len(data), member.mtime, member.mode
            new.addfile(info, io.BytesIO(data))
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            new.addfile(info, io.BytesIO(data))
    return dst


def flip(offset: int | None = None) -> Callable[[bytes], bytes]:
    """One byte changed (its lowest bit), at `offset` or in the middle."""

    def change(data: bytes) -> bytes:
        at = len(data) // 2 if offset is None else offset
        return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]

    return change


def members(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()


def member(path: Path, name: str) -> bytes:
    with tarfile.open(path) as tar:
        fh = tar.extractfile(name)
        assert fh is not None
        return fh.read()
