"""HTCondor-style configuration, read once into a frozen, validated Settings object.

Syntax: ``NAME = value`` lines, ``#`` comments, ``$(NAME)`` references to other knobs and
``$ENV(VAR)`` references to the environment, expanded after the whole file is read (as
HTCondor does). Sources, later winning: built-in defaults, the config file, then
``_STORK_<NAME>`` environment variables (like HTCondor's ``_CONDOR_<NAME>``), where NAME
is the knob without its ``STORK_`` prefix (``_STORK_MAX_NUM_JOBS=4``) or a whole knob name
of another family.

Each knob is marked live or restart-only (`Reload`); on SIGHUP stork_server loads the file
again and runs with `reload_plan(running, reloaded).settings`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any

from stork.errors import ArgumentsError, ConfigError
from stork.urls import parse_hostport

ENV_CONFIG = "STORK_CONFIG"
ENV_OVERRIDE_PREFIX = "_STORK_"


def _parse_int_min(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _parse_float_min(minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
        if not value >= minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _parse_str(text: str) -> str:
    return text


def _parse_path(text: str) -> str:
    if text and not os.path.isabs(text):
        raise ValueError(f"expected an absolute path, got {text!r}")
    return text


def is_database_url(database: str) -> bool:
    """Whether a database setting names a PostgreSQL server (a URL), not a SQLite file."""
    return database.startswith(("postgresql://", "postgres://"))


def _parse_database(text: str) -> str:
    """An absolute SQLite file path, or a postgresql:// URL (the shared store)."""
    if is_database_url(text):
        return text
    if "://" in text:
        raise ValueError(f"expected an absolute path or a postgresql:// URL, got {text!r}")
    return _parse_path(text)


