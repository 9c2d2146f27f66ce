"""Remote ends through gfal2, the field's multi-protocol data-management library.

This file runs under the system Python that holds Debian's gfal2 bindings (``python3-gfal2``,
`GFAL_PYTHON`), not under Stork's own interpreter, so it imports nothing from Stork: it is
started as a child process (``GFAL_PYTHON -I gfalhelper.py OP ...``) by `stork.transfer.remote`
and by the gfal transfer module, with the rights of the job's owner and the job's proxy in
``X509_USER_PROXY``, its bearer tokens' files in ``STORK_BEARER_TOKENS`` (JSON pairs of a
URL prefix and a token file, `stork.transfer.tokens`): each context carries gfal2's BEARER
credential for the HTTP prefixes, and an XRootD URL is reached with its prefix's file in
``BEARER_TOKEN_FILE`` (XRootD's ztn reads it; one token a process at a time); a copy
and an XRootD URL also carries its own token in its ``authz`` CGI (so each end of a copy or
of one helper run is authorized by its own token), inside this process only: everything it
writes back is scrubbed of them. Before a copy between two XRootD servers, each is logged in
to with its own end's token (`_log_in_each_end`). gfal2's
plugins speak GridFTP (``gsiftp://``, ``ftp://``), XRootD
(``root://``) and HTTP/WebDAV (``http(s)://``, ``dav(s)://``); ``file://`` too.

Operations (one JSON object a line on stdout, for the metadata ones):

    stat URL...          {"url", "size", "dir"} or {"url", "errno", "error"}
    list URL             {"name", "size", "dir"} per entry, then {"end": true}
                         (or {"url", "errno", "error"})
    checksum TYPE URL... {"url", "type", "value"} or {"url", "errno", "error"}
    rm URL...            {"url"} or {"url", "errno", "error"} (a missing file is no error)
    mkdir URL            {"url"} or {"url", "errno", "error"} (parents made too)
    copy [--streams N] [--timeout S] [--checksum TYPE[:VALUE]] SRC DEST
                         -vb progress lines on stdout, gfal2's error on stderr, and the exit
                         status of Stork's convention (`stork.transfer.failures`)
    copylist [--streams N] [--timeout S] [--parallel CC]
                         the ``SRC DEST [TYPE[:VALUE]]`` lines of stdin (a pair as ``copy``
                         takes it, and the checksum to compare as its ``--checksum``), CC
                         at a time: per line, in the order they end, {"line", "size"} or
                         {"line", "errno", "error", "exit"}; exit 0
    serve [--timeout S]  one copy a line of stdin as the lines come, every copy on one context,
                         which keeps GridFTP sessions between copies (the gridftp plugin's
                         SESSION_REUSE): a line is {"src", "dest", "streams", "checksum"};
                         per copy, {"progress": bytes} as it moves, then {"size"} or
                         {"errno", "error", "exit"}; exit 0 at the end of input

``copy`` is gfal2's own copy (what ``gfal-copy`` and FTS3 run): third-party where both ends
allow it (GridFTP to GridFTP, XRootD to XRootD, WebDAV COPY), streamed through this process
otherwise; with ``--checksum`` gfal2 compares the ends' checksums of that type (and both
with VALUE when given) after the copy.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import sys
import threading
import time
from typing import Any

# Stork's exit-status convention (kept equal to stork.transfer.failures by a test)
EXIT_RETRYABLE = 1
EXIT_PERMANENT = 2
EXIT_NOT_FOUND = 3
EXIT_ACCESS_DENIED = 4
EXIT_DESTINATION_FULL = 5
EXIT_BAD_URL = 6
EXIT_CHECKSUM = 7  # the copy ended but the checksums differ (the destination is bad)

_EXIT_BY_ERRNO = {
    errno.ENOENT: EXIT_NOT_FOUND, errno.ENOTDIR: EXIT_NOT_FOUND,
    errno.EACCES: EXIT_ACCESS_DENIED, errno.EPERM: EXIT_ACCESS_DENIED,
    errno.EROFS: EXIT_ACCESS_DENIED,
    errno.ENOSPC: EXIT_DESTINATION_FULL, errno.EDQUOT: EXIT_DESTINATION_FULL,
    errno.EFBIG: EXIT_DESTINATION_FULL,
    errno.EISDIR: EXIT_BAD_URL, errno.EPROTONOSUPPORT: EXIT_BAD_URL,
    errno.EEXIST: EXIT_PERMANENT, errno.EINVAL: EXIT_PERMANENT,
}
_CHECKSUM_WORDS = ("checksum", "Checksum", "CHECKSUM")


_HTTP_SCHEMES = ("davs", "https", "dav", "http")
_XROOTD_SCHEMES = ("root", "xroot", "roots")


def _token_pairs() -> list[tuple[str, str]]:
    """The (URL prefix, token file) pairs the daemon named; empty when none."""
    try:
        pairs = json.loads(os.environ.get("STORK_BEARER_TOKENS", "[]"))
        return [(str(prefix), str(path)) for prefix, path in pairs]
    except (ValueError, TypeError):
        return []


def _token_file(url: str, pairs: list[tuple[str, str]]) -> str | None:
    """The file of the longest prefix of `url` (as `stork.transfer.tokens.token_for`)."""
    best: tuple[int, str] | None = None
    for prefix, path in pairs:
        if url.startswith(prefix) and (best is None or len(prefix) >= best[0]):
            best = (len(prefix), path)
    return best[1] if best else None


def _context(gfal2: Any) -> Any:
    """A gfal2 context with the job's bearer tokens as BEARER credentials of their HTTP
    prefixes (under each HTTP scheme's name: gfal2 looks a URL up as it is written). The
    token is read here, as the job's owner, and goes no further than gfal2."""
    ctx = gfal2.creat_context()
    for prefix, path in _token_pairs():
        scheme, _, rest = prefix.partition("://")
        if prefix and scheme not in _HTTP_SCHEMES:  # "": every URL
            continue
        token = _read_token(path)
        if token is None:
            continue
        for name in _HTTP_SCHEMES:
            ctx.cred_set(f"{name}://{rest}", ctx.cred_new("BEARER", token))
    return ctx


def _xrootd_token(url: str) -> None:
    """Before reaching an XRootD `url`: its prefix's token file in ``BEARER_TOKEN_FILE``."""
    if url.partition("://")[0] in _XROOTD_SCHEMES:
        path = _token_file(url, _token_pairs())
        if path:
            os.environ["BEARER_TOKEN_FILE"] = path


# one login at a time: BEARER_TOKEN_FILE is the process's (copylist's threads share it)
_LOGIN_LOCK = threading.Lock()
_LOGGED_IN: set[str] = set()  # the XRootD servers ("host:port") `_log_in_each_end` reached


def _server(url: str) -> str:
    """An XRootD URL's server, ``host:port`` (the XRootD client's one connection there)."""
    return url.partition("://")[2].partition("/")[0].rpartition("@")[2]


def _log_in_each_end(ctx: Any, src: str, dest: str) -> None:
    """Before a copy between XRootD ends on two servers, each server is reached once with
    its own end's token file in ``BEARER_TOKEN_FILE`` (a stat, whatever it answers): the
    XRootD client authenticates (ztn) on its first request to a server and keeps that one
    connection for every later request there in this process (`main` keeps idle ones for
    the process's life), the copy's own open of the source and its checksums included, so
    each server sees the token of its own end, whose issuer it trusts, and not the
    destination's for both. ``BEARER_TOKEN_FILE`` is left as the destination's: the token a
    pulling destination is given to log in to the source with (``ofs.tpc fcreds``) is the
    one the client logged in to it with, which only the servers' configuration decides.
    Two ends on one server share one login (each is still authorized by its ``authz``)."""
    ends = [url for url in (src, dest) if url.partition("://")[0] in _XROOTD_SCHEMES]
    if len(ends) < 2 or _server(src) == _server(dest):
        return
    with _LOGIN_LOCK:
        for url in ends:
            if _server(url) in _LOGGED_IN:
                continue
            _xrootd_token(url)
            reached = _gfal_url(url)
            # the XRootD client keys a connection by its server and the URL's
            # xrdcl.intent: gfal2's copy reaches both ends with intent=tpc, its stats and
            # checksums without; a stat of each logs in both (whatever it answers: only the
            # login matters, and a new destination is not there yet)
            for seen in (reached, f"{reached}{'&' if '?' in reached else '?'}xrdcl.intent=tpc"):
                with contextlib.suppress(Exception):
                    ctx.stat(seen)
            _LOGGED_IN.add(_server(url))
        _xrootd_token(dest)


def _read_token(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError as exc:
        sys.stderr.write(f"bearer token {path}: {exc.strerror}\n")
        return None


# the token values this process put into URLs (`_gfal_url`): scrubbed from every word
# it writes (`_scrub`, `_StderrScrubber`)
_SECRETS: set[str] = set()
_AUTHZ = re.compile(r"(authz=)[^&\s'\"]*", re.IGNORECASE)
HIDDEN = "<hidden>"


def _scrub(text: str) -> str:
    """`text` without a token this process put into a URL (nor any ``authz`` value)."""
    for secret in _SECRETS:
        text = text.replace(secret, HIDDEN)
    return _AUTHZ.sub(r"\1" + HIDDEN, text)


def _gfal_url(url: str) -> str:
    """`url` as gfal2 gets it: an XRootD URL with its token in its ``authz`` CGI, which
    XRootD's SciTokens plugin authorizes by before the token the connection authenticated
    with (ztn reads one token a process, and the XRootD client shares one connection to a
    server between URLs), and which the destination of a third-party copy passes on to the
    source with the rest of the source's CGI: each end is authorized by its own token. Only
    in this process: never in an argv, and every word written back is scrubbed of it
    (`_scrub`, `_StderrScrubber`)."""
    if url.partition("://")[0] not in _XROOTD_SCHEMES:
        return url
    path = _token_file(url, _token_pairs())
    token = _read_token(path) if path else None
    if not token:
        return url
    _SECRETS.add(token)
    return f"{url}{'&' if '?' in url else '?'}authz=Bearer%20{token}"


class _StderrScrubber:
    """While a copy may carry tokens in its URLs: file descriptor 2 (gfal2's and the XRootD
    client's own messages, written below Python) goes through a pipe, and each line reaches
    the real stderr scrubbed (`_scrub`)."""

    def __enter__(self) -> _StderrScrubber:
        sys.stderr.flush()
        self._real = os.dup(2)
        reader, writer = os.pipe()
        os.dup2(writer, 2)
        os.close(writer)
        self._thread = threading.Thread(target=self._pump, args=(reader,), daemon=True)
        self._thread.start()
        return self

    def _pump(self, reader: int) -> None:
        with os.fdopen(reader, "rb") as pipe:
            for line in pipe:
                os.write(self._real, _scrub(line.decode(errors="replace")).encode())

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self._real, 2)  # the pipe's last writer closed: the pump ends
        self._thread.join(5)
        os.close(self._real)


def _error(url: str, exc: Any) -> dict[str, Any]:
    return {"url": _scrub(url), "errno": int(getattr(exc, "code", 0) or 0),
            "error": _scrub(" ".join(str(getattr(exc, "message", exc)).split()))}


def _mismatch(record: dict[str, Any]) -> bool:
    """Whether a failed copy's error is its checksums differing: gfal2's words, or the
    XRootD client's ``CheckSum error`` (EILSEQ)."""
    return record["errno"] == errno.EILSEQ or (
        any(w in record["error"] for w in _CHECKSUM_WORDS)
        and "mismatch" in record["error"].lower())


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _is_dir(mode: int) -> bool:
    return (mode & 0o170000) == 0o040000


def op_stat(ctx: Any, urls: list[str]) -> int:
    for url in urls:
        _xrootd_token(url)
        try:
            st = ctx.stat(_gfal_url(url))
            _emit({"url": url, "size": int(st.st_size), "dir": _is_dir(st.st_mode)})
        except Exception as exc:  # noqa: BLE001 - gfal2.GError, reported per URL
            _emit(_error(url, exc))
    return 0


def op_list(ctx: Any, url: str) -> int:
    _xrootd_token(url)
    try:
        directory = ctx.opendir(_gfal_url(url))
        while True:
            entry, st = directory.readpp()
            if entry is None:
                break
            if entry.d_name in (".", ".."):
                continue
            _emit({"name": entry.d_name, "size": int(st.st_size), "dir": _is_dir(st.st_mode)})
    except Exception as exc:  # noqa: BLE001
        _emit(_error(url, exc))
        return 0
    _emit({"end": True})
    return 0


def op_checksum(ctx: Any, kind: str, urls: list[str]) -> int:
    for url in urls:
        _xrootd_token(url)
        try:
            # as the server gave it: a base64 digest (WebDAV) must keep its case
            value = str(ctx.checksum(_gfal_url(url), kind)).strip()
            _emit({"url": url, "type": kind, "value": value})
        except Exception as exc:  # noqa: BLE001
            _emit(_error(url, exc))
    return 0


def op_rm(ctx: Any, urls: list[str]) -> int:
    for url in urls:
        _xrootd_token(url)
        try:
            ctx.unlink(_gfal_url(url))
            _emit({"url": url})
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "code", None) == errno.ENOENT:
                _emit({"url": url})
            else:
                _emit(_error(url, exc))
    return 0


