"""Queue persistence behind one interface (`JobStore`); SQLite is the embedded default."""

from __future__ import annotations

from stork.store.base import Attempt, JobStore, Outage, Transition
from stork.store.sqlite import SqliteStore

__all__ = ["Attempt", "JobStore", "Outage", "SqliteStore", "Transition", "open_store"]


def open_store(database: str) -> JobStore:
    """The store for a database setting (a path: SQLite)."""
    return SqliteStore(database)
