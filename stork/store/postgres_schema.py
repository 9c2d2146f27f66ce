"""The shared store's tables (PostgreSQL): SQLite's (`stork.store.tables`, in PostgreSQL's
types) plus the lease and hosts of a running job, the node of each attempt, and the nodes'
heartbeats. Versioned: `schema_version` holds SCHEMA_VERSION; MIGRATIONS[N] takes a
database from N to N + 1."""

from __future__ import annotations

from stork.store.tables import (
    JOBS_RUNNABLE_INDEX,
    POSTGRES,
    SCHEMA_VERSION_TABLE,
    attempts_table,
    events_tables,
    files_tables,
    history_tables,
    jobs_table,
    transfers_tables,
)

SCHEMA_VERSION = 1

SCHEMA = (
    SCHEMA_VERSION_TABLE,
    jobs_table(POSTGRES, extra=(
        "src_host TEXT NOT NULL DEFAULT ''",
        "dest_host TEXT NOT NULL DEFAULT ''",
        "claimed_by TEXT",
        "claimed_until DOUBLE PRECISION",
    )),
    JOBS_RUNNABLE_INDEX,
    "CREATE INDEX jobs_running_src ON jobs (src_host) WHERE state = 'RUNNING'",
    "CREATE INDEX jobs_running_dest ON jobs (dest_host) WHERE state = 'RUNNING'",
    "CREATE INDEX jobs_claims ON jobs (claimed_by) WHERE state = 'RUNNING'",
    *events_tables(POSTGRES),
    *history_tables(POSTGRES),
    attempts_table(POSTGRES, extra=("node TEXT",)),
    *files_tables(POSTGRES),
    *transfers_tables(POSTGRES),
    """CREATE TABLE nodes (
        name TEXT PRIMARY KEY,
        pid INTEGER NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL
    )""",
)

# version N -> N + 1 (none yet: version 1 is the first)
MIGRATIONS: dict[int, tuple[str, ...]] = {}
