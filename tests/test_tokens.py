"""Bearer tokens (WLCG/SciTokens, issue 29): what a token says and why a server refused it
(pure), and jobs against a real xrootd that asks for tokens on ``root://`` (ztn) and
WebDAV (``Authorization``), tokens minted by the scitokens library (tests/tokens.py)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stork.errors import (
    AccessDenied,
    NetworkError,
    RetryableTransferError,
    TokenExpired,
    TokenMissing,
    TokenNotAccepted,
    TokenScopeMissing,
    TokenUnusable,
)
from stork.process import Child
from stork.submit import parse_submit
from stork.transfer.registry import Registry
from stork.transfer.tokens import (
    BearerTokens,
    Claims,
    End,
    check_valid,
    discover,
    explain_refusal,
    parse_claims,
    prefix_of,
    token_for,
)
from tests.conftest import helper_available
from tests.gsi import TestCa
from tests.support import StorkServer, make_file, md5, removed_after
from tests.tokens import (
    ALL_SCOPES,
    OTHER_ISSUER,
    TokenIssuer,
    TokenXrootdServer,
    scitokens_missing,
)

MB = 1024 * 1024
HOUR = 3600.0


# -- what a token says, why it was refused (no server) -----------------------------------------

def claims(scope: str = ALL_SCOPES, aud: tuple[str, ...] = ("https://127.0.0.1",),
           exp: float | None = 2e9) -> Claims:
    return Claims("https://issuer.example", aud, tuple(scope.split()), exp)


def test_discovery_follows_the_wlcg_order() -> None:
    files = {"/run/user/7/bt_u7", "/tmp/bt_u7"}
    exists = files.__contains__
    env = {"BEARER_TOKEN": " eyJ.a.b\n", "BEARER_TOKEN_FILE": "/x/tok",
           "XDG_RUNTIME_DIR": "/run/user/7"}
    assert discover(env, 7, exists).value == "eyJ.a.b"  # type: ignore[union-attr]
    del env["BEARER_TOKEN"]
    assert discover(env, 7, exists).path == "/x/tok"  # type: ignore[union-attr]
    del env["BEARER_TOKEN_FILE"]
    assert discover(env, 7, exists).path == "/run/user/7/bt_u7"  # type: ignore[union-attr]
    assert discover({}, 7, exists).path == "/tmp/bt_u7"  # type: ignore[union-attr]
    assert discover({}, 8, exists) is None


def test_claims_are_read_without_the_signature_and_a_non_jwt_is_refused() -> None:
    issuer = TokenIssuer()
    token = issuer.mint(scope="storage.read:/data", audience="https://se.example:1094")
    found = parse_claims(token, "f")
    assert found.issuer == issuer.issuer and found.audiences == ("https://se.example:1094",)
    assert found.scopes == ("storage.read:/data",)
    assert found.expires_at is not None and found.expires_at > time.time() + 3000
    with pytest.raises(TokenUnusable, match="not a JWT"):
        parse_claims("not-a-token", "/home/u/tok")
    with pytest.raises(TokenExpired, match="expired at"):
        check_valid(parse_claims(issuer.mint(expired=True), "f"), "f", time.time())


def test_a_refusal_is_explained_by_the_tokens_claims() -> None:
    src, dest = "davs://127.0.0.1:8443/srv/export/in/a.dat", "root://127.0.0.1:1094//srv/x/b.dat"
    denied = AccessDenied("HTTP 403 : Permission refused")
    read_only = claims("storage.read:/")
    got = explain_refusal(denied, [End(src, "read", "/t", read_only),
                                   End(dest, "write", "/t", read_only)])
    assert isinstance(got, TokenScopeMissing) and not got.retryable
    assert got.path == "/srv/x/b.dat" and "storage.create" in str(got) and \
        "storage.read:/" in str(got)
    # a scope path under the server's (unknown) base path covers the URL: not the cause
    assert isinstance(explain_refusal(denied, [End(src, "read", "/t",
                                                   claims("storage.read:/in"))]),
                      TokenNotAccepted)
    narrow = claims("storage.read:/elsewhere")
    assert isinstance(explain_refusal(denied, [End(src, "read", "/t", narrow)]),
                      TokenScopeMissing)
    expired = claims(exp=1000.0)
    assert isinstance(explain_refusal(denied, [End(src, "read", "/t", expired)]), TokenExpired)
    elsewhere = claims(aud=("https://other.example",))
    got = explain_refusal(denied, [End(src, "read", "/t", elsewhere)])
    assert isinstance(got, TokenNotAccepted) and "other.example" in str(got)
    got = explain_refusal(denied, [End(src, "read", "/t", claims())])
    assert isinstance(got, TokenNotAccepted) and "issuer https://issuer.example" in str(got)
    assert "already at" not in str(got)
    # a write refused to a token that may only create: a file already there is named too
    # (XRootD's client can fail a copy after creating its destination, and the file it left
    # is refused to the next try)
    creates = claims("storage.create:/srv/x")
    got = explain_refusal(denied, [End(dest, "write", "/t", creates)])
    assert isinstance(got, TokenNotAccepted) and "server may not trust the issuer" in str(got)
    assert "a file is already at /srv/x/b.dat" in str(got) and "storage.modify" in str(got)
    modifies = claims("storage.create:/srv/x storage.modify:/srv")
    assert "already at" not in str(explain_refusal(denied, [End(dest, "write", "/t",
                                                                modifies)]))
    # XRootD's failed authentication (errno EBADE, which no table judges), without a token
    auth = RetryableTransferError("gfal2 copy error: 52 (EBADE): [FATAL] Auth failed: No "
                                  "protocols left to try")
    assert isinstance(explain_refusal(auth, [End(dest, "write")]), TokenMissing)
    # not a refusal (a local TLS setup "permission denied" judged as the network), or no end
    # takes a token: as it was
    tls = NetworkError("TLS error: Unable to use CA cert directory /x; permission denied")
    assert explain_refusal(tls, [End(src, "read", "/t", expired)]) is tls
    lost = NetworkError("connection reset")
    assert explain_refusal(lost, [End(src, "read", "/t", expired)]) is lost
    assert explain_refusal(denied, [End("file:///x", "read")]) is denied


def test_each_end_gets_its_own_token_file() -> None:
    tokens = BearerTokens.of(None, "/s.tok", "/d.tok")
    assert tokens is not None and BearerTokens.of(None) is None
    env = tokens.environment("davs://a:1/in/x.dat", "root://b:2//out/y.dat")
    assert env["BEARER_TOKEN_FILE"] == "/d.tok"  # XRootD: the destination's
    import json

    pairs = json.loads(env["STORK_BEARER_TOKENS"])
    assert token_for("davs://a:1/in/x.dat", pairs) == "/s.tok"
    assert token_for("root://b:2//out/sub/y.dat", pairs) == "/d.tok"
    assert token_for("davs://c:1/x", pairs) is None
    assert prefix_of("root://h:1//a/b/c.dat") == "root://h:1//a/b/"
    both = BearerTokens.of("/t")
    assert both is not None and both.files() == ("/t",)


def test_a_child_never_inherits_the_daemons_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEARER_TOKEN", "daemon-secret")
    monkeypatch.setenv("BEARER_TOKEN_FILE", "/daemon/token")
    out = bytearray()
    Child(["env"], on_stdout=out.extend).run(10)
    assert b"daemon-secret" not in out and b"BEARER_TOKEN" not in out
    out.clear()
    Child(["env"], env={"BEARER_TOKEN_FILE": "/job/token"}, on_stdout=out.extend).run(10)
    assert b"BEARER_TOKEN_FILE=/job/token" in out and b"daemon-secret" not in out


def test_token_attributes_are_files_and_a_token_itself_is_refused(tmp_path: Path) -> None:
    registry = Registry.default(str(tmp_path), "globus-url-copy")
    [spec] = parse_submit('[ dap_type = transfer; src_url = "davs://h:1/a"; '
                          'dest_url = "file:///tmp/b"; bearer_token_file = "tok"; '
                          'dest_bearer_token_file = "/d.tok" ]', "j", iwd="/home/u",
                          registry=registry)
    assert spec.bearer_tokens == BearerTokens("/home/u/tok", "/d.tok")
    token = TokenIssuer().mint()
    from stork.errors import SubmitError

    with pytest.raises(SubmitError) as caught:
        parse_submit(f'[ dap_type = transfer; src_url = "davs://h:1/a"; '
                     f'dest_url = "file:///tmp/b"; bearer_token_file = "{token}" ]', "j",
                     iwd="/", registry=registry)
    assert "holds a token itself" in str(caught.value) and token not in str(caught.value)


# -- against a real token-checking xrootd --------------------------------------------------------

@pytest.fixture(scope="module")
def issuer() -> TokenIssuer:
    why = scitokens_missing()
    if why:
        pytest.skip(why)
    return TokenIssuer()


@pytest.fixture(scope="module")
def tx(test_ca: TestCa, issuer: TokenIssuer, export: Path) -> Iterator[TokenXrootdServer]:
    if shutil.which("xrootd") is None or not helper_available():
        pytest.skip("xrootd or the gfal2 bindings are missing; run `make setup`")
    server = TokenXrootdServer(test_ca, export, issuer).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stork_t(test_ca: TestCa, tmp_path_factory: pytest.TempPathFactory,
            tx: TokenXrootdServer) -> Iterator[StorkServer]:
    server = StorkServer(tmp_path_factory.mktemp("stork-tokens"),
                         env={"X509_CERT_DIR": str(test_ca.trust)}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokens(issuer: TokenIssuer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Token files (0600, root's) by kind."""
    top = tmp_path_factory.mktemp("tokens")
    return {"all": issuer.write(top / "all.tok"),
            "read": issuer.write(top / "read.tok", scope="storage.read:/"),
            "expired": issuer.write(top / "expired.tok", expired=True),
            "audience": issuer.write(top / "audience.tok", audience="https://elsewhere.example"),
            "other-dir": issuer.write(top / "other.tok",
                                      scope="storage.read:/nowhere storage.create:/nowhere")}


