"""Everything the coordinator keeps lives behind this package: models, migrations, queries.

Domain modules open a unit of work with `Database.write()` / `Database.read()` and pass the
session to the query functions in `queries` modules; nothing else imports SQLAlchemy.
"""

from coordinator.store.engine import Database, SchemaError

__all__ = ["Database", "SchemaError"]
