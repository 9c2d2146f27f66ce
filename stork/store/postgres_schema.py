"""The shared store's tables (PostgreSQL): SQLite's (`stork.store.sqlite`) plus the lease
and hosts of a running job, the node of each attempt, and the nodes' heartbeats. Versioned:
`schema_version` holds SCHEMA_VERSION; MIGRATIONS[N] takes a database from N to N + 1."""

from __future__ import annotations

SCHEMA_VERSION = 1

SCHEMA = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE jobs (
        id BIGSERIAL PRIMARY KEY,
        owner_uid INTEGER NOT NULL,
        owner TEXT NOT NULL,
        state TEXT NOT NULL,
        spec TEXT NOT NULL,
        dap_type TEXT NOT NULL,
        src_url TEXT NOT NULL,
        dest_url TEXT NOT NULL,
        submitted_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        next_attempt_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        last_error TEXT,
        failure_kind TEXT,
        bytes_done BIGINT NOT NULL DEFAULT 0,
        rate_mbps DOUBLE PRECISION NOT NULL DEFAULT 0,
        pid INTEGER,
        result TEXT NOT NULL DEFAULT '{}',
        files_total INTEGER NOT NULL DEFAULT 0,
        files_done INTEGER NOT NULL DEFAULT 0,
        files_failed INTEGER NOT NULL DEFAULT 0,
        bytes_total BIGINT,
        src_host TEXT NOT NULL DEFAULT '',
        dest_host TEXT NOT NULL DEFAULT '',
        claimed_by TEXT,
        claimed_until DOUBLE PRECISION
    )""",
    "CREATE INDEX jobs_runnable ON jobs (state, next_attempt_at, id)",
    "CREATE INDEX jobs_running_src ON jobs (src_host) WHERE state = 'RUNNING'",
    "CREATE INDEX jobs_running_dest ON jobs (dest_host) WHERE state = 'RUNNING'",
    "CREATE INDEX jobs_claims ON jobs (claimed_by) WHERE state = 'RUNNING'",
    """CREATE TABLE events (
        seq BIGSERIAL PRIMARY KEY,
        job_id BIGINT NOT NULL,
        time DOUBLE PRECISION NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX events_job ON events (job_id, seq)",
    """CREATE TABLE history (
        id BIGSERIAL PRIMARY KEY,
        time DOUBLE PRECISION NOT NULL,
        src_host TEXT NOT NULL,
        dest_host TEXT NOT NULL,
        arguments TEXT NOT NULL,
        kind TEXT NOT NULL,
        streams INTEGER NOT NULL,
        throughput_mbps DOUBLE PRECISION NOT NULL,
        bytes_moved BIGINT NOT NULL DEFAULT 0,
        duration_s DOUBLE PRECISION NOT NULL DEFAULT 0,
        model TEXT NOT NULL DEFAULT '',
        samples TEXT NOT NULL DEFAULT '[]',
        job_id BIGINT
    )""",
    "CREATE INDEX history_pair ON history (src_host, dest_host, kind, time)",
    """CREATE TABLE attempts (
        job_id BIGINT NOT NULL,
        number INTEGER NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        src_url TEXT NOT NULL,
        dest_url TEXT NOT NULL,
        module TEXT NOT NULL,
        ended_at DOUBLE PRECISION,
        exit_code INTEGER,
        outcome TEXT,
        error TEXT,
        bytes_done BIGINT NOT NULL DEFAULT 0,
        node TEXT,
        PRIMARY KEY (job_id, number)
    )""",
    """CREATE TABLE files (
        job_id BIGINT NOT NULL,
        idx INTEGER NOT NULL,
        src_url TEXT NOT NULL,
        dest_url TEXT NOT NULL,
        rel_path TEXT NOT NULL,
        size_bytes BIGINT,
        state TEXT NOT NULL DEFAULT 'PENDING',
        bytes_done BIGINT NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        failures INTEGER NOT NULL DEFAULT 0,
        next_attempt_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        last_error TEXT,
        failure_kind TEXT,
        checksum TEXT,
        chunk TEXT,
        in_doubt INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (job_id, idx)
    )""",
    "CREATE INDEX files_state ON files (job_id, state, idx)",
    """CREATE TABLE transfers (
        id BIGSERIAL PRIMARY KEY,
        time DOUBLE PRECISION NOT NULL,
        src_host TEXT NOT NULL,
        dest_host TEXT NOT NULL,
        rtt_s DOUBLE PRECISION,
        bandwidth_bps DOUBLE PRECISION,
        buffer_bytes BIGINT,
        file_size_bytes DOUBLE PRECISION NOT NULL,
        file_count INTEGER NOT NULL,
        cc INTEGER NOT NULL,
        p INTEGER NOT NULL,
        pp INTEGER NOT NULL,
        fast INTEGER NOT NULL,
        bytes_moved BIGINT NOT NULL,
        duration_s DOUBLE PRECISION NOT NULL,
        throughput_mbps DOUBLE PRECISION NOT NULL,
        sharing INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        origin TEXT NOT NULL
    )""",
    "CREATE INDEX transfers_pair ON transfers (src_host, dest_host, time)",
    """CREATE TABLE nodes (
        name TEXT PRIMARY KEY,
        pid INTEGER NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL
    )""",
)

# version N -> N + 1 (none yet: version 1 is the first)
MIGRATIONS: dict[int, tuple[str, ...]] = {}