def op_mkdir(ctx: Any, url: str) -> int:
    _xrootd_token(url)
    try:
        ctx.mkdir_rec(_gfal_url(url), 0o755)
        _emit({"url": url})
    except Exception as exc:  # noqa: BLE001
        if getattr(exc, "code", None) == errno.EEXIST:
            _emit({"url": url})
        else:
            _emit(_error(url, exc))
    return 0


def _progress(done: int, avg_mbyte_s: float, inst_mbyte_s: float) -> None:
    # the globus-url-copy -vb line that stork.transfer.base.parse_progress reads
    sys.stdout.write(f"{done:>15} bytes {avg_mbyte_s:>12.2f} MB/sec avg "
                     f"{inst_mbyte_s:>12.2f} MB/sec inst\n")
    sys.stdout.flush()


def op_copy(gfal2: Any, ctx: Any, args: list[str]) -> int:
    streams, timeout_s, checksum = 1, 0, ""
    while args and args[0].startswith("--"):
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--streams":
            streams = int(value)
        elif flag == "--timeout":
            timeout_s = int(value)
        elif flag == "--checksum":
            checksum = value
        else:
            sys.stderr.write(f"unknown option {flag}\n")
            return EXIT_PERMANENT
    if len(args) != 2:
        sys.stderr.write("usage: copy [--streams N] [--timeout S] [--checksum TYPE[:VALUE]] "
                         "SRC DEST\n")
        return EXIT_PERMANENT
    src, dest = args
    params = _transfer_parameters(gfal2, ctx, streams, timeout_s, checksum)
    start = time.monotonic()

    def monitor(_src: Any, _dst: Any, average: float, instant: float, transferred: int,
                _elapsed: int) -> None:
        _progress(int(transferred), average / 2**20, instant / 2**20)

    params.monitor_callback = monitor
    _log_in_each_end(ctx, src, dest)
    try:
        ctx.filecopy(params, _gfal_url(src), _gfal_url(dest))
    except Exception as exc:  # noqa: BLE001 - gfal2.GError: judged by its errno
        record = _error(src, exc)
        sys.stderr.write(f"gfal2 copy error: {record['errno']} "
                         f"({errno.errorcode.get(record['errno'], '?')}): {record['error']}\n")
        if checksum and _mismatch(record):
            return EXIT_CHECKSUM
        return _EXIT_BY_ERRNO.get(record["errno"], EXIT_RETRYABLE)
    try:
        size = int(ctx.stat(_gfal_url(dest)).st_size)
    except Exception:  # noqa: BLE001 - the size is for the progress line only
        size = 0
    elapsed = max(time.monotonic() - start, 1e-6)
    _progress(size, size / elapsed / 2**20, 0.0)
    return 0


