"""How a worker named by a person is found (`store.workers.resolve`), in process: by its id,
by a name one enrolled worker has, a revoked namesake giving way to an enrolled one, and an
ambiguous or unknown name refused in one line. The commands are
tests/integration/cli/test_names.py."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.orm import Session

from coordinator.store import workers as worker_queries
from shared.errors import InvalidArgumentError, NotFoundError
from tests.harness.ledger import Store


def resolved(store: Store, ref: str) -> str:
    found: str = store.read(lambda s: worker_queries.resolve(s, ref, time.time()).id)
    return found


def test_a_worker_is_found_by_its_id_or_its_unique_name(store: Store) -> None:
    desk = store.worker("unit-desk")
    assert resolved(store, desk) == desk
    assert resolved(store, "unit-desk") == desk
    assert resolved(store, " unit-desk ") == desk  # as pasted


def test_an_ambiguous_name_lists_its_candidates_and_a_revoked_namesake_gives_way(
    store: Store,
) -> None:
    first, second = store.worker("unit-twin"), store.worker("unit-twin")
    with pytest.raises(InvalidArgumentError) as refused:
        resolved(store, "unit-twin")
    message = str(refused.value)
    assert message.startswith("2 workers are named 'unit-twin': ")
    assert f"{first} (online, last seen 20" in message and f"{second} (online" in message
    assert message.endswith("; pass the id") and "\n" not in message
    with Session(store.engine) as s, s.begin():
        worker_queries.set_state(s, first, "revoked", revoked_at=time.time())
    assert resolved(store, "unit-twin") == second
    assert resolved(store, first) == first  # by its id, the revoked one is still shown


def test_an_unknown_worker_is_one_line_naming_id_or_name(store: Store) -> None:
    store.worker("unit-someone")
    with pytest.raises(NotFoundError, match=r"^no worker with id or name 'unit-nobody' \(see"):
        resolved(store, "unit-nobody")
    with pytest.raises(NotFoundError):
        resolved(store, "")
    # Refused before any query: a NUL is a store error on PostgreSQL.
    with pytest.raises(InvalidArgumentError, match=r"^worker: must not contain control"):
        resolved(store, "unit\x00desk")
