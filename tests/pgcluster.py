"""A private PostgreSQL cluster for tests and benchmarks: `initdb` in a temporary directory,
served on a Unix socket in that directory, run as an unprivileged user (postgres refuses to
run as root). One cluster serves a whole test session; each test gets a database of its own.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CLUSTER_USER = "nobody"  # whose rights the postgres processes have when the tests run as root
DB_USER = "stork"


def postgres_bin() -> Path | None:
    """The directory of Debian's initdb/pg_ctl (not on PATH), or of the ones on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing() -> str | None:
    """Why this machine cannot run a private cluster, or None."""
    if postgres_bin() is None:
        return "PostgreSQL is not installed (make setup installs Debian's postgresql)"
    if os.getuid() == 0:
        try:
            pwd.getpwnam(CLUSTER_USER)
        except KeyError:
            return f"no user {CLUSTER_USER!r} to run postgres as (it refuses to run as root)"
    return None


class PostgresCluster:
    """initdb + postgres on a Unix socket in a fresh directory; `url(dbname)` for stores."""

    def __init__(self) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError(missing() or "no PostgreSQL")
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="stork-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._names = itertools.count(1)
        self.proc: subprocess.Popen[bytes] | None = None
        self._user: dict[str, int] = {}
        if os.getuid() == 0:
            entry = pwd.getpwnam(CLUSTER_USER)
            self._user = {"user": entry.pw_uid, "group": entry.pw_gid}
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self.dir.chmod(0o755)  # the socket must be reachable by the daemons

    def _run(self, *argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, cwd=self.dir,
                       **self._user)  # type: ignore[call-overload]

    def start(self) -> PostgresCluster:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", DB_USER,
                  "--auth=trust", "-E", "UTF8", "--no-sync")
        options = ["-c", "listen_addresses=", "-c", f"unix_socket_directories={self.dir}",
                   "-c", "fsync=off", "-c", "synchronous_commit=off",
                   "-c", "full_page_writes=off", "-c", "max_connections=300",
                   "-c", "shared_buffers=64MB"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(  # type: ignore[call-overload]
                [str(self.bin / "postgres"), "-D", str(self.data), *options],
                stdout=log, stderr=log, start_new_session=True, cwd=self.dir, **self._user)
        deadline = time.monotonic() + 30
        while not (self.dir / ".s.PGSQL.5432").exists() or not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def _accepts(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def url(self, dbname: str) -> str:
        return f"postgresql://{DB_USER}@/{dbname}?host={self.dir}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # smart shutdown would wait for clients: fast shutdown
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.dir)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
