"""The shared store's tables (PostgreSQL): SQLite's (`stork.store.tables`, in PostgreSQL's
types) plus the lease and hosts of a running job, the node of each attempt, and the nodes'
heartbeats. Versioned: `schema_version` holds SCHEMA_VERSION; MIGRATIONS[N] takes a
database from N to N + 1."""

from __future__ import annotations

from stork.store import tables

SCHEMA_VERSION = 3

SCHEMA = (
    tables.SCHEMA_VERSION_TABLE,
    tables.jobs_table(tables.POSTGRES, extra=(
        "src_host TEXT NOT NULL DEFAULT ''",
        "dest_host TEXT NOT NULL DEFAULT ''",
        "claimed_by TEXT",
        "claimed_until DOUBLE PRECISION",
    )),
    tables.JOBS_RUNNABLE_INDEX,
    "CREATE INDEX jobs_running_src ON jobs (src_host) WHERE state = 'RUNNING'",
    "CREATE INDEX jobs_running_dest ON jobs (dest_host) WHERE state = 'RUNNING'",
    "CREATE INDEX jobs_claims ON jobs (claimed_by) WHERE state = 'RUNNING'",
    *tables.events_tables(tables.POSTGRES),
    *tables.history_tables(tables.POSTGRES),
    tables.attempts_table(tables.POSTGRES, extra=("node TEXT",)),
    *tables.files_tables(tables.POSTGRES),
    *tables.transfers_tables(tables.POSTGRES),
    tables.transfers_spread(tables.POSTGRES),
    tables.transfers_job(tables.POSTGRES),
    """CREATE TABLE nodes (
        name TEXT PRIMARY KEY,
        pid INTEGER NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL
    )""",
)

# version N -> N + 1
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (tables.transfers_spread(tables.POSTGRES),),  # 1 -> 2: a flow stretch's spread
    2: (tables.transfers_job(tables.POSTGRES),),  # 2 -> 3: the job of a transfer log row
}
