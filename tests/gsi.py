"""Real GSI for tests: a throw-away certificate authority made with Debian's Globus tools
(globus-simple-ca: grid-ca-create, grid-cert-request, grid-ca-sign; globus-proxy-utils:
grid-proxy-init), a host certificate for 127.0.0.1/localhost, a user certificate and its
proxies, and globus-gridftp-server with GSI (a grid-mapfile mapping the user to a local
account).

grid-ca-create always installs the new CA into /etc/grid-security/certificates when it may
write there; `TestCa.create` moves those files (and only those: the new CA's hash) into the
CA's own trust directory, which the tests name in ``X509_CERT_DIR``, so the machine's trust
is left as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from tests.support import free_port, kill_group, listens, up_or_ended, wait_for

TOOLS = ("grid-ca-create", "grid-cert-request", "grid-ca-sign", "grid-proxy-init",
         "globus-gridftp-server", "globus-url-copy", "faketime")
SYSTEM_TRUST = Path("/etc/grid-security/certificates")
CREATE_LOCK = Path("/tmp/stork-test-ca.lock")
PASSWORD = "stork-test-ca"
USER_CN = "Stork Tester"


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    """Run a tool; the Globus CA tools write openssl_req.log into their working directory,
    so the CA's own directory is given."""
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                            stdin=subprocess.DEVNULL, cwd=cwd)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: "
                           f"{result.stdout[-1500:]}{result.stderr[-1500:]}")
    return str(result.stdout)