def _transfer_parameters(gfal2: Any, ctx: Any, streams: int, timeout_s: int,
                         checksum: str) -> Any:
    """A copy's parameters: overwrite, parent directories made, `streams` streams, the
    timeout when given, and the checksum check when asked."""
    params = ctx.transfer_parameters()
    params.overwrite = True
    params.create_parent = True
    params.nbstreams = streams
    if timeout_s:
        params.timeout = timeout_s
    if checksum:
        _set_checksum(gfal2, params, checksum)
    return params


def _set_checksum(gfal2: Any, params: Any, checksum: str) -> None:
    """TYPE: the ends' checksums compared; TYPE:VALUE: both with VALUE."""
    kind, _, value = checksum.partition(":")
    mode = gfal2.checksum_mode.both if not value else gfal2.checksum_mode.target
    params.set_checksum(mode, kind.upper(), value)


def _copy_one(gfal2: Any, streams: int, timeout_s: int, line: int, src: str,
              dest: str, checksum: str = "") -> dict[str, Any]:
    """One pair of a list, with a context of its own (one per thread)."""
    ctx = _context(gfal2)
    params = _transfer_parameters(gfal2, ctx, streams, timeout_s, checksum)
    return _copy_with(ctx, params, line, src, dest, checksum)


def _copy_with(ctx: Any, params: Any, line: int, src: str, dest: str,
               checksum: str) -> dict[str, Any]:
    """One copy's answer: {"line", "size"} or {"line", "errno", "error", "exit"}."""
    _log_in_each_end(ctx, src, dest)
    try:
        ctx.filecopy(params, _gfal_url(src), _gfal_url(dest))
    except Exception as exc:  # noqa: BLE001 - gfal2.GError: reported for its pair
        record = _error(src, exc)
        code = _EXIT_BY_ERRNO.get(record["errno"], EXIT_RETRYABLE)
        if checksum and _mismatch(record):
            code = EXIT_CHECKSUM
        return {"line": line, "errno": record["errno"], "error": record["error"],
                "exit": code}
    try:
        size = int(ctx.stat(_gfal_url(dest)).st_size)
    except Exception as exc:  # noqa: BLE001 - copied, yet not there to be seen
        record = _error(dest, exc)
        return {"line": line, "errno": record["errno"],
                "error": f"copied, but the destination cannot be stat'ed: {record['error']}",
                "exit": EXIT_RETRYABLE}
    return {"line": line, "size": size}


