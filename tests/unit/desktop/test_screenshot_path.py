"""The screenshot path without its copies, in process: the frame converted once from mss's
buffer, hashed once, sent from memory on the first send and from its file on a resend."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from PIL import Image

from worker_agent import actions
from worker_agent.action_log import ActionLog, ReceiptRecord
from worker_agent.actions import Artifact
from worker_agent.desktop.screen import encode, to_image


def _frame(width: int, height: int) -> bytearray:
    """A BGRX frame as mss fills it, every pixel different, the padding byte not zero."""
    data = bytearray(os.urandom(width * height * 4))
    data[3::4] = b"\x7f" * (width * height)
    return data


def test_the_frame_converted_from_the_buffer_is_the_one_converted_from_a_copy() -> None:
    raw = _frame(61, 37)
    old = Image.frombytes("RGB", (61, 37), bytes(raw), "raw", "BGRX")
    new = to_image(raw, (61, 37))
    assert new.mode == "RGB" and new.size == (61, 37)
    assert new.tobytes() == old.tobytes()
    b, g, r = raw[0], raw[1], raw[2]
    assert new.getpixel((0, 0)) == (r, g, b)
    assert encode(new, "png") == encode(old, "png")


def test_an_artifact_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = hashlib.sha256

    def counting(data: bytes) -> object:
        calls.append(len(data))
        return real(data)

    monkeypatch.setattr(actions.hashlib, "sha256", counting)
    a = Artifact("image/png", b"pixels", 2, 3)
    assert a.ref()["sha256"] == a.sha256 == real(b"pixels").hexdigest()
    assert a.sha256 == a.ref()["sha256"]
    assert calls == [6]


def _receipt(log: ActionLog, data: bytes) -> ReceiptRecord:
    sha = hashlib.sha256(data).hexdigest()
    kept = log.keep_artifact(sha, "image/png", data, 4, 5)
    return ReceiptRecord("act_1", "run_1", "att_1", 1, "SUCCEEDED", "{}", "", 1.0, 2.0, (kept,))


def test_the_first_send_takes_the_bytes_from_memory_a_resend_from_the_file(
    tmp_path: Path,
) -> None:
    log = ActionLog(tmp_path / "log")
    data = b"\x89PNG not really" * 100
    receipt = _receipt(log, data)
    [stored] = receipt.artifacts
    from_file = receipt.to_proto()
    from_memory = receipt.to_proto({stored.sha256: data})
    assert from_memory == from_file and from_file.artifacts[0].data == data
    # Given the bytes, the file is not read: gone, the artifact still goes out.
    Path(stored.path).unlink()
    assert receipt.to_proto({stored.sha256: data}).artifacts[0].data == data
    assert list(receipt.to_proto().artifacts) == []  # a resend without the file: said, dropped