def _parse_address(text: str) -> str:
    """HOST:PORT (``:PORT`` for loopback) -> the normalized string; empty stays empty."""
    if not text:
        return ""
    return str(parse_hostport(text))


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1"):
        return True
    if value in ("false", "no", "0"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


# The names of stork.tuning.OPTIMIZERS (a test keeps them equal): listed here so that
# reading the configuration or a submit file does not import scikit-learn.
OPTIMIZER_NAMES = ("harp", "eos", "asm", "dw", "dw-interval", "climb", "harp-climb",
                   "asm-climb")
# those of them that are controllers of a running flow (`stork.tuning.online`): a job
# that names one is tuned while it moves on the engine (`stork.server.flow_tuning`)
ONLINE_OPTIMIZERS = ("climb", "harp-climb", "asm-climb")
# EOS_SAMPLING's choices: `stork.tuning.strategies.STRATEGIES` (kept here as names, as the
# optimizers' are: a test checks they match)
SAMPLING_NAMES = ("guided", "doubling", "dw")


def _parse_size_knob(text: str) -> int:
    from stork.transfer.options import parse_size

    try:
        return parse_size(text.strip())
    except ArgumentsError as exc:
        raise ValueError(str(exc)) from None


def _parse_fraction(text: str) -> float:
    value = _parse_float_min(0.0)(text)
    if value >= 1:
        raise ValueError(f"must be below 1, got {value}")
    return value


def _parse_fraction_incl(text: str) -> float:
    value = _parse_float_min(0.0)(text)
    if value > 1:
        raise ValueError(f"must be between 0 and 1, got {value}")
    return value


_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*\$?$")


def _parse_user(text: str) -> str:
    """A user name (or numeric uid) as useradd would accept it."""
    if not _USER.match(text):
        raise ValueError(f"expected a user name, got {text!r}")
    return text


def _parse_level(text: str) -> str:
    level = text.upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ValueError(f"expected DEBUG, INFO, WARNING or ERROR, got {text!r}")
    return level


class Reload(Enum):
    """What stork_server does with a knob whose value changed when SIGHUP re-reads the file."""

    LIVE = "live"  # read through the current Settings on each use: applied at once
    RESTART = "restart"  # bound at start (a socket, a pool, a file): logged, kept until restart


LIVE = Reload.LIVE
RESTART = Reload.RESTART


@dataclass(frozen=True)
class Knob:
    name: str
    field: str
    default: str
    parse: Callable[[str], Any]
    reload: Reload
    doc: str

    @property
    def live(self) -> bool:
        return self.reload is Reload.LIVE


# The Reload mark says how stork_server uses each knob (see `reload_plan`). RESTART: the daemon
# binds it once at start: sockets, addresses, files it opens or reads once, pool sizes and the
# task matrices built in __init__. LIVE: read through the Settings the daemon currently holds
# (Dispatcher.settings, EosService.settings, Daemon.settings) on each use.
KNOBS: tuple[Knob, ...] = (
    Knob("STORK_STATE_DIR", "state_dir", "$ENV(HOME)/.stork", _parse_path, RESTART,
         "Directory for the job database, spool files and the pid file."),
    Knob("STORK_DATABASE", "database", "$(STORK_STATE_DIR)/stork.db", _parse_database, RESTART,
         "SQLite database file holding the job queue, or postgresql://USER@HOST/DB (libpq URL) "
         "for a queue several stork_servers share (docs/SCALE-OUT.md)."),
    Knob("STORK_NODE_NAME", "node_name", "", _parse_str, RESTART,
         "This stork_server's name among the nodes sharing a PostgreSQL queue (unique per "
         "node); empty for the host name."),
    Knob("STORK_LEASE_TIME", "lease_s", "30", _parse_float_min(2), RESTART,
         "Seconds a node's claim on a running job lasts without renewal (renewed every "
         "quarter of it); a dead node's jobs run elsewhere after it. PostgreSQL only."),
    Knob("STORK_SOCKET", "socket", "$(STORK_STATE_DIR)/stork.sock", _parse_path, RESTART,
         "Unix socket on which the daemon serves its HTTP/JSON API."),
    Knob("STORK_API_ADDRESS", "api_address", "", _parse_address, RESTART,
         "HOST:PORT (or :PORT for loopback) for the API on TCP as well; empty for the Unix "
         "socket only."),
    # the daemon reads the token once, when it opens the TCP API
    Knob("STORK_API_TOKEN_FILE", "api_token_file", "", _parse_path, RESTART,
         "File holding the bearer token TCP clients must send; required with STORK_API_ADDRESS."),
    # the API must read these three per request from the daemon's current Settings
    Knob("STORK_API_MAX_INFLIGHT", "api_max_inflight", "1024", _parse_int_min(1), LIVE,
         "Requests the API works on at once, not counting long-poll waiters; past it the "
         "daemon answers 503 with Retry-After."),
    Knob("STORK_API_MAX_WAITERS", "api_max_waiters", "10000", _parse_int_min(0), LIVE,
         "Long-poll waiters (stork_submit --wait) the API holds at once; past it, 503."),
    Knob("STORK_API_WAIT_TIMEOUT", "api_wait_timeout_s", "60", _parse_float_min(1), LIVE,
         "Longest a long-poll request waits, in seconds, before answering \"no change yet\" "
         "(the client asks again)."),
    Knob("STORK_METRICS_OPEN", "metrics_open", "false", _parse_bool, LIVE,
         "Serve GET /metrics on the TCP API without the token to clients on a loopback "
         "address (a Prometheus on this host); every other request still needs the token."),
    Knob("STORK_PID_FILE", "pid_file", "$(STORK_STATE_DIR)/stork_server.pid", _parse_path, RESTART,
         "Pid file of the detached daemon."),
    Knob("STORK_LOG", "log", "$(STORK_STATE_DIR)/stork_server.log", _parse_path, RESTART,
         "Daemon log file."),
    # set on the root logger by stork_server's main before the daemon starts
    Knob("STORK_LOG_LEVEL", "log_level", "INFO", _parse_level, RESTART,
         "Daemon log level: DEBUG, INFO, WARNING or ERROR."),
    # live because the daemon builds a new Registry from the applied settings on SIGHUP
    Knob("STORK_MODULE_DIR", "module_dir", "", _parse_path, LIVE,
         "Directory of external transfer modules named stork.transfer.<src>-<dst>; "
         "empty for none."),
    Knob("STORK_MAX_NUM_JOBS", "max_num_jobs", "10", _parse_int_min(1), LIVE,
         "Most transfers running at once."),
    Knob("STORK_MAX_SUBMIT_BYTES", "max_submit_bytes", "16M", _parse_size_knob, LIVE,
         "Largest submit file (or API request body, which carries the files of a dataset "
         "stork_submit listed: ~30 bytes each) the daemon accepts."),
    Knob("STORK_MAX_ADS_PER_SUBMIT", "max_ads_per_submit", "10000", _parse_int_min(1), LIVE,
         "Most ads in one submit file."),
    Knob("STORK_MAX_FILES_PER_JOB", "max_files_per_job", "500000", _parse_int_min(1), LIVE,
         "Most files in one dataset job: refused at submission when the dataset is listed "
         "locally (file:// and url_list), when the daemon lists it otherwise."),
    Knob("STORK_LINK_MBPS", "link_mbps", "1000", _parse_float_min(0.001), LIVE,
         "The path's bandwidth in Mbit/s, for a dataset's size classes: bandwidth x the "
         "round trip time measured at the attempt's start is the bandwidth-delay product."),
    Knob("EOS_LINK_IS_TRUE", "eos_link_is_true", "false", _parse_bool, LIVE,
         "STORK_LINK_MBPS is the path's true bottleneck rate: the online optimizers take it, "
         "less its packets' headers (STORK_LINK_MTU), as the most a try could measure, and do "
         "not try more streams where even that rate would not be a gain past the noise. "
         "Leave false when the link's rate is a guess."),
    Knob("STORK_LINK_MTU", "link_mtu", "1500", _parse_int_min(576), LIVE,
         "The path's MTU in bytes. With EOS_LINK_IS_TRUE, the most a flow can carry is "
         "STORK_LINK_MBPS x (MTU - 52) / MTU: each packet's IP and TCP headers (TCP "
         "timestamps included) take 52 bytes of it. Set 9000 on a path of jumbo frames."),
    Knob("STORK_ENGINE", "engine", "flow", _parse_choice("flow", "batch"), LIVE,
         "How transfers move: flow (the transfer engine: a dataset's files and a large "
         "file's byte ranges kept in flight, nothing waits for a batch) or batch (the "
         "older way, kept for comparison: one tool run per batch, a large file in one "
         "run)."),
    Knob("STORK_RANGE_MIN_MB", "range_min_mb", "64", _parse_int_min(1), LIVE,
         "The smallest byte range, in MiB, a large file is sent in (STORK_ENGINE = flow): a "
         "range is 16 bandwidth-delay products of the path and at least this; a file of "
         "fewer than two ranges is sent whole."),
    Knob("STORK_PIECE_MIN_MB", "piece_min_mb", "16", _parse_int_min(0), LIVE,
         "The smallest piece, in MiB, the transfer engine cuts an item into at the end of "
         "a queue (its share of the bytes left over cc, so that the last calls end close "
         "together): 16 bandwidth-delay products of the path, or a call of a worker's "
         "rate (4 s, 2 s while an optimizer searches) when that is less, and at least "
         "this; 0: never cut. While an online optimizer searches, items are also cut "
         "into pieces of about 8 s of a worker's rate, at least this, so that a change "
         "takes effect sooner. A whole file cut so is sent as byte ranges (GridFTP ends, "
         "no sink, no checksum asked)."),
    Knob("STORK_DATASET_FAST", "dataset_fast", "true", _parse_bool, LIVE,
         "Datasets run globus-url-copy with -fast (MODE E, data channels kept between files); "
         "set false for FTP servers that are not GridFTP servers."),
    Knob("STORK_MAX_RETRY", "max_retry", "5", _parse_int_min(0), LIVE,
         "Retries of a failed transfer when the job sets no max_retries."),
    Knob("STORK_RETRY_DELAY", "retry_delay_s", "5", _parse_float_min(0), LIVE,
         "Seconds before the first retry; the delay doubles with each failure."),
    Knob("STORK_RETRY_DELAY_MAX", "retry_delay_max_s", "600", _parse_float_min(0), LIVE,
         "Longest delay between retries, in seconds."),
    Knob("STORK_MAXDELAY_INMINUTES", "max_delay_min", "60", _parse_float_min(0.01), LIVE,
         "A transfer running longer than this many minutes is killed and counted as failed."),
    # read when the shutdown starts, from the settings the daemon holds then
    Knob("STORK_SHUTDOWN_GRACE", "shutdown_grace_s", "30", _parse_float_min(0), LIVE,
         "Seconds running transfers may finish after the first SIGTERM before being requeued."),
    # the three intervals are live because the daemon reschedules its jobs on SIGHUP
    Knob("STORK_DISPATCH_INTERVAL", "dispatch_interval_s", "1", _parse_float_min(0.01), LIVE,
         "Seconds between dispatch ticks (the dispatcher also wakes at once on submit and exit)."),
    Knob("STORK_HUNG_CHECK_INTERVAL", "hung_check_interval_s", "30", _parse_float_min(0.1), LIVE,
         "Seconds between checks for transfers running past STORK_MAXDELAY_INMINUTES."),
    Knob("STORK_JOB_RETENTION_DAYS", "job_retention_days", "30", _parse_float_min(0), LIVE,
         "Finished jobs older than this many days are deleted; 0 keeps them forever."),
    Knob("STORK_CLEANUP_INTERVAL", "cleanup_interval_s", "3600", _parse_float_min(1), LIVE,
         "Seconds between removals of old finished jobs."),
    Knob("STORK_DEFAULT_STREAMS", "default_streams", "1", _parse_int_min(1), LIVE,
         "Parallel streams for GridFTP transfers that give no -p (globus-url-copy's default)."),
    # live: the EOS samplers read it per sample, the Registry is rebuilt on SIGHUP
    Knob("STORK_GLOBUS_URL_COPY", "globus_url_copy", "globus-url-copy", _parse_str, LIVE,
         "The globus-url-copy executable."),
    Knob("EOS_SAMPLER", "eos_sampler", "gridftp", _parse_choice("gridftp", "iperf3"), LIVE,
         "How the EOS measures a stream count: gridftp (the transfer's tool on the real "
         "file: a globus-url-copy slice, or gfal2's copy with the job's tokens when an end is "
         "XRootD or WebDAV) or iperf3."),
    Knob("EOS_OPTIMIZER", "eos_optimizer", "climb", _parse_choice(*OPTIMIZER_NAMES), LIVE,
         "The optimizer of (cc, p, pp) a dataset job with optimization = \"YES\" gets (a job "
         "may name one instead: optimization = \"harp\"), and a single file's YES when it "
         "tunes a running flow (climb, harp-climb, asm-climb) and the file goes as ranges; "
         "else a single file's YES is the EOS's (optimization = \"eos\" asks for it by "
         "name). climb tunes the running flow instead of probing before it (STORK_ENGINE "
         "flow; with batch a dataset's YES runs its preset); harp-climb and asm-climb start "
         "it at HARP's or ASM's choice from the transfer log. Chosen on the testbed's "
         "end-to-end runs (docs/BENCHMARKS.md 15, 15.21)."),
    Knob("EOS_SAMPLING", "eos_sampling", "guided", _parse_choice(*SAMPLING_NAMES),
         LIVE,
         "Where samples go: guided (1, 4, 16, then the fitted optimum when it promises more "
         "than the fit's error), doubling (Algorithm 2) or dw (d-w probing from "
         "EOS_MAX_STREAMS down, DW_DEPTH and DW_WIDTH)."),
    Knob("EOS_MAX_STREAMS", "eos_max_streams", "64", _parse_int_min(1), LIVE,
         "Largest stream count the EOS samples or recommends."),
    Knob("EOS_MAX_SAMPLES", "eos_max_samples", "4", _parse_int_min(3), LIVE,
         "Most samples per optimization with guided sampling."),
    Knob("EOS_SLOPE_THRESHOLD", "eos_slope_threshold", "0.02", _parse_float_min(0), LIVE,
         "Doubling stops when the gain per added stream falls below this share of the "
         "one-stream throughput."),
    Knob("EOS_TOLERANCE", "eos_tolerance", "0.03", _parse_fraction, LIVE,
         "The fewest streams whose throughput is within this share of the best are chosen."),
    Knob("DW_DEPTH", "dw_depth", "3", _parse_int_min(1), LIVE,
         "d-w probing (optimization = \"dw\" or \"dw-interval\", EOS_SAMPLING = dw): "
         "measurements of each probed level, averaged."),
    Knob("DW_WIDTH", "dw_width", "2", _parse_int_min(2), LIVE,
         "d-w probing: levels per sliding window (\"dw\"), or the stride between probed "
         "levels (\"dw-interval\")."),
    Knob("EOS_SAMPLE_SIZE", "eos_sample_size", "64M", _parse_size_knob, LIVE,
         "Bytes per GridFTP sample when the job gives no -s."),
    Knob("EOS_SAMPLING_BUDGET", "eos_sampling_budget", "0.1", _parse_float_min(0), LIVE,
         "When a transfer's size is known, its sampling may take at most this share of its "
         "predicted time (the size at the best rate the history holds for the pair, else at "
         "STORK_LINK_MBPS; after samples, at the best rate they measured); the EOS answers "
         "from the history or with EOS_DEFAULT_STREAMS without sampling when two samples "
         "do not fit (one alone compares nothing); bytes that in-place samples complete "
         "count as progress, not cost. The same share bounds an online optimizer's tries "
         "on a single file sent as ranges: a file whose predicted time is too short for "
         "one try (RAMP_S and 3 windows of 2 s) to fit in it runs untuned, at what the "
         "path's history measured best or, where EOS_LINK_IS_TRUE and the link leaves "
         "room, at the doubling of that the history has not measured (the path's next "
         "files learn whether more streams pay), else at the large-file preset. 0: no "
         "bound (every file sampled or tuned)."),
    Knob("EOS_DEFAULT_STREAMS", "eos_default_streams", "32", _parse_int_min(1), LIVE,
         "Streams the EOS answers without samples or history for the pair (a transfer too "
         "small for two samples within EOS_SAMPLING_BUDGET), and where a budgeted run "
         "without history starts sampling (then twice as many, then onwards where the gain "
         "is)."),
    Knob("EOS_ESTIMATION_MAX_S", "eos_estimation_max_s", "60", _parse_float_min(0), LIVE,
         "Longest an estimation job (dap_type = estimation) samples: it always measures (at "
         "least one sample), whatever its size; no further sample starts that would pass "
         "this. 0: no limit but EOS_MAX_SAMPLES."),
    Knob("EOS_SAMPLE_TIME", "eos_sample_time_s", "5", _parse_float_min(1), LIVE,
         "Seconds per iperf3 sample (the first second is discarded as slow start); a GridFTP "
         "sample still running after this long is stopped and judged on what it moved."),
    Knob("EOS_IPERF_PORT", "eos_iperf_port", "5201", _parse_int_min(1), LIVE,
         "Port of the iperf3 server at the destination host."),
    Knob("EOS_ALLOW_LOCAL_SOURCES", "eos_allow_local_sources", "false", _parse_bool, LIVE,
         "Whether eos_server samples file:// sources for its remote callers."),
    # eos_server drops root to this user once, at start
    Knob("EOS_SAMPLE_USER", "eos_sample_user", "nobody", _parse_user, RESTART,
         "The user whose rights eos_server's samples run with when it starts as root."),
    Knob("EOS_HISTORY_TTL", "eos_history_ttl_s", "86400", _parse_float_min(0), LIVE,
         "Seconds an optimization result stays valid for use_history."),
    Knob("EOS_SHARE_WINDOW", "eos_share_window_s", "3600", _parse_float_min(0), LIVE,
         "A sampling run also answers equal optimizations of jobs that were already queued "
         "when it ended, for this many seconds after it ended; 0 samples for every job."),
    Knob("EOS_SYMMETRIC_PAIRS", "eos_symmetric_pairs", "true", _parse_bool, LIVE,
         "Treat A -> B and B -> A as the same pair in the history (as the paper does)."),
    # sizes the EOS and estimation thread pools, made once; the EOS also selects this many
    # tasks at a time, so the value must stay the pools' size until a restart
    Knob("EOS_WORKERS", "eos_workers", "8", _parse_int_min(1), RESTART,
         "Optimizations the EOS runs at once."),
    # eos_server binds it at start; stork_server takes its port as the default port of the
    # eos_servers jobs name in opt_server, and keeps that with the rest until a restart
    Knob("EOS_API_ADDRESS", "eos_api_address", "127.0.0.1:9621", _parse_address, RESTART,
         "HOST:PORT on which a standalone eos_server listens."),
    # eos_server reads the token once at start; stork_server once, for its remote EOS clients
    Knob("EOS_API_TOKEN_FILE", "eos_api_token_file", "$(STORK_API_TOKEN_FILE)", _parse_path,
         RESTART,
         "Bearer token file for eos_server's TCP API: eos_server requires the token, "
         "stork_server sends it to a remote eos_server named by opt_server."),
    # the dispatcher's and the EOS's TaskMatrix take alpha and beta when they are built
    Knob("EOS_ALPHA", "eos_alpha", "0.5", _parse_fraction_incl, RESTART,
         "Correlation of two tasks sharing one host; also each task's penalty on its hosts."),
    Knob("EOS_BETA", "eos_beta", "0.8", _parse_fraction_incl, RESTART,
         "Correlation of two tasks on the same host pair with different arguments."),
    Knob("EOS_PENALTY_LIMIT", "eos_penalty_limit", "2", _parse_float_min(0), LIVE,
         "Most penalty per host among running tasks (with EOS_ALPHA = 0.5, 2 allows 4 tasks)."),
    Knob("EOS_SELECTION", "eos_selection", "5", _parse_choice("4", "5"), LIVE,
         "Parallel task selection: 4 (first fit) or 5 (mutually orthogonal tasks first)."),
    Knob("STORK_PROGRESS_INTERVAL", "progress_interval_s", "1", _parse_float_min(0), LIVE,
         "Least seconds between progress updates written to the queue for one job."),
    # live: the daemon reschedules its jobs on SIGHUP
    Knob("ASM_ANALYSIS_INTERVAL", "asm_analysis_interval_s", "86400", _parse_float_min(1), LIVE,
         "Seconds between the offline analyses of the transfer log for optimization = "
         "\"asm\" (each reads only the rows added since the last; the first runs at start "
         "when there is no model yet)."),
)

_BY_NAME = {k.name: k for k in KNOBS}
_REF = re.compile(r"\$(ENV)?\(([A-Za-z_][A-Za-z0-9_]*)\)")
_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")


@dataclass(frozen=True)
class Settings:
    """Every knob, typed and validated. Built only by `load`."""

    source: str  # the config file read, or "<defaults>"
    state_dir: str
    database: str
    node_name: str
    lease_s: float
    socket: str
    api_address: str
    api_token_file: str
    api_max_inflight: int
    api_max_waiters: int
    api_wait_timeout_s: float
    metrics_open: bool
    pid_file: str
    log: str
    log_level: str
    module_dir: str
    max_num_jobs: int
    max_submit_bytes: int
    max_ads_per_submit: int
    max_files_per_job: int
    link_mbps: float
    eos_link_is_true: bool
    link_mtu: int
    engine: str
    range_min_mb: int
    piece_min_mb: int
    dataset_fast: bool
    max_retry: int
    retry_delay_s: float
    retry_delay_max_s: float
    max_delay_min: float
    shutdown_grace_s: float
    dispatch_interval_s: float
    hung_check_interval_s: float
    job_retention_days: float
    cleanup_interval_s: float
    default_streams: int
    globus_url_copy: str
    progress_interval_s: float
    eos_sampler: str
    eos_optimizer: str
    eos_sampling: str
    eos_max_streams: int
    eos_max_samples: int
    eos_slope_threshold: float
    eos_tolerance: float
    dw_depth: int
    dw_width: int
    eos_sample_size: int
    eos_sampling_budget: float
    eos_estimation_max_s: float
    eos_sample_time_s: float
    eos_default_streams: int
    eos_iperf_port: int
    eos_allow_local_sources: bool
    eos_sample_user: str
    eos_history_ttl_s: float
    eos_share_window_s: float
    eos_symmetric_pairs: bool
    eos_workers: int
    eos_api_address: str
    eos_api_token_file: str
    eos_alpha: float
    eos_beta: float
    eos_penalty_limit: float
    eos_selection: str
    asm_analysis_interval_s: float


assert {f.name for f in fields(Settings)} == {k.field for k in KNOBS} | {"source"}


@dataclass(frozen=True)
class KnobChange:
    """One knob whose value differs between the running and the re-read configuration."""

    name: str  # the knob, e.g. "STORK_MAX_NUM_JOBS"
    live: bool
    old: Any  # typed values, as in Settings
    new: Any


@dataclass(frozen=True)
class ReloadPlan:
    """What SIGHUP does: run with `settings`; log `restart_changed` as waiting for a restart."""

    settings: Settings  # new values of live knobs, running values of restart-only ones
    changes: tuple[KnobChange, ...]  # in KNOBS order

    @property
    def live_changed(self) -> tuple[str, ...]:
        """Knobs applied at once."""
        return tuple(c.name for c in self.changes if c.live)

    @property
    def restart_changed(self) -> tuple[str, ...]:
        """Knobs changed in the file but kept at their running value until a restart."""
        return tuple(c.name for c in self.changes if not c.live)


def reload_plan(old: Settings, new: Settings) -> ReloadPlan:
    """Compare the running settings with freshly loaded ones. Pure: no I/O, no logging.

    The settings to apply take each live knob from `new` and each restart-only knob from `old`,
    so what runs stays consistent with what was bound at start (a pool sized by EOS_WORKERS
    keeps selecting EOS_WORKERS tasks). The cross-knob check in `load` (EOS_ALPHA <= EOS_BETA)
    relates restart-only knobs only, so the mix passes it whenever `old` did.
    """
    changes: list[KnobChange] = []
    values: dict[str, Any] = {}
    for knob in KNOBS:
        before, after = getattr(old, knob.field), getattr(new, knob.field)
        if before != after:
            changes.append(KnobChange(knob.name, knob.live, before, after))
        values[knob.field] = after if knob.live else before
    return ReloadPlan(Settings(source=new.source, **values), tuple(changes))


class LiveSettings:
    """The one owner of the running settings. Every part of the daemon keeps a reference to
    this object and reads `current` at each decision; SIGHUP replaces `current` once, with
    the settings of a `ReloadPlan`, and nothing is copied or patched part by part."""

    def __init__(self, settings: Settings) -> None:
        self._current = settings

    @classmethod
    def of(cls, settings: Settings | LiveSettings) -> LiveSettings:
        """The owner itself, or a new one for plain settings (tools and tests)."""
        return settings if isinstance(settings, LiveSettings) else cls(settings)

    @property
    def current(self) -> Settings:
        return self._current

    def apply(self, plan: ReloadPlan) -> Settings:
        """Run with the plan's settings from the next decision on; returns them."""
        self._current = plan.settings
        return plan.settings


def _read_file(path: str) -> dict[str, tuple[str, int]]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror}", path=path) from None
    raw: dict[str, tuple[str, int]] = {}
    pending = ""
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        match = _LINE.match(full)
        if not match:
            raise ConfigError(f"expected NAME = value, got {full!r}", path=path, line=start)
        name = match.group(1).upper()
        if name not in _BY_NAME:
            raise ConfigError(f"unknown knob {name}", path=path, line=start)
        raw[name] = (match.group(2), start)
    if pending:
        raise ConfigError("file ends inside a continued line", path=path, line=start)
    return raw