def served(export: Path, name: str, size: int, seed: int = 3) -> Path:
    path = make_file(export / name, size, seed=seed)
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return path


def token_value(path: Path) -> str:
    return path.read_text().strip()


@pytest.mark.parametrize("scheme", ("root", "davs"))
def test_a_file_each_way_with_a_token_arrives_whole(
        stork_t: StorkServer, tx: TokenXrootdServer, export: Path,
        tokens: dict[str, Path], scheme: str) -> None:
    src = served(export, f"down-{scheme}.dat", 3 * MB + 11, seed=5)
    local = make_file(stork_t.workdir / f"up-{scheme}.dat", 2 * MB + 7, seed=6)
    work = stork_t.workdir / f"one-{scheme}"
    work.mkdir()
    ids = stork_t.submit(f"""
    [ dap_type = transfer; bearer_token_file = "{tokens['all']}"; verify_checksum = true;
      src_url = "{tx.url(scheme, src)}"; dest_url = "file://{work}/down.dat" ]
    [ dap_type = transfer; bearer_token_file = "{tokens['all']}"; verify_checksum = true;
      src_url = "file://{local}"; dest_url = "{tx.url(scheme, export / f'up-{scheme}' / 'x.dat')}" ]
    """)
    for job_id in ids:
        job = stork_t.wait_state(job_id, timeout_s=120)
        assert job["state"] == "COMPLETED", job
    assert md5(work / "down.dat") == md5(src)
    assert md5(export / f"up-{scheme}" / "x.dat") == md5(local)


