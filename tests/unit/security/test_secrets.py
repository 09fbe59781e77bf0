"""Sealed secrets in process: a value opens only for its owner and name, and a missing or
damaged key file is one line. Stores and rotation: tests/integration/security/test_secrets.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.security import secret_box
from coordinator.security.secret_box import SecretBox
from shared.errors import FailedPreconditionError
from tests.integration.security.test_secrets import LEGACY, VALUE, _box, _mode


def test_a_sealed_value_opens_only_for_its_owner_and_name(tmp_path: Path) -> None:
    key, box = _box(tmp_path)
    assert _mode(key) == 0o600
    assert not secret_box.create_key_file(key)  # never replaced
    sealed = box.seal("usr_a", "PIN", VALUE)
    assert VALUE not in sealed and VALUE.encode() not in sealed.encode()
    assert box.open("usr_a", "PIN", sealed) == VALUE
    for owner, name in (("usr_b", "PIN"), ("usr_a", "PIN2")):
        with pytest.raises(FailedPreconditionError, match="does not open"):
            box.open(owner, name, sealed)
    other = SecretBox((secret_box.new_key(),))
    with pytest.raises(FailedPreconditionError, match="does not open"):
        other.open("usr_a", "PIN", sealed)
    assert box.open("usr_a", "OLD", LEGACY) == LEGACY  # stored before sealing existed


def test_a_missing_or_damaged_key_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(FailedPreconditionError, match="no secrets key there") as missing:
        SecretBox.load(tmp_path / "nope.key")
    (tmp_path / "bad.key").write_text("dfk1:AAAA\n")
    with pytest.raises(FailedPreconditionError, match="not a deskfleet secrets key") as bad:
        SecretBox.load(tmp_path / "bad.key")
    for caught in (missing, bad):
        assert "\n" not in str(caught.value)