class TestCa:
    """A CA, a host certificate and a user certificate in `root`, made once."""

    __test__ = False  # not a test class

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trust = root / "certificates"  # X509_CERT_DIR
        self.ca = root / "ca"
        self.host_dir = root / "host"
        self.user_dir = root / "user"
        self.gridmap = root / "grid-mapfile"
        self.user_dn = ""

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "X509_CERT_DIR": str(self.trust)}

    @property
    def host_cert(self) -> Path:
        return self.host_dir / "hostcert.pem"

    @property
    def host_key(self) -> Path:
        return self.host_dir / "hostkey.pem"

    @property
    def ca_cert(self) -> Path:
        return self.ca / "cacert.pem"

    def create(self, map_to: str = "root") -> TestCa:
        self.trust.mkdir(parents=True, exist_ok=True)
        # one CA at a time on the machine (pytest-xdist's workers each make one): every
        # test CA has the same subject, so the same hash, in the one system trust directory
        with open(CREATE_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            digest = self._create_ca()
        if not (self.trust / f"{digest}.0").exists():  # installed nowhere: do it ourselves
            shutil.copy(self.ca_cert, self.trust / f"{digest}.0")
            shutil.copy(self.ca / "signing-policy", self.trust / f"{digest}.signing_policy")
            for conf in ("grid-security.conf", "globus-user-ssl.conf", "globus-host-ssl.conf"):
                shutil.copy(self.ca / conf, self.trust / f"{conf}.{digest}")
        # the host request's subjectAltName (localhost, 127.0.0.1) goes into the certificate
        conf = self.ca / "grid-ca-ssl.conf"
        conf.write_text(conf.read_text().replace(
            "x509_extensions\t= x509v3_extensions", "copy_extensions = copy\n"
            "x509_extensions\t= x509v3_extensions", 1))
        self.host_dir.mkdir(exist_ok=True)
        self.user_dir.mkdir(exist_ok=True)
        _run(["grid-cert-request", "-host", "stork-test.invalid", "-dns", "localhost",
              "-ip", "127.0.0.1", "-dir", str(self.host_dir), "-ca", digest, "-nopw",
              "-force"], self.env, cwd=self.root)
        _run(["grid-ca-sign", "-in", str(self.host_dir / "hostcert_request.pem"),
              "-out", str(self.host_cert), "-dir", str(self.ca), "-passin",
              f"pass:{PASSWORD}"], self.env, cwd=self.root)
        _run(["grid-cert-request", "-cn", USER_CN, "-dir", str(self.user_dir), "-ca", digest,
              "-nopw", "-force"], self.env, cwd=self.root)
        # valid from long ago, so a proxy can be made in the past (an expired one)
        _run(["grid-ca-sign", "-in", str(self.user_dir / "usercert_request.pem"),
              "-out", str(self.user_dir / "usercert.pem"), "-dir", str(self.ca),
              "-passin", f"pass:{PASSWORD}", "-startdate", "20200101000000Z"], self.env,
             cwd=self.root)
        subject = _run(["openssl", "x509", "-in", str(self.user_dir / "usercert.pem"),
                        "-noout", "-subject", "-nameopt", "compat"], self.env, cwd=self.root)
        self.user_dn = subject.strip().removeprefix("subject=")
        self.gridmap.write_text(f'"{self.user_dn}" {map_to}\n')
        return self

    def _create_ca(self) -> str:
        """grid-ca-create, what it installed in SYSTEM_TRUST moved into our own trust; the
        CA's hash."""
        existed = SYSTEM_TRUST.is_dir()
        before = set(os.listdir(SYSTEM_TRUST)) if existed else set()
        _run(["grid-ca-create", "-noint", "-force", "-dir", str(self.ca),
              "-subject", "cn=Stork Test CA, ou=stork, o=Grid", "-pass", PASSWORD,
              "-days", "7", "-bits", "2048", "-nobuild"], self.env, cwd=self.root)
        digest = _run(["openssl", "x509", "-in", str(self.ca_cert), "-noout", "-hash"],
                      self.env, cwd=self.root).strip()
        if SYSTEM_TRUST.is_dir():  # move what grid-ca-create installed into our own trust
            for name in set(os.listdir(SYSTEM_TRUST)) - before:
                if digest in name:
                    shutil.move(str(SYSTEM_TRUST / name), str(self.trust / name))
            if not existed:
                with contextlib.suppress(OSError):
                    SYSTEM_TRUST.rmdir()
        return digest

    def proxy(self, path: Path, valid: str = "12:00", shift: str | None = None,
              owner: int | None = None) -> Path:
        """A proxy of the user certificate made by grid-proxy-init, valid `valid` (H:M);
        `shift` (faketime's "-3h") makes it as if at another time (an expired one)."""
        argv = ["grid-proxy-init", "-q", "-cert", str(self.user_dir / "usercert.pem"),
                "-key", str(self.user_dir / "userkey.pem"), "-out", str(path),
                "-valid", valid]
        _run(["faketime", "-f", shift, *argv] if shift else argv, self.env, cwd=self.root)
        path.chmod(0o600)
        if owner is not None:
            os.chown(path, owner, -1)
        return path


class GsiGridFtpServer:
    """globus-gridftp-server with GSI on 127.0.0.1: the host certificate of `ca`, its
    grid-mapfile (the test user as root), forking per session."""

    def __init__(self, ca: TestCa, workdir: Path, gridmap: Path | None = None) -> None:
        self.ca = ca
        self.gridmap = gridmap or ca.gridmap  # another one maps the user to another account
        self.host = "127.0.0.1"
        self.port = free_port()
        self.workdir = workdir
        self.log = workdir / f"gsiftp-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, path: str | Path) -> str:
        return f"gsiftp://{self.host}:{self.port}{path}"

    def start(self) -> GsiGridFtpServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**self.ca.env, "X509_USER_CERT": str(self.ca.host_cert),
               "X509_USER_KEY": str(self.ca.host_key), "GRIDMAP": str(self.gridmap)}
        argv = ["globus-gridftp-server", "-allow-root", "-p", str(self.port),
                "-control-interface", self.host, "-data-interface", self.host,
                "-d", "ERROR", "-l", str(self.log)]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        proc = self.proc
        wait_for(lambda: up_or_ended(proc, self.port), 15,
                 what=f"GSI GridFTP server on {self.host}:{self.port}")
        if proc.poll() is not None:
            raise RuntimeError(f"the GSI GridFTP server on {self.host}:{self.port} exited "
                               f"with status {proc.returncode} (see {self.log})")
        return self

    def stop(self) -> None:
        kill_group(self.proc)
        self.proc = None