@pytest.mark.parametrize("scheme", ("root", "davs"))
def test_token_failures_are_permanent_and_name_their_cause(
        stork_t: StorkServer, tx: TokenXrootdServer, export: Path,
        tokens: dict[str, Path], scheme: str) -> None:
    src = served(export, f"refused-{scheme}.dat", 1000)
    local = make_file(stork_t.workdir / f"refused-{scheme}.dat", 1000)
    work = stork_t.workdir / f"refused-{scheme}"
    work.mkdir()
    into = tx.url(scheme, export / f"ro-{scheme}" / "x.dat")
    ids = stork_t.submit(f"""
    [ dap_type = transfer; bearer_token_file = "{tokens['expired']}";
      src_url = "{tx.url(scheme, src)}"; dest_url = "file://{work}/1.dat" ]
    [ dap_type = transfer; bearer_token_file = "{tokens['read']}";
      src_url = "file://{local}"; dest_url = "{into}" ]
    [ dap_type = transfer; bearer_token_file = "{tokens['audience']}";
      src_url = "{tx.url(scheme, src)}"; dest_url = "file://{work}/3.dat" ]
    [ dap_type = transfer;
      src_url = "{tx.url(scheme, src)}"; dest_url = "file://{work}/4.dat" ]
    [ dap_type = transfer; bearer_token_file = "{tokens['other-dir']}";
      src_url = "{tx.url(scheme, src)}"; dest_url = "file://{work}/5.dat" ]
    """)
    expired, read_only, audience, none, other = (stork_t.wait_state(i, timeout_s=120)
                                                 for i in ids)
    for job in (expired, read_only, audience, none, other):
        assert (job["state"], job["failure_kind"], job["attempts"]) == \
            ("FAILED", "permanent", 1), job
    assert f"bearer token {tokens['expired']}: expired at" in expired["last_error"]
    assert f"no scope to write {export}/ro-{scheme}/x.dat" in read_only["last_error"]
    assert "it needs storage.create or storage.modify over it" in read_only["last_error"]
    assert "storage.read:/" in read_only["last_error"]
    assert "audience (https://elsewhere.example) does not name that server" \
        in audience["last_error"]
    assert "the job carries no bearer token" in none["last_error"]
    assert f"no scope to read {src}" in other["last_error"]
    assert not any(work.iterdir())


def test_a_dataset_with_a_token_each_way(
        stork_t: StorkServer, tx: TokenXrootdServer, export: Path,
        tokens: dict[str, Path]) -> None:
    tree = export / "set"
    tree.mkdir()
    os.chown(tree, pwd.getpwnam("nobody").pw_uid, -1)
    files = [served(export, f"set/f{i}.dat", 100_000 + i * 777, seed=i) for i in range(4)]
    work = stork_t.workdir / "set"
    ids = stork_t.submit(f"""
    [ dap_type = transfer; bearer_token_file = "{tokens['all']}"; verify_checksum = true;
      src_url = "{tx.url('davs', tree)}/"; dest_url = "file://{work}/down/" ]
    [ dap_type = transfer; bearer_token_file = "{tokens['all']}";
      src_url = "{tx.url('root', tree)}/*.dat";
      dest_url = "{tx.url('root', export / 'set-copy')}/" ]
    """)
    for job_id in ids:
        job = stork_t.wait_state(job_id, timeout_s=180)
        assert job["state"] == "COMPLETED" and job["files_done"] == 4, job["last_error"]
    for f in files:
        assert md5(work / "down" / f.name) == md5(f)
        assert md5(export / "set-copy" / f.name) == md5(f)
    [refused] = stork_t.submit(f"""
    [ dap_type = transfer; bearer_token_file = "{tokens['expired']}";
      src_url = "{tx.url('root', tree)}/"; dest_url = "file://{work}/never/" ]""")
    job = stork_t.wait_state(refused, timeout_s=60)
    assert (job["state"], job["failure_kind"]) == ("FAILED", "permanent"), job
    assert "expired at" in job["last_error"]


def test_third_party_copies_with_a_token_for_each_end(
        stork_t: StorkServer, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        tokens: dict[str, Path], tmp_path: Path) -> None:
    src = served(export, "tpc.dat", 2 * MB + 3, seed=9)
    reader = issuer.write(tmp_path / "reader.tok", scope="storage.read:/")
    writer = issuer.write(tmp_path / "writer.tok", scope="storage.create:/tpc-out "
                                                        "storage.read:/tpc-out")
    out = export / "tpc-out"
    ids = stork_t.submit(f"""
    [ dap_type = transfer; src_bearer_token_file = "{reader}";
      dest_bearer_token_file = "{writer}"; verify_checksum = true;
      src_url = "{tx.url('davs', src)}"; dest_url = "{tx.url('davs', out / 'a.dat')}" ]
    [ dap_type = transfer; bearer_token_file = "{tokens['all']}"; verify_checksum = true;
      src_url = "{tx.url('root', src)}"; dest_url = "{tx.url('root', out / 'b.dat')}" ]
    [ dap_type = transfer; src_bearer_token_file = "{writer}";
      dest_bearer_token_file = "{writer}";
      src_url = "{tx.url('davs', src)}"; dest_url = "{tx.url('davs', out / 'c.dat')}" ]
    """)
    davs, root, wrong = (stork_t.wait_state(i, timeout_s=120) for i in ids)
    assert davs["state"] == "COMPLETED", davs
    assert root["state"] == "COMPLETED", root
    assert md5(export / "tpc-out" / "a.dat") == md5(src) == md5(export / "tpc-out" / "b.dat")
    assert (wrong["state"], wrong["failure_kind"]) == ("FAILED", "permanent"), wrong
    assert f"no scope to read {src}" in wrong["last_error"]