def op_copylist(gfal2: Any, args: list[str], text: str) -> int:
    from concurrent.futures import ThreadPoolExecutor, as_completed

    streams, timeout_s, parallel = 1, 0, 1
    while args and args[0].startswith("--") and len(args) >= 2:
        flag, value, args = args[0], int(args[1]), args[2:]
        if flag == "--streams":
            streams = value
        elif flag == "--timeout":
            timeout_s = value
        elif flag == "--parallel":
            parallel = max(value, 1)
        else:
            sys.stderr.write(f"unknown option {flag}\n")
            return EXIT_PERMANENT
    if args:
        sys.stderr.write("usage: copylist [--streams N] [--timeout S] [--parallel CC] "
                         "< pairs\n")
        return EXIT_PERMANENT
    pairs: list[tuple[Any, ...]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if len(fields) not in (2, 3):
            sys.stderr.write(f"line {number}: expected SRC DEST [TYPE[:VALUE]]\n")
            return EXIT_PERMANENT
        pairs.append((number, *fields))
    with ThreadPoolExecutor(max_workers=min(parallel, max(len(pairs), 1))) as pool:
        futures = [pool.submit(_copy_one, gfal2, streams, timeout_s, *pair) for pair in pairs]
        for future in as_completed(futures):
            _emit(future.result())
    return 0


def op_serve(gfal2: Any, ctx: Any, args: list[str]) -> int:
    timeout_s = int(args[1]) if args[:1] == ["--timeout"] and len(args) == 2 else 0
    while raw := sys.stdin.readline():
        try:
            ask = json.loads(raw)
            src, dest = str(ask["src"]), str(ask["dest"])
            streams, checksum = int(ask.get("streams", 1)), str(ask.get("checksum", ""))
        except (ValueError, KeyError, TypeError) as exc:
            _emit({"errno": errno.EINVAL, "error": f"not a copy: {exc}", "exit": EXIT_PERMANENT})
            continue
        params = _transfer_parameters(gfal2, ctx, streams, timeout_s, checksum)
        params.monitor_callback = lambda _s, _d, _a, _i, done, _e: _emit({"progress": int(done)})
        _emit(_copy_with(ctx, params, 0, src, dest, checksum))
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: gfalhelper.py stat|list|checksum|rm|mkdir|copy|copylist|serve "
                         "...\n")
        return EXIT_PERMANENT
    # Stork retries failed attempts itself (with backoff, and alt_protocols): the XRootD
    # client's own reconnection (5 tries over 2 minutes each by default) would only hide an
    # unreachable server; the environment may still set other values
    os.environ.setdefault("XRD_CONNECTIONRETRY", "1")
    os.environ.setdefault("XRD_CONNECTIONWINDOW", "30")
    # a connection stays logged in with the token it was opened with
    # (`_log_in_each_end`): idle ones are kept for the process's life (default 5 minutes,
    # which a long third-party copy, silent towards the source, would pass)
    os.environ.setdefault("XRD_DATASERVERTTL", str(7 * 86400))
    os.environ.setdefault("XRD_LOADBALANCERTTL", str(7 * 86400))
    try:
        import gfal2  # type: ignore[import-not-found]
    except ImportError as exc:
        sys.stderr.write(f"the gfal2 Python bindings are missing (Debian package python3-gfal2):"
                         f" {exc}\n")
        return EXIT_PERMANENT
    ctx = _context(gfal2)
    op, rest = argv[0], argv[1:]
    if _token_pairs():
        with _StderrScrubber():
            return _operation(gfal2, ctx, op, rest)
    return _operation(gfal2, ctx, op, rest)


def _operation(gfal2: Any, ctx: Any, op: str, rest: list[str]) -> int:
    if op == "stat":
        return op_stat(ctx, rest)
    if op == "list" and len(rest) == 1:
        return op_list(ctx, rest[0])
    if op == "checksum" and len(rest) >= 2:
        return op_checksum(ctx, rest[0].upper(), rest[1:])
    if op == "rm":
        return op_rm(ctx, rest)
    if op == "mkdir" and len(rest) == 1:
        return op_mkdir(ctx, rest[0])
    if op == "copy":
        return op_copy(gfal2, ctx, rest)
    if op == "copylist":
        return op_copylist(gfal2, rest, sys.stdin.read())
    if op == "serve":
        return op_serve(gfal2, ctx, rest)
    sys.stderr.write(f"unknown operation {op!r}\n")
    return EXIT_PERMANENT


if __name__ == "__main__":
    # gfal2's GridFTP plugin tears Globus down at the interpreter's exit, and over GSI that
    # aborted about 3% of runs (`free(): invalid pointer`, or SIGSEGV) after every answer had
    # been written: an end asked twice could then fail a job's verification. Every answer is
    # out and every file closed when `main` returns, so the process ends here, the kernel
    # closing its connections.
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
