"""Queue persistence behind one interface (`JobStore`); SQLite is the embedded default."""

from __future__ import annotations

from stork.config import is_database_url
from stork.store.base import Attempt, JobStore, Outage, Transition
from stork.store.sqlite import SqliteStore

__all__ = ["Attempt", "JobStore", "Outage", "SqliteStore", "Transition", "open_store"]


def open_store(database: str, node: str = "", lease_s: float = 30.0) -> JobStore:
    """The store for a database setting: a postgresql:// URL (the shared store, for nodes
    named `node` holding leases of `lease_s`), else a SQLite file path."""
    if is_database_url(database):
        from stork.store.postgres import PostgresStore  # psycopg only when used

        return PostgresStore(database, node=node, lease_s=lease_s)
    return SqliteStore(database, node=node)