def test_root_to_root_with_a_different_token_for_each_end(
        test_ca: TestCa, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        tmp_path: Path) -> None:
    """XRootD third-party copies whose ends need different tokens (neither alone can do the
    copy: one reads only the source's directory, the other only writes in the
    destination's): a file and a dataset arrive whole; the same copy with the destination's
    token alone is refused on the source (what ztn's one forwarded token gave). The helper
    put each token in its URL's authz CGI: with the XRootD client's messages on (Info), the
    refused copy's words come back scrubbed, and neither token's value is anywhere."""
    nobody = pwd.getpwnam("nobody")
    into = export / "r2r-in"
    for directory in (into, into / "set"):
        directory.mkdir()
        os.chown(directory, nobody.pw_uid, nobody.pw_gid)
    src = served(export, "r2r-in/one.dat", 2 * MB + 5, seed=31)
    files = [served(export, f"r2r-in/set/f{i}.dat", 200_000 + i * 999, seed=40 + i)
             for i in range(3)]
    reader = issuer.write(tmp_path / "reader.tok", scope="storage.read:/r2r-in")
    # the writer may replace files too: XRootD 5.5's client fails about one copy in ten of
    # three at once here ("Destination does not support third-party-copy.") after creating
    # its destination, and a token that may only create cannot replace that empty file when
    # the file is sent again (test_a_refusal_is_explained_by_the_tokens_claims)
    writer = issuer.write(tmp_path / "writer.tok",
                          scope="storage.create:/r2r-out storage.modify:/r2r-out "
                                "storage.read:/r2r-out")
    out = export / "r2r-out"
    with removed_after(tmp_path / "s"), StorkServer(
            tmp_path / "s", env={"X509_CERT_DIR": str(test_ca.trust),
                                 "XRD_LOGLEVEL": "Info"}) as server:
        ulog = tmp_path / "user.log"
        ids = server.submit(f"""
        [ dap_type = transfer; log = "{ulog}"; verify_checksum = true;
          src_bearer_token_file = "{reader}"; dest_bearer_token_file = "{writer}";
          src_url = "{tx.url('root', src)}"; dest_url = "{tx.url('root', out / 'one.dat')}" ]
        [ dap_type = transfer; log = "{ulog}";
          src_bearer_token_file = "{reader}"; dest_bearer_token_file = "{writer}";
          src_url = "{tx.url('root', into / 'set')}/";
          dest_url = "{tx.url('root', out / 'set')}/" ]
        [ dap_type = transfer; log = "{ulog}"; bearer_token_file = "{writer}";
          src_url = "{tx.url('root', src)}"; dest_url = "{tx.url('root', out / 'alone.dat')}" ]
        [ dap_type = transfer; log = "{ulog}";
          src_bearer_token_file = "{reader}"; dest_bearer_token_file = "{reader}";
          src_url = "{tx.url('root', src)}"; dest_url = "{tx.url('root', out / 'ro.dat')}" ]
        [ dap_type = transfer; log = "{ulog}"; max_retries = 0;
          src_bearer_token_file = "{reader}"; dest_bearer_token_file = "{writer}";
          src_url = "{tx.url('root', into / 'missing.dat')}";
          dest_url = "{tx.url('root', out / 'missing.dat')}" ]
        """)
        one, dataset, alone, read_only, missing = (server.wait_state(i, timeout_s=180)
                                                   for i in ids)
        seen = [server.cli("stork_q", "-l", check=True).stdout,
                *(server.api("GET", f"/v1/jobs/{i}").text for i in ids),
                server.api("GET", "/v1/jobs?long=1").text,
                server.api("GET", "/v1/overview").text,
                server.api("GET", "/metrics").text,
                *(server.cli("stork_status", str(i)).stdout for i in ids),
                ulog.read_text()]
        seen += [found.read_bytes().decode(errors="replace")  # logs, database, spool
                 for found in server.workdir.rglob("*") if found.is_file()]
    assert one["state"] == "COMPLETED", one["last_error"]
    assert md5(out / "one.dat") == md5(src)
    assert dataset["state"] == "COMPLETED" and dataset["files_done"] == 3, dataset["last_error"]
    for f in files:
        assert md5(out / "set" / f.name) == md5(f)
    assert (alone["state"], alone["failure_kind"]) == ("FAILED", "permanent"), alone
    assert f"no scope to read {src}" in alone["last_error"]
    assert (read_only["state"], read_only["failure_kind"]) == ("FAILED", "permanent"), read_only
    assert f"no scope to write {out}/ro.dat" in read_only["last_error"]
    assert not (out / "ro.dat").exists()
    # the XRootD client wrote the URLs it was given, and they came back scrubbed
    assert missing["state"] == "FAILED" and "no such file" in missing["last_error"], missing
    assert "authz=<hidden>" in missing["last_error"]
    for path in (reader, writer):
        value = token_value(path)
        hits = [i for i, text in enumerate(seen) if value in text or value[-40:] in text]
        assert hits == [], (path.name, hits)


@pytest.fixture(scope="module")
def other_issuer(issuer: TokenIssuer) -> TokenIssuer:
    """A second issuer, with a key of its own, that only `tx_other` trusts."""
    return TokenIssuer(OTHER_ISSUER)


