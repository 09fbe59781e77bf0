"""The evidence key in process: `init` writes it once (0600) and keeps it, `evidence-key`
prints the public half that signatures check against, and a missing, readable or damaged key
file is one line naming the file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature

from coordinator.app import cli
from coordinator.security import evidence_key
from shared import evidence_keys
from shared.errors import FailedPreconditionError


def _init(tmp_path: Path, *extra: str) -> str:
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    assert (
        cli.main(["init", "--db", url, "--admin-token-file", str(tmp_path / "a.tok"), *extra]) == 0
    )
    return url


def test_init_writes_the_key_once_and_evidence_key_prints_its_public_half(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _init(tmp_path)
    path = tmp_path / evidence_key.KEY_FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = capsys.readouterr().out
    key = evidence_key.load(path)
    assert f"evidence key {key.fingerprint} written to {path}" in first

    _init(tmp_path)  # again: the key is kept, byte for byte
    assert f"evidence key {key.fingerprint} kept in {path}" in capsys.readouterr().out
    assert evidence_key.load(path).fingerprint == key.fingerprint

    assert cli.main(["evidence-key", "--db", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fingerprint"] == key.fingerprint and doc["file"] == str(path)
    public = evidence_keys.load_public_pem(doc["publicKeyPem"].encode(), "printed key")
    assert evidence_keys.fingerprint(public) == key.fingerprint
    # What is printed is what checks the key's signatures, and nothing else's.
    public.verify(key.sign(b"manifest"), b"manifest")
    with pytest.raises(InvalidSignature):
        public.verify(key.sign(b"manifest"), b"manifesT")

    assert cli.main(["evidence-key", "--db", url]) == 0
    plain = capsys.readouterr().out
    assert plain.startswith(f"evidence key {key.fingerprint} ({path})\n")
    assert doc["publicKeyPem"] in plain


def test_a_named_key_file_is_used_and_postgresql_needs_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared_key = tmp_path / "keys" / "fleet-evidence.key"
    _init(tmp_path, "--evidence-key-file", str(shared_key))
    assert shared_key.exists() and not (tmp_path / evidence_key.KEY_FILE_NAME).exists()
    capsys.readouterr()
    url = "postgresql://deskfleet@127.0.0.1:1/deskfleet"
    assert cli.main(["evidence-key", "--db", url]) == 1
    err = capsys.readouterr().err
    assert err == "deskfleet-coordinator: --evidence-key-file: required with PostgreSQL\n"


def test_a_missing_readable_or_damaged_key_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "e.key"
    with pytest.raises(FailedPreconditionError, match="no evidence key there") as missing:
        evidence_key.load(path)
    assert evidence_key.create(path)
    os.chmod(path, 0o640)
    with pytest.raises(FailedPreconditionError, match=r"readable by others \(mode 0640\)") as loose:
        evidence_key.load(path)
    os.chmod(path, 0o600)
    path.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(FailedPreconditionError, match="not an evidence key") as damaged:
        evidence_key.load(path)
    path.write_bytes(b"x" * (evidence_key.MAX_KEY_FILE_BYTES + 10))
    with pytest.raises(FailedPreconditionError, match="too large") as large:
        evidence_key.load(path)
    with pytest.raises(FailedPreconditionError, match="not a regular file") as directory:
        evidence_key.load(tmp_path)
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(FailedPreconditionError, match="not a regular file") as pipe:
        evidence_key.load(fifo)  # refused, not waited on
    for caught in (missing, loose, damaged, large, directory, pipe):
        assert "\n" not in str(caught.value)

    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    assert cli.main(["evidence-key", "--db", url, "--evidence-key-file", str(path)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_another_kind_of_key_is_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = tmp_path / "ec.key"
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    os.chmod(path, 0o600)
    with pytest.raises(FailedPreconditionError, match="not an Ed25519 key"):
        evidence_key.load(path)
    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    text = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(Exception, match="not an Ed25519 public key"):
        evidence_keys.load_public_pem(text, "pinned.pem")