XROOTD_USER = "nobody"  # xrootd refuses to run as root; it serves files as this user


class XrootdServer:
    """A real xrootd (Debian's xrootd-server) on 127.0.0.1 serving `export` twice: XRootD
    (``root://``, third-party copies through ``ofs.tpc``) and HTTPS/WebDAV through its HTTP
    plugin (``davs://``, TLS with the test CA's host certificate, HTTP-TPC ``COPY``), with
    adler32, md5 and crc32c checksums. It runs as `XROOTD_USER`, so `export` (outside
    pytest's private tree) belongs to that user.

    A subclass changes what it serves through hooks: `extra_config` (lines added to the
    configuration, written after `prepare` made what they name in `run_dir`), `tpc_options`
    and `environment` (added to the server's own)."""

    def __init__(self, ca: TestCa, export: Path) -> None:
        self.ca = ca
        self.export = export
        self.root_port = free_port()
        self.https_port = free_port()
        self.run_dir = export.parent / f"xrootd-run-{self.root_port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def prepare(self, uid: int, gid: int) -> None:
        """Make what `extra_config` names, in `run_dir`, readable by the server's user."""

    def tpc_options(self) -> str:
        """Options of ``ofs.tpc`` before its program (the credentials it forwards)."""
        return ""

    def extra_config(self) -> str:
        """Configuration lines added after the plain server's."""
        return ""

    def environment(self) -> dict[str, str]:
        """Variables added to the server's environment."""
        return {}

    def url(self, scheme: str, path: str | Path) -> str:
        if scheme == "root":
            return f"root://127.0.0.1:{self.root_port}/{path}"
        return f"{scheme}://127.0.0.1:{self.https_port}{path}"

    def start(self) -> XrootdServer:
        import pwd

        user = pwd.getpwnam(XROOTD_USER)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.export.mkdir(parents=True, exist_ok=True)
        # the server reads its host key as XROOTD_USER: a copy of its own
        cert, key = self.run_dir / "hostcert.pem", self.run_dir / "hostkey.pem"
        shutil.copy(self.ca.host_cert, cert)
        shutil.copy(self.ca.host_key, key)
        trust = self.run_dir / "certificates"  # and of the CA's trust (for HTTP-TPC)
        shutil.copytree(self.ca.trust, trust, dirs_exist_ok=True)
        for path in (self.run_dir, self.export, cert, key, trust):
            os.chown(path, user.pw_uid, user.pw_gid)
        key.chmod(0o400)
        self.prepare(user.pw_uid, user.pw_gid)
        config = self.run_dir / "xrootd.cfg"
        config.write_text(f"""all.export {self.export}
all.adminpath {self.run_dir}
all.pidpath {self.run_dir}
xrd.port {self.root_port}
xrootd.chksum max 4 adler32 md5 crc32c
ofs.tpc {self.tpc_options()}pgm /usr/bin/xrdcp --server
xrd.tls {cert} {key}
xrd.tlsca certdir {trust}
xrd.protocol XrdHttp:{self.https_port} libXrdHttp.so
http.exthandler xrdtpc libXrdHttpTPC.so
http.listingdeny false
{self.extra_config()}""")
        self.proc = subprocess.Popen(
            ["xrootd", "-R", XROOTD_USER, "-c", str(config), "-n", "stork",
             "-l", str(self.run_dir / "xrootd.log")], env={**self.ca.env, **self.environment()},
            stdout=subprocess.DEVNULL, stderr=open(self.run_dir / "xrootd.stderr", "wb"),  # noqa: SIM115
            start_new_session=True)
        proc = self.proc

        def serving() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"xrootd exited with {proc.returncode}: "
                                   f"{(self.run_dir / 'xrootd.stderr').read_text()[-2000:]}")
            # its own sockets: another xdist worker's server may hold a port it was given
            return all(listens(proc.pid, port) for port in (self.root_port, self.https_port))

        wait_for(serving, 20, what="xrootd on 127.0.0.1")
        return self

    def stop(self) -> None:
        kill_group(self.proc)
        self.proc = None