@pytest.mark.parametrize("pull", ("forwarded", "own"))
def test_root_to_root_between_two_servers_with_tokens_of_different_issuers(
        test_ca: TestCa, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        other_issuer: TokenIssuer, tmp_path: Path, pull: str) -> None:
    """An XRootD third-party copy from `tx` to a second server, each trusting only its own
    issuer: the source token (the source's issuer) only reads the source's directory, the
    destination token (the other issuer) only creates in the destination's. The helper logs
    in to each server with its own end's token (with the XRootD client's messages on, no
    login of the client's is refused; with the destination's token for both, the source
    refused the client's login, and a dataset, whose checksums gfal2 asks of the source in
    the copy's process, failed). The destination pulls from the source, and logs in to it
    with what its configuration says: the token the client logged in to it with
    (``fcreds``, "forwarded": the source does not trust that issuer, so the copy is refused
    on the source, whatever the client does) or a token of its own that the source trusts
    ("own": a file and a dataset arrive whole, each read authorized by the source token in
    the URL, which may read nothing there itself). A job with the destination's token for
    both ends is refused. No token's value is anywhere."""
    nobody = pwd.getpwnam("nobody")
    into = export / f"two-in-{pull}"
    for directory in (into, into / "set"):
        directory.mkdir()
        os.chown(directory, nobody.pw_uid, nobody.pw_gid)
    src = served(export, f"{into.name}/one.dat", 2 * MB + 17, seed=51)
    files = [served(export, f"{into.name}/set/f{i}.dat", 150_000 + i * 333, seed=60 + i)
             for i in range(3)]
    reader = issuer.write(tmp_path / "reader.tok", scope=f"storage.read:/{into.name}")
    writer = other_issuer.write(tmp_path / "writer.tok",
                                scope="storage.create:/two-out storage.modify:/two-out "
                                      "storage.read:/two-out")
    # "own": the destination server's own token from the source's issuer, which may read
    # nothing there: the source token in the URL is what authorizes the read
    own = issuer.mint(scope="storage.read:/nowhere") if pull == "own" else None
    dest_server = TokenXrootdServer(test_ca, export.parent / f"export-{pull}", other_issuer,
                                    pull_token=own).start()
    out = dest_server.export / "two-out"
    try:
        with removed_after(tmp_path / "s"), StorkServer(
                tmp_path / "s", env={"X509_CERT_DIR": str(test_ca.trust),
                                     "XRD_LOGLEVEL": "Info"}) as server:
            ulog = tmp_path / "user.log"
            ids = server.submit(f"""
            [ dap_type = transfer; log = "{ulog}"; verify_checksum = true;
              src_bearer_token_file = "{reader}"; dest_bearer_token_file = "{writer}";
              src_url = "{tx.url('root', src)}";
              dest_url = "{dest_server.url('root', out / 'one.dat')}" ]
            [ dap_type = transfer; log = "{ulog}"; verify_checksum = true;
              src_bearer_token_file = "{reader}"; dest_bearer_token_file = "{writer}";
              src_url = "{tx.url('root', into / 'set')}/";
              dest_url = "{dest_server.url('root', out / 'set')}/" ]
            [ dap_type = transfer; log = "{ulog}"; bearer_token_file = "{writer}";
              src_url = "{tx.url('root', src)}";
              dest_url = "{dest_server.url('root', out / 'alone.dat')}" ]
            """)
            one, dataset, alone = (server.wait_state(i, timeout_s=180) for i in ids)
            seen = [server.cli("stork_q", "-l", check=True).stdout,
                    *(server.api("GET", f"/v1/jobs/{i}").text for i in ids),
                    *(server.cli("stork_status", str(i)).stdout for i in ids),
                    ulog.read_text()]
            seen += [found.read_bytes().decode(errors="replace")  # logs, database, spool
                     for found in server.workdir.rglob("*") if found.is_file()]
    finally:
        dest_server.stop()
    if pull == "own":
        assert one["state"] == "COMPLETED", one["last_error"]
        assert md5(out / "one.dat") == md5(src)
        assert dataset["state"] == "COMPLETED" and dataset["files_done"] == 3, \
            dataset["last_error"]
        for f in files:
            assert md5(out / "set" / f.name) == md5(f)
    else:
        for job in (one, dataset):
            assert (job["state"], job["failure_kind"]) == ("FAILED", "permanent"), job
            # the client's own logins were accepted; the destination's, on the source, not
            assert "Authentication with ztn failed" not in job["last_error"], job["last_error"]
            assert "Auth failed: No protocols left to try (source)" in job["last_error"]
        # judged from the destination's token, the one the source refused
        assert f"{writer}: refused (issuer {OTHER_ISSUER}" in one["last_error"]
        assert not (out / "one.dat").exists()
    assert (alone["state"], alone["failure_kind"]) == ("FAILED", "permanent"), alone
    assert not (out / "alone.dat").exists()
    for value in (token_value(reader), token_value(writer), own):
        assert value is not None or pull == "forwarded"
        if value:
            hits = [i for i, text in enumerate(seen) if value in text or value[-40:] in text]
            assert hits == [], hits


