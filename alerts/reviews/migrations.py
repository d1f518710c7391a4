"""Versioned schema migrations of the review database, applied at start-up by every replica.

Two or more review-service replicas share one PostgreSQL and may start at once: the migration
runs in one transaction under a PostgreSQL advisory lock, so exactly one replica applies each
step and the others find it done. SQLite (one replica, one writer) needs no lock.

Rules for a new step: append a `Migration` with the next version that brings a database of the
previous version to the new one (ALTER, never a re-create; SQLite cannot alter a table's constraints,
so a step that must copies the table once, in the same transaction), and update the `Review` model to
the result; `tests/unit/alerts/test_reviews_migrations.py` checks that migrating an empty database
gives exactly the model's columns. A database newer than this code is refused, not downgraded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Column, Connection, Integer, MetaData, Table, UniqueConstraint, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.schema import CreateColumn

from tidescale.contracts.errors import TidescaleError

VERSION_TABLE = "tidescale_schema_version"
# pg_advisory_xact_lock key: "tidescal" as a 64-bit integer, so no other tool picks it by chance.
ADVISORY_LOCK_KEY = int.from_bytes(b"tidescal", "big") & 0x7FFFFFFFFFFFFFFF

_versions = Table(VERSION_TABLE, MetaData(), Column("version", Integer, primary_key=True))


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Connection, MetaData], None]


def _create_reviews(conn: Connection, model: MetaData) -> None:
    model.tables["reviews"].create(conn, checkfirst=True)


def _add_columns(*names: str) -> Callable[[Connection, MetaData], None]:
    """ALTER TABLE reviews ADD each column of *names* it lacks, as the model declares it (a database
    created at version 1 by this code already has them: step 1 creates the table from the model)."""

    def apply(conn: Connection, model: MetaData) -> None:
        table = model.tables["reviews"]
        have = {c["name"] for c in inspect(conn).get_columns("reviews")}
        for name in names:
            if name not in have:
                ddl = CreateColumn(table.c[name]).compile(dialect=conn.dialect)
                conn.execute(text(f"ALTER TABLE reviews ADD COLUMN {ddl}"))

    return apply


def _key_has(conn: Connection, name: str, columns: list[str]) -> bool:
    return any(u["name"] == name and list(u["column_names"]) == columns
               for u in inspect(conn).get_unique_constraints("reviews"))


def _rebuild_sqlite(conn: Connection, table: Table) -> None:
    """The table as *table* declares it, with every row and id: SQLite's way to change a constraint.
    Columns the old table lacks take their server default."""
    have = {c["name"] for c in inspect(conn).get_columns("reviews")}
    old_indexes = [i["name"] for i in inspect(conn).get_indexes("reviews") if i["name"]]
    conn.execute(text("ALTER TABLE reviews RENAME TO reviews_before_rebuild"))
    for index in old_indexes:  # index names are per database: the new table's would clash
        conn.execute(text(f'DROP INDEX "{index}"'))
    table.create(conn)
    kept = ", ".join(f'"{c.name}"' for c in table.columns if c.name in have)
    conn.execute(text(f"INSERT INTO reviews ({kept}) SELECT {kept} FROM reviews_before_rebuild"))
    conn.execute(text("DROP TABLE reviews_before_rebuild"))


def _unique_key(name: str, add: str) -> Callable[[Connection, MetaData], None]:
    """Add the column *add* and rebuild the unique constraint *name* to the model's columns (a
    database created by this code at step 1 has both already)."""

    def apply(conn: Connection, model: MetaData) -> None:
        table = model.tables["reviews"]
        [key] = [c for c in table.constraints if isinstance(c, UniqueConstraint) and c.name == name]
        columns = [c.name for c in key.columns]
        if _key_has(conn, name, columns):
            return
        if conn.dialect.name == "sqlite":
            _rebuild_sqlite(conn, table)
            return
        _add_columns(add)(conn, model)
        conn.execute(text(f'ALTER TABLE reviews DROP CONSTRAINT IF EXISTS "{name}"'))
        # Written out: SQLAlchemy's AddConstraint would mark the model's constraint as added by ALTER, and
        # a later CREATE TABLE in this process would leave it out.
        conn.execute(text(f'ALTER TABLE reviews ADD CONSTRAINT "{name}" UNIQUE ({", ".join(columns)})'))

    return apply


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the reviews table (tidescale 0.1)", _create_reviews),
    Migration(2, "startsAt as sent (the clock-skew clamp is kept per alert instance) and the profile fetch "
                 "still to do (resumed at start-up)", _add_columns("sent_starts_at", "profile_pending")),
    Migration(3, "the cluster of the alert in the review key, so clusters behind one Alertmanager keep their "
                 "reviews apart (existing reviews: cluster '')", _unique_key("uq_review_key", "cluster")),
)
LATEST = MIGRATIONS[-1].version


def current_version(conn: Connection) -> int:
    """The applied version; a 0.1 database (reviews table, no version table) counts as version 1."""
    tables = set(inspect(conn).get_table_names())
    if VERSION_TABLE in tables:
        return int(conn.execute(select(_versions.c.version).order_by(_versions.c.version.desc())).scalar() or 0)
    return 1 if "reviews" in tables else 0


def migrate(engine: Engine, model: MetaData) -> int:
    """Bring the database to LATEST (*model*: the store's tables as of LATEST); returns the version
    it was at. Refuses a newer database."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
        before = current_version(conn)
        if before > LATEST:
            raise TidescaleError(f"the review database is at schema version {before}, newer than this "
                                 f"tidescale knows ({LATEST}): run the newer tidescale, or restore a backup")
        _versions.create(conn, checkfirst=True)
        if before and conn.execute(select(_versions.c.version)).first() is None:
            conn.execute(_versions.insert().values(version=before))  # a 0.1 database: record its baseline
        for step in MIGRATIONS[before:]:
            step.apply(conn, model)
            conn.execute(_versions.insert().values(version=step.version))
        return before
