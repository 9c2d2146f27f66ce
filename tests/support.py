"""Real processes for tests, the demo and benchmarks: a GridFTP server and a stork_server."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GRIDFTP_SERVER = "globus-gridftp-server"
GLOBUS_URL_COPY = "globus-url-copy"


def missing_tools() -> list[str]:
    return [t for t in (GRIDFTP_SERVER, GLOBUS_URL_COPY) if shutil.which(t) is None]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    """Whether process `pid` exists (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for(predicate: Any, timeout_s: float = 15.0, interval_s: float = 0.05,
             what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


def answers(name: str, proc: subprocess.Popen[bytes] | None, stderr_path: Path,
            ping: Any) -> bool:
    """True once a server process answers `ping()` with 200; its stderr if it exited."""
    if proc is not None and proc.poll() is not None:
        raise RuntimeError(f"{name} exited with {proc.returncode}: "
                           f"{stderr_path.read_text()[-2000:]}")
    try:
        return bool(ping().status_code == 200)
    except httpx.TransportError:
        return False


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself holds a listening TCP socket on `port`: a port from
    `free_port` may be taken by another process (pytest-xdist's workers pick theirs at the
    same time) before the server binds it, and then `listening` answers for that one."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
    return False


def up_or_ended(proc: subprocess.Popen[bytes], port: int) -> bool:
    """Whether server `proc` listens on `port` itself (`listens`), or has exited."""
    return proc.poll() is not None or listens(proc.pid, port)


def listening(host: str, *ports: int) -> bool:
    """Whether every one of `ports` on `host` accepts a connection now."""
    for port in ports:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                pass
        except OSError:
            return False
    return True


def kill_group(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL a server started in its own session, with every child it forked; reap it."""
    if proc is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class GridFtpServer:
    """globus-gridftp-server in anonymous mode on a loopback address (forks per session)."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1", port: int | None = None,
                 user: str = "root") -> None:
        self.user = user  # whose rights the server's sessions have
        self.host = host
        self.port = port or free_port(host)
        self.workdir = workdir
        self.log = workdir / f"gridftp-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, path: str | Path) -> str:
        return f"ftp://{self.host}:{self.port}{path}"

    def start(self) -> GridFtpServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [GRIDFTP_SERVER, "-aa", "-anonymous-user", self.user, "-allow-root",
                "-p", str(self.port), "-control-interface", self.host,
                "-data-interface", self.host, "-d", "ERROR", "-l", str(self.log)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        proc = self.proc
        wait_for(lambda: up_or_ended(proc, self.port), 15,
                 what=f"GridFTP server on {self.host}:{self.port}")
        if proc.poll() is not None:
            raise RuntimeError(f"the GridFTP server on {self.host}:{self.port} exited with "
                               f"status {proc.returncode} (see {self.log})")
        return self

    def stop(self) -> None:
        kill_group(self.proc)
        self.proc = None

    def __enter__(self) -> GridFtpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StorkServer:
    """A personal stork_server (foreground, real process) with its own config and state."""

    def __init__(self, workdir: Path, knobs: dict[str, Any] | None = None,
                 prefix: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.extra_env = env or {}  # e.g. X509_CERT_DIR: the test CA the tools trust
        self.prefix = prefix or []  # e.g. ["ip", "netns", "exec", SITE] to run inside a site
        self.state = workdir / "state"
        self.config = workdir / "stork_config"
        self.knobs = {"STORK_STATE_DIR": str(self.state), "STORK_DISPATCH_INTERVAL": "0.2",
                      "STORK_RETRY_DELAY": "0.2", **(knobs or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path = workdir / "stork_server.stderr"
        self.write_config()

    @property
    def socket(self) -> str:
        return self.knobs.get("STORK_SOCKET", str(self.state / "stork.sock"))

    def write_config(self, **changes: Any) -> None:
        self.knobs.update({k: str(v) for k, v in changes.items()})
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config.write_text("".join(f"{k} = {v}\n" for k, v in self.knobs.items()))

    def env(self) -> dict[str, str]:
        # a token of the machine's user is no test's: only `extra_env` gives one
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("_STORK_") and k not in ("BEARER_TOKEN", "BEARER_TOKEN_FILE")}
        env.update(self.extra_env)
        env["STORK_CONFIG"] = str(self.config)
        env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
        return env

    def start(self) -> StorkServer:
        with open(self.stderr_path, "ab") as stderr:
            self.proc = subprocess.Popen([*self.prefix, str(BIN / "stork_server"), "-f"],
                                         env=self.env(), stdout=stderr, stderr=stderr,
                                         cwd=self.workdir)
        wait_for(self.ready, 20, what="stork_server to answer")
        return self

    def ready(self) -> bool:
        return answers("stork_server", self.proc, self.stderr_path,
                       lambda: self.api("GET", "/v1/ping"))

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        transport = httpx.HTTPTransport(uds=self.socket)
        with httpx.Client(transport=transport, base_url="http://stork", timeout=30) as client:
            return client.request(method, path, **kwargs)

    def cli(self, command: str, *args: str, stdin: str | None = None, check: bool = False,
            timeout: float = 120, **popen: Any) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(BIN / command), *args], env=self.env(), input=stdin,
                                capture_output=True, text=True, timeout=timeout,
                                cwd=popen.pop("cwd", self.workdir), check=False, **popen)
        if check and result.returncode != 0:
            raise AssertionError(f"{command} {args} exited {result.returncode}: "
                                 f"{result.stdout}{result.stderr}")
        return result

    def submit(self, text: str, *args: str) -> list[int]:
        path = self.workdir / f"job-{time.monotonic_ns()}.dap"
        path.write_text(text)
        result = self.cli("stork_submit", *args, str(path), check=True)
        return [int(line.rsplit(":", 1)[1]) for line in result.stdout.splitlines()
                if line.startswith("Request assigned id:")]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.api("GET", f"/v1/jobs/{job_id}").json()

    def wait_state(self, job_id: int, states: tuple[str, ...] = ("COMPLETED", "FAILED", "REMOVED"),
                   timeout_s: float = 60) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)["job"]
            return job if job["state"] in states else None

        try:
            return wait_for(reached, timeout_s, 0.1, what=f"job {job_id} to reach {states}")
        except TimeoutError as timed_out:
            raise TimeoutError(f"{timed_out}; {self.diagnosis(job_id)}") from None

    def diagnosis(self, job_id: int) -> str:
        """What the job and the daemon were doing (a wait for the job timed out): the job's
        fields and last events, and the daemon's last log lines with every thread's stack
        (SIGUSR2), or how the daemon ended."""
        if self.proc is None or self.proc.poll() is not None:
            said = ("stork_server is not running" if self.proc is None
                    else f"stork_server exited with status {self.proc.returncode}")
        else:
            try:
                status = self.job(job_id)
                seen = {k: v for k, v in status["job"].items() if k != "ad"}
                said = f"the job then: {seen}; its last events: {status['events'][-10:]}"
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                said = f"stork_server did not answer for the job: {exc!r}"
            self.proc.send_signal(signal.SIGUSR2)
            time.sleep(1)  # (faulthandler writes at once; the log's lines before it too)
        return f"{said}; the daemon's last log lines:\n" + "\n".join(self.log_lines()[-150:])

    def log_lines(self) -> list[str]:
        """The daemon's log, line by line (none before it wrote one)."""
        log = Path(self.knobs.get("STORK_LOG", self.state / "stork_server.log"))
        return log.read_text(errors="replace").splitlines() if log.exists() else []

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def stop(self, timeout_s: float = 60) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None
        return code

    def __enter__(self) -> StorkServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EosServer:
    """A real eos_server process on a loopback TCP port, with its own token and state."""

    def __init__(self, workdir: Path, knobs: dict[str, Any] | None = None) -> None:
        self.port = free_port()
        self.token_file = workdir / "eos.token"
        workdir.mkdir(parents=True, exist_ok=True)
        self.token_file.write_text(f"eos-{os.getpid()}-{time.monotonic_ns()}-token")
        self.token_file.chmod(0o600)
        self.config = StorkServer(workdir, {"EOS_API_ADDRESS": f"127.0.0.1:{self.port}",
                                            "EOS_API_TOKEN_FILE": str(self.token_file),
                                            **(knobs or {})})
        self.stderr_path = workdir / "eos_server.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def call(self, method: str, path: str, token: str | None = None,
             **kwargs: Any) -> httpx.Response:
        """A request as a remote caller; `token=None` sends the right token, "" none."""
        token = self.token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.request(method, f"http://127.0.0.1:{self.port}{path}", headers=headers,
                             timeout=120, **kwargs)

    def start(self) -> EosServer:
        with open(self.stderr_path, "ab") as stderr:
            self.proc = subprocess.Popen([str(BIN / "eos_server")], env=self.config.env(),
                                         stdout=stderr, stderr=stderr)

        wait_for(lambda: answers("eos_server", self.proc, self.stderr_path,
                                 lambda: self.call("GET", "/v1/ping")),
                 20, what="eos_server to answer")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> EosServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_file(path: Path, size_bytes: int, seed: int = 1) -> Path:
    """A file of pseudo-random bytes (fast: one random block repeated with a counter)."""
    import hashlib

    block = hashlib.sha256(str(seed).encode()).digest() * 32768  # 1 MiB
    with open(path, "wb") as handle:
        left = size_bytes
        i = 0
        while left > 0:
            chunk = (i.to_bytes(8, "little") + block)[: min(left, len(block))]
            handle.write(chunk)
            left -= len(chunk)
            i += 1
    return path


def md5(path: Path) -> str:
    import hashlib

    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


SLOW_MODULE = """#!{python}
# Test module: copies a file:// source to a file:// destination slowly, printing -vb lines.
import sys, time, os
src, dst = sys.argv[1][7:], sys.argv[2][7:]
delay = float(os.environ.get("SLOW_DELAY", "{delay}"))
with open(src, "rb") as i, open(dst, "wb") as o:
    done = 0
    while True:
        chunk = i.read({chunk})
        if not chunk:
            break
        o.write(chunk); o.flush(); done += len(chunk)
        print(f"{{done:>15}} bytes {{1.0:>12.2f}} MB/sec avg {{1.0:>12.2f}} MB/sec inst",
              end="\\r", flush=True)
        time.sleep(delay)
print()
"""


def install_slow_module(module_dir: Path, src: str = "slow", dst: str = "file",
                        delay_s: float = 0.2, chunk: int = 65536,
                        python: str = sys.executable) -> Path:
    """An external module stork.transfer.<src>-<dst> that copies slowly (for kill tests);
    `python` runs it (the system's for a job of another user, who cannot reach root's)."""
    module_dir.mkdir(parents=True, exist_ok=True)
    path = module_dir / f"stork.transfer.{src}-{dst}"
    path.write_text(SLOW_MODULE.format(python=python, delay=delay_s, chunk=chunk))
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def removed_after(path: Path) -> Iterator[None]:
    """A directory made outside pytest's tree (for other users to reach), removed at the end."""
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)