def test_a_token_never_leaks_and_a_kept_copy_is_private_and_removed(
        test_ca: TestCa, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        tokens: dict[str, Path], tmp_path: Path) -> None:
    """The daemon and stork_submit run with BEARER_TOKEN set (a value, no file): a job
    naming no token gets a kept 0600 copy, removed when it ends; a job naming its own
    expired file fails on it (the daemon's token does not reach its tool); the token's
    value is nowhere: job ad, stork_q -l, stork_status, the API, the status page's data,
    the metrics, the user log, the daemon's log and state (database, spool), the child's
    argv (logged with each attempt)."""
    value = issuer.mint(lifetime_s=7200)
    src = served(export, "leak.dat", 500_000, seed=11)
    with removed_after(tmp_path / "s"), StorkServer(
            tmp_path / "s", env={"X509_CERT_DIR": str(test_ca.trust),
                                 "BEARER_TOKEN": value}) as server:
        kept_dir = server.state / "tokens"
        ulog = tmp_path / "user.log"
        [slow] = server.submit(f"""
        [ dap_type = transfer; log = "{ulog}"; arguments = "-p 1";
          src_url = "{tx.url('root', src)}"; dest_url = "file://{tmp_path}/leak-1.dat" ]""")
        job = server.wait_state(slow, timeout_s=120)
        assert job["state"] == "COMPLETED", job
        assert md5(tmp_path / "leak-1.dat") == md5(src)
        assert list(kept_dir.iterdir()) == []  # removed at the end
        assert stat.S_IMODE(kept_dir.stat().st_mode) == 0o711
        [queued] = server.submit(f"""
        [ dap_type = transfer; bearer_token_file = "{tokens['expired']}";
          src_url = "{tx.url('davs', src)}"; dest_url = "file://{tmp_path}/leak-2.dat" ]""")
        job = server.wait_state(queued, timeout_s=60)
        assert (job["state"], job["failure_kind"]) == ("FAILED", "permanent"), job
        assert "expired at" in job["last_error"]
        seen = [server.cli("stork_q", "-l", check=True).stdout,
                server.cli("stork_q", "-l", str(slow), check=True).stdout,
                server.api("GET", f"/v1/jobs/{slow}").text,
                server.api("GET", "/v1/jobs?long=1").text,
                server.api("GET", "/v1/overview").text,  # the status page's data
                server.api("GET", "/metrics").text,
                server.cli("stork_status", str(slow), check=True).stdout,
                ulog.read_text()]
        assert "stork_" in seen[-3] and "jobs" in seen[-4], seen[-4:-2]
        seen += [found.read_bytes().decode(errors="replace")  # logs, database, spool
                 for found in server.workdir.rglob("*") if found.is_file()]
        hits = [i for i, text in enumerate(seen) if value in text or value[-40:] in text]
        assert hits == [], hits
        assert f'bearer_token_file = "{kept_dir}/' in seen[1]  # the copy named, not shown
        assert any("gfalhelper.py copy" in text for text in seen)  # the argv was looked at


def test_a_token_file_must_be_the_submitters_own_and_private(
        stork_t: StorkServer, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        tmp_path: Path) -> None:
    loose = issuer.write(tmp_path / "loose.tok")
    loose.chmod(0o644)
    result = stork_t.cli("stork_submit", "-stdin", stdin=f"""
    [ dap_type = transfer; bearer_token_file = "{loose}";
      src_url = "{tx.url('davs', export / 'x')}"; dest_url = "file://{tmp_path}/x" ]""")
    assert result.returncode != 0
    assert "mode 0644" in result.stderr and "a token file must be 0600" in result.stderr


def test_a_token_expiring_before_the_estimated_end_is_flagged(
        test_ca: TestCa, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        tmp_path: Path) -> None:
    src = served(export, "expiry.dat", 10 * MB, seed=13)
    short = issuer.write(tmp_path / "short.tok", lifetime_s=600)
    long = issuer.write(tmp_path / "long.tok", lifetime_s=12 * 3600)
    # 10 MiB at 0.1 Mbit/s: about 14 minutes, longer than the short token's 10
    with removed_after(tmp_path / "s"), StorkServer(
            tmp_path / "s", {"STORK_LINK_MBPS": "0.1"},
            env={"X509_CERT_DIR": str(test_ca.trust)}) as server:
        ids = server.submit("".join(f"""
            [ dap_type = transfer; bearer_token_file = "{path}";
              src_url = "{tx.url('davs', src)}";
              dest_url = "file://{tmp_path}/{path.name}.dat" ]""" for path in (short, long)))
        flagged, fine = (server.wait_state(i, timeout_s=120) for i in ids)
        status = server.cli("stork_status", str(ids[0])).stdout
        other = server.cli("stork_status", str(ids[1])).stdout
    assert flagged["state"] == fine["state"] == "COMPLETED"
    assert flagged["result"]["bearer_token_expires_before_end"] is True
    assert "bearer_token_expires_before_end" not in fine["result"]
    assert f"Warning: bearer token {short} expires at" in status
    assert "Warning" not in other


def test_a_kept_copy_is_the_owners_and_private(tmp_path: Path) -> None:
    from stork.server import kept_tokens

    path = Path(kept_tokens.keep(str(tmp_path), "eyJ.x.y", os.getuid()))
    assert path.parent == tmp_path / "tokens" and path.read_text() == "eyJ.x.y\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o711
    assert kept_tokens.is_kept(str(tmp_path), str(path))
    kept_tokens.forget(str(tmp_path), str(path))
    assert not path.exists()


def test_another_users_token_file_is_refused(
        stork_t: StorkServer, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        tmp_path: Path) -> None:
    theirs = issuer.write(tmp_path / "theirs.tok", owner=pwd.getpwnam("nobody").pw_uid)
    result = stork_t.cli("stork_submit", "-stdin", stdin=f"""
    [ dap_type = transfer; src_bearer_token_file = "{theirs}";
      src_url = "{tx.url('root', export / 'x')}"; dest_url = "file://{tmp_path}/x" ]""")
    assert result.returncode != 0
    assert f"{theirs} belongs to uid" in result.stderr and "not to the submitter" \
        in result.stderr