def _expand(name: str, raw: Mapping[str, str], env: Mapping[str, str],
            seen: tuple[str, ...]) -> str:
    if name in seen:
        chain = " -> ".join((*seen, name))
        raise ValueError(f"circular reference {chain}")

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return env.get(match.group(2), "")
        ref = match.group(2).upper()
        if ref not in raw:
            raise ValueError(f"reference to unknown knob $({ref})")
        return _expand(ref, raw, env, (*seen, name))

    return _REF.sub(substitute, raw[name])


def config_path(explicit: str | None, env: Mapping[str, str]) -> str | None:
    """The config file chosen by ``-c FILE``, else ``$STORK_CONFIG``, else none."""
    if explicit:
        return explicit
    return env.get(ENV_CONFIG) or None


def load(path: str | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Read defaults, then `path`, then ``_STORK_*`` overrides, into Settings."""
    env = dict(os.environ if env is None else env)
    raw = {k.name: k.default for k in KNOBS}
    lines: dict[str, int] = {}
    if path is not None:
        path = os.path.abspath(path)
        for name, (value, line) in _read_file(path).items():
            raw[name] = value
            lines[name] = line
    overridden: dict[str, str] = {}
    for key, value in env.items():
        if key.startswith(ENV_OVERRIDE_PREFIX):
            rest = key[len(ENV_OVERRIDE_PREFIX):]
            name = f"STORK_{rest}" if f"STORK_{rest}" in _BY_NAME else rest
            if name not in _BY_NAME:
                raise ConfigError(f"environment variable {key} names unknown knob {name}")
            raw[name] = value
            overridden[name] = key
    values: dict[str, Any] = {}
    for knob in KNOBS:
        try:
            values[knob.field] = knob.parse(_expand(knob.name, raw, env, ()).strip())
        except ValueError as exc:
            if knob.name in overridden:
                raise ConfigError(f"environment variable {overridden[knob.name]}: {exc}") from None
            if knob.name in lines:
                raise ConfigError(f"{knob.name}: {exc}", path=path, line=lines[knob.name]) from None
            raise ConfigError(f"{knob.name} (default {knob.default!r}): {exc}") from None
    if values["eos_alpha"] > values["eos_beta"]:
        where = path or "<defaults>"
        raise ConfigError(f"EOS_ALPHA ({values['eos_alpha']}) must not exceed EOS_BETA "
                          f"({values['eos_beta']}): 0 <= alpha <= beta <= 1", path=where,
                          line=lines.get("EOS_ALPHA") or lines.get("EOS_BETA"))
    return Settings(source=path or "<defaults>", **values)
