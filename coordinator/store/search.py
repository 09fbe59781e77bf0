"""The SQLite journal search index, filled behind the journal (see `coordinator/runs/indexer.py`).

`journal_fts` (FTS5 trigram, external content) holds exactly the events up to the mark
`journal_search.indexed_to`, a rowid: a batch adds the events past it and moves it in one
transaction. SQLite has one writer, so rowids are given out in commit order and no event can
commit below the mark after it moved. Searches read the index up to the mark and the events
past it directly (`runs.journal_candidates`).
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session


def indexed_to(s: Session) -> int:
    return int(s.execute(text("SELECT indexed_to FROM journal_search")).scalar_one())


def last_event(s: Session) -> int:
    return int(s.execute(text("SELECT coalesce(max(rowid), 0) FROM journal")).scalar_one())


def index_next(s: Session, limit: int) -> int:
    """Index up to `limit` events past the mark and move it past them; how many."""
    mark = indexed_to(s)
    top = s.execute(
        text(
            "SELECT max(rowid), count(*) FROM"
            " (SELECT rowid FROM journal WHERE rowid > :mark ORDER BY rowid LIMIT :limit)"
        ),
        {"mark": mark, "limit": limit},
    ).one()
    if not top[1]:
        return 0
    s.execute(
        text(
            "INSERT INTO journal_fts(rowid, data)"
            " SELECT rowid, data FROM journal WHERE rowid > :mark AND rowid <= :top"
        ),
        {"mark": mark, "top": top[0]},
    )
    s.execute(text("UPDATE journal_search SET indexed_to = :top"), {"top": top[0]})
    return int(top[1])