def test_two_users_each_with_their_own_token(
        users: list[pwd.struct_passwd], tx: TokenXrootdServer, export: Path,
        issuer: TokenIssuer, tokens: dict[str, Path]) -> None:
    """With the daemon as root: user A's BEARER_TOKEN value becomes a kept copy that is A's
    own (0600), used by A's tools (as A) on both protocols and removed when the job ends or
    is removed; user B can neither name A's token file nor reach A's token otherwise."""
    from tests.test_api import as_user

    first, second = users
    src = served(export, "users.dat", 300_000, seed=17)
    shared = Path(f"/tmp/stork-tokens-users-{os.getpid()}")
    shared.mkdir(mode=0o755)
    with removed_after(shared):
        mine = shared / "a"
        mine.mkdir()
        os.chown(mine, first.pw_uid, first.pw_gid)
        theirs = issuer.write(mine / "a.tok", owner=first.pw_uid)
        trust = shared / "certificates"  # the users' tools trust the test CA through it
        shutil.copytree(tx.ca.trust, trust)
        for path in (trust, *trust.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
        with StorkServer(shared / "s", env={"X509_CERT_DIR": str(trust)}) as server:
            shared.joinpath("s").chmod(0o755)
            kept_dir = server.state / "tokens"
            value = issuer.mint()

            def submit(user: pwd.struct_passwd, text: str, token: str | None = None
                       ) -> tuple[int, dict[str, object]]:
                body: dict[str, object] = {"text": text, "filename": "u.dap", "iwd": "/tmp"}
                if token:
                    body["bearer_token"] = {"where": "BEARER_TOKEN", "value": token}
                return as_user(user.pw_uid, server.socket, "POST", "/v1/jobs", body,
                               gid=user.pw_gid)

            ids = []
            for scheme in ("root", "davs"):
                code, body = submit(first, f"""[ dap_type = transfer;
                    src_url = "{tx.url(scheme, src)}"; dest_url = "file://{mine}/{scheme}.dat" ]""",
                                    value)
                assert code == 201, body
                ids.append(int(body["ids"][0]))  # type: ignore[index]
            for job_id in ids:
                job = server.wait_state(job_id, timeout_s=120)
                assert job["state"] == "COMPLETED", job["last_error"]
            assert md5(mine / "root.dat") == md5(src) == md5(mine / "davs.dat")
            assert (mine / "root.dat").stat().st_uid == first.pw_uid
            # a job that waits (its destination server refuses connections): its copy is
            # A's own, 0600, until the job is removed
            code, body = submit(first, """[ dap_type = transfer; max_retries = 50;
                src_url = "davs://127.0.0.1:1/x.dat"; dest_url = "file:///tmp/never.dat" ]""",
                                value)
            assert code == 201, body
            waiting = int(body["ids"][0])  # type: ignore[index]
            [copy] = list(kept_dir.iterdir())
            info = copy.stat()
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (first.pw_uid, 0o600)
            assert as_user(first.pw_uid, server.socket, "DELETE", f"/v1/jobs/{waiting}",
                           gid=first.pw_gid)[0] == 200
            server.wait_state(waiting, ("REMOVED",))
            assert list(kept_dir.iterdir()) == []
            # B: A's file is refused at submit; with no token of their own, refused by the
            # server, named as such
            code, body = submit(second, f"""[ dap_type = transfer;
                bearer_token_file = "{theirs}";
                src_url = "{tx.url('davs', src)}"; dest_url = "file:///tmp/b.dat" ]""")
            assert code == 400 and "not to the submitter" in str(body), body
            code, body = submit(second, f"""[ dap_type = transfer;
                src_url = "{tx.url('root', src)}";
                dest_url = "file:///tmp/stork-b-{os.getpid()}" ]""")
            assert code == 201, body
            job = server.wait_state(int(body["ids"][0]), timeout_s=60)  # type: ignore[index]
            assert (job["state"], job["failure_kind"]) == ("FAILED", "permanent"), job
            assert "the job carries no bearer token" in job["last_error"]


def test_a_discovered_token_file_serves_a_url_list(
        test_ca: TestCa, tx: TokenXrootdServer, export: Path, tokens: dict[str, Path],
        tmp_path: Path) -> None:
    """stork_submit run with BEARER_TOKEN_FILE: a url_list of token-protected sources gets
    that file (named on the job, not copied), and moves."""
    files = [served(export, f"listed-{i}.dat", 50_000 + i, seed=20 + i) for i in range(2)]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{tx.url('davs', f)} file://{tmp_path}/out/{f.name}\n"
                               for f in files))
    with removed_after(tmp_path / "s"), StorkServer(
            tmp_path / "s", env={"X509_CERT_DIR": str(test_ca.trust),
                                 "BEARER_TOKEN_FILE": str(tokens["all"])}) as server:
        [job_id] = server.submit(f'[ dap_type = transfer; url_list = "{listing}" ]')
        job = server.wait_state(job_id, timeout_s=120)
        ad = server.cli("stork_q", "-l", str(job_id), check=True).stdout
        kept = list((server.state / "tokens").glob("*"))
    assert job["state"] == "COMPLETED", job["last_error"]
    assert f'bearer_token_file = "{tokens["all"]}"' in ad
    assert kept == []
    for f in files:
        assert md5(tmp_path / "out" / f.name) == md5(f)


