"""User names beside the ids that responses carry (a run's owner, who answered an approval,
who engaged a kill switch), so that people read names while scripts keep the ids."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from coordinator.servicers.guard import current_principal
from coordinator.store import Database, principals as principal_queries


class UserNames:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def fill(self, messages: Sequence[Message], *fields: tuple[str, str]) -> None:
        """Set each message's name field from its id field, for each (id field, name field)
        pair: one store read for a whole response, whatever its rows. An id of no user (a
        worker, a program's principal that is gone) leaves its name empty."""
        me = current_principal()
        names = {me.id: me.name}  # most answers are about the caller's own: no read at all
        ids = {getattr(m, id_field) for m in messages for id_field, _ in fields}
        ids -= {"", *names}
        if ids:
            names.update(await self._db.read(principal_queries.names_of, ids))
        for m in messages:
            for id_field, name_field in fields:
                setattr(m, name_field, names.get(getattr(m, id_field), ""))