def test_an_estimation_samples_token_protected_ends_with_the_callers_tokens(
        stork_t: StorkServer, tx: TokenXrootdServer, export: Path, issuer: TokenIssuer,
        tokens: dict[str, Path], tmp_path: Path) -> None:
    """An estimation over the API names its token files like a job: another user's file is
    refused before anything is looked at. With the caller's own, the source's size is asked
    with it (the server answers nobody without a token) and the samples are gfal2's copies
    with it, each stopped at the sample's size, into scratch files removed afterwards; a
    root-to-root estimation with a token per end samples too, and a token that cannot read
    the source makes the answer a sampling failure that says so. No token in any answer."""
    src = served(export, "est.dat", 48 * MB, seed=21)
    theirs = issuer.write(tmp_path / "theirs-est.tok", owner=pwd.getpwnam("nobody").pw_uid)
    out = tmp_path / "est"
    out.mkdir()
    body = {"src_url": tx.url("root", src), "dest_url": f"file://{out}/est.dat",
            "arguments": "-s 8M"}
    refused = stork_t.api("POST", "/v1/estimate", json={**body, "bearer_token_file": str(theirs)})
    assert refused.status_code == 403, refused.text
    assert "bearer token file" in refused.text and "belongs to uid" in refused.text
    answer = stork_t.api("POST", "/v1/estimate", timeout=300,
                         json={**body, "bearer_token_file": str(tokens["all"])})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["sampler"] == "gfal2" and result["size_bytes"] == 48 * MB, result
    assert len(result["samples"]) >= 2 and result["optimal_streams"] >= 1, result
    for detail in result["sample_details"]:
        assert 8 * MB <= detail["bytes"] < 48 * MB and detail["mbps"] > 0, result
    assert list(out.iterdir()) == []  # the scratch copies are gone
    # WebDAV (the Authorization header): one flow whatever N, but sampled with the token
    web = stork_t.api("POST", "/v1/estimate", timeout=300,
                      json={**body, "src_url": tx.url("davs", src),
                            "bearer_token_file": str(tokens["all"])})
    assert web.status_code == 200, web.text
    assert web.json()["result"]["sampler"] == "gfal2", web.text
    assert web.json()["result"]["size_bytes"] == 48 * MB, web.text
    assert list(out.iterdir()) == []
    # root to root, a token per end: reads only the source's directory, writes (and
    # removes) only in the destination's
    into = export / "est-out"
    into.mkdir()
    os.chown(into, pwd.getpwnam("nobody").pw_uid, -1)
    reader = issuer.write(tmp_path / "est-reader.tok", scope="storage.read:/est.dat")
    writer = issuer.write(tmp_path / "est-writer.tok", scope="storage.create:/est-out "
                                                            "storage.modify:/est-out "
                                                            "storage.read:/est-out")
    both = {**body, "dest_url": tx.url("root", into / "est.dat"),
            "src_bearer_token_file": str(reader), "dest_bearer_token_file": str(writer)}
    answer = stork_t.api("POST", "/v1/estimate", timeout=300, json=both)
    assert answer.status_code == 200, answer.text
    third = answer.json()["result"]
    assert third["sampler"] == "gfal2" and third["size_bytes"] == 48 * MB, third
    assert all(d["bytes"] >= 8 * MB for d in third["sample_details"]), third
    assert list(into.iterdir()) == []
    # a destination token that may create but not remove: the first scratch copy stays,
    # and the answer says so instead of leaving one per sample
    no_modify = issuer.write(tmp_path / "est-create.tok", scope="storage.create:/est-out "
                                                               "storage.read:/est-out")
    stuck = stork_t.api("POST", "/v1/estimate", timeout=300,
                        json={**both, "dest_bearer_token_file": str(no_modify)})
    assert stuck.status_code != 200 and "could not be removed" in stuck.text, stuck.text
    assert len(list(into.iterdir())) == 1
    denied = stork_t.api("POST", "/v1/estimate", timeout=300,
                         json={**body, "bearer_token_file": str(tokens["other-dir"])})
    assert denied.status_code != 200
    assert "sample with" in denied.text and "failed" in denied.text, denied.text
    for text in (answer.text, denied.text, refused.text, stuck.text, web.text):
        for path in (tokens["all"], tokens["other-dir"], reader, writer, no_modify):
            assert token_value(path) not in text


def test_an_optimized_transfer_samples_its_token_protected_source(
        stork_t: StorkServer, test_ca: TestCa, tx: TokenXrootdServer, export: Path,
        tokens: dict[str, Path], tmp_path: Path) -> None:
    """optimization = "eos" on a root:// source with a token: the EOS asks the source's size
    with the job's token (the server tells nobody without one), so the sampling budget is the
    file's; without a budget it samples with gfal2 and the token into scratch copies beside
    the destination (gone afterwards), and the transfer runs with what it chose."""
    src = served(export, "opt.dat", 48 * MB, seed=23)
    out = tmp_path / "opt"
    out.mkdir()
    [budgeted] = stork_t.submit(f"""
    [ dap_type = transfer; optimization = "eos"; arguments = "-s 8M";
      bearer_token_file = "{tokens['all']}"; src_url = "{tx.url('root', src)}";
      dest_url = "file://{out}/budgeted.dat" ]""")
    job = stork_t.wait_state(budgeted, timeout_s=300)
    assert job["state"] == "COMPLETED", job["last_error"]
    assert f"({48 * MB} bytes at" in job["result"]["optimization_reason"], job["result"]
    (out / "budgeted.dat").unlink()
    with removed_after(tmp_path / "s"), StorkServer(
            tmp_path / "s", {"EOS_SAMPLING_BUDGET": "0"},
            env={"X509_CERT_DIR": str(test_ca.trust)}) as server:
        [job_id] = server.submit(f"""
        [ dap_type = transfer; optimization = "eos"; arguments = "-s 8M";
          bearer_token_file = "{tokens['all']}"; src_url = "{tx.url('root', src)}";
          dest_url = "file://{out}/opt.dat" ]""")
        job = server.wait_state(job_id, timeout_s=300)
    assert job["state"] == "COMPLETED", job["last_error"]
    result = job["result"]
    assert result["optimization_source"] == "sampled" and "eos_error" not in result, result
    assert result["eos_sampling_time_s"] > 0 and "samples in" in result["optimization_reason"]
    assert md5(out / "opt.dat") == md5(src)
    assert [p.name for p in out.iterdir()] == ["opt.dat"]
