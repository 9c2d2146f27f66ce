"""Bearer tokens (WLCG tokens, SciTokens) for ``davs://``/``https://`` and ``root://`` ends.

A job names its token files (`BearerTokens`: one for both ends, or one per end for a third
party copy); the daemon never keeps a token in its records, only the file's path, and the
file is read again (with the owner's rights) before each attempt, so a token that something
else keeps fresh is used as it is then. `discover` is the WLCG Bearer Token Discovery order,
applied to the submitting user's environment when the job names no file.

The tools get the files, never the token: `BearerTokens.environment` names them to the gfal
helper (``STORK_BEARER_TOKENS``: which file for which URL prefix; the helper sets gfal2's
BEARER credential for HTTP, and puts an XRootD URL's token in its ``authz`` CGI, so each
end of a copy between two XRootD ends is authorized by its own token) and to XRootD's ztn
protocol (``BEARER_TOKEN_FILE``: the token a connection authenticates with, one a process).

The servers say only "denied" (HTTP 403, XRootD "Auth failed"), so a refusal is explained
from the token's own claims (`explain_refusal`): expired, no scope for the operation on the
path, an audience that does not name the server; else the server does not accept it. The
claims are read without checking the signature: that is the server's job, and the daemon
only explains. Everything here except `read_claims` is pure.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from stork.errors import (
    AccessDenied,
    BearerTokenError,
    CredentialInvalid,
    PermanentTransferError,
    RetryableTransferError,
    TokenExpired,
    TokenMissing,
    TokenNotAccepted,
    TokenScopeMissing,
    TokenUnusable,
    TransferError,
)
from stork.identity import RunAs

# the schemes whose servers take a bearer token (HTTP's Authorization header, XRootD's ztn)
TOKEN_SCHEMES = frozenset({"davs", "https", "dav", "http", "root", "xroot", "roots"})
XROOTD_SCHEMES = frozenset({"root", "xroot", "roots"})
ANY_AUDIENCES = frozenset({"https://wlcg.cern.ch/jwt/v1/any", "any", "ANY"})
# the variables a token reaches a process by (WLCG discovery); a child never inherits them
TOKEN_VARIABLES = ("BEARER_TOKEN", "BEARER_TOKEN_FILE")
HELPER_VARIABLE = "STORK_BEARER_TOKENS"  # JSON [[URL prefix, token file], ...]
MAX_TOKEN_BYTES = 64 * 1024
# a refusal in words: XRootD's failed authentication (errno EBADE, "Invalid exchange"), a
# listing refused (`stork.dataset.remote`), HTTP's
REFUSALS = ("auth failed", "invalid exchange", "permission denied", "permission refused",
            "http 401", "http 403")
_UNJUDGED = (TransferError, RetryableTransferError, PermanentTransferError)
# scopes that allow an operation (WLCG profile, then SciTokens')
READ_SCOPES = ("storage.read", "read")
WRITE_SCOPES = ("storage.create", "storage.modify", "write")


def when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def takes_token(url: str) -> bool:
    return url.partition("://")[0].lower() in TOKEN_SCHEMES


# -- where a job's token comes from ---------------------------------------------------------

@dataclass(frozen=True)
class Discovered:
    """A token found by the WLCG discovery order: a file to read at each attempt, or the
    value of ``BEARER_TOKEN`` (which the daemon must keep a copy of). `where` says which."""

    where: str
    path: str | None = None
    value: str | None = None


def discover(environ: Mapping[str, str], uid: int,
             exists: Callable[[str], bool] = os.path.isfile) -> Discovered | None:
    """The WLCG Bearer Token Discovery order: ``BEARER_TOKEN``, ``BEARER_TOKEN_FILE``,
    ``$XDG_RUNTIME_DIR/bt_u$UID``, ``/tmp/bt_u$UID``; None when none is there."""
    value = environ.get("BEARER_TOKEN", "").strip()
    if value:
        return Discovered("BEARER_TOKEN", value=value)
    named = environ.get("BEARER_TOKEN_FILE", "")
    if named:
        return Discovered("BEARER_TOKEN_FILE", path=os.path.abspath(named))
    candidates = []
    if environ.get("XDG_RUNTIME_DIR"):
        candidates.append(os.path.join(environ["XDG_RUNTIME_DIR"], f"bt_u{uid}"))
    candidates.append(f"/tmp/bt_u{uid}")  # noqa: S108 - the WLCG discovery order names it
    for path in candidates:
        if exists(path):
            return Discovered(path, path=path)
    return None


@dataclass(frozen=True)
class BearerTokens:
    """The token file of each end of a job (None: that end has none)."""

    src: str | None = None
    dest: str | None = None

    @classmethod
    def of(cls, both: str | None, src: str | None = None,
           dest: str | None = None) -> BearerTokens | None:
        """The job's files: `src` and `dest` override `both`; None when there is none."""
        tokens = cls(src or both, dest or both)
        return tokens if tokens.src or tokens.dest else None

    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f for f in (self.src, self.dest) if f))

    def environment(self, src_url: str = "", dest_url: str = "") -> dict[str, str]:
        """What a tool gets: which file for which URL prefix (`HELPER_VARIABLE`, the
        directory of each end, the longest prefix wins), and XRootD's ``BEARER_TOKEN_FILE``
        (the destination's when it is an XRootD end: the token the client's connections
        authenticate with and a third-party copy forwards; each end is authorized by its own
        token, which the helper puts in its URL's ``authz``)."""
        pairs = [[prefix_of(url) if url else "", path]  # no URL: every URL
                 for url, path in ((src_url, self.src), (dest_url, self.dest)) if path]
        env = {HELPER_VARIABLE: json.dumps(pairs)} if pairs else {}
        xrootd = (self.dest if self.dest and scheme_of(dest_url) in XROOTD_SCHEMES
                  else self.src if self.src and scheme_of(src_url) in XROOTD_SCHEMES
                  else self.dest or self.src)
        if xrootd:
            env["BEARER_TOKEN_FILE"] = xrootd
        return env


def scheme_of(url: str) -> str:
    return url.partition("://")[0].lower()


def prefix_of(url: str) -> str:
    """The part of `url` a token is chosen by: up to its last ``/`` (the directory of a
    file, a dataset's directory, the directory of a glob)."""
    scheme, _, rest = url.partition("://")
    host, _, path = rest.partition("/")
    directory = path.rpartition("/")[0]
    return f"{scheme}://{host}/" + (f"{directory}/" if directory else "")


def token_for(url: str, pairs: Sequence[Sequence[str]]) -> str | None:
    """The file of the longest prefix of `url` among `pairs` (`HELPER_VARIABLE`'s)."""
    best: tuple[int, str] | None = None
    for prefix, path in pairs:
        if url.startswith(prefix) and (best is None or len(prefix) >= best[0]):
            best = (len(prefix), path)
    return best[1] if best else None


# -- what a token says ------------------------------------------------------------------------

@dataclass(frozen=True)
class Claims:
    """The claims that decide whether a server takes a token (the signature is not
    checked here)."""

    issuer: str
    audiences: tuple[str, ...]
    scopes: tuple[str, ...]
    expires_at: float | None  # epoch seconds
    not_before: float | None = None


def parse_claims(token: str, what: str) -> Claims:
    """The claims of a JWT (header.payload.signature); TokenUnusable when it is none."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise TokenUnusable(what, "is not a JWT (three base64url parts separated by '.')")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise TokenUnusable(what, "is not a JWT (its claims are not base64url JSON)") from None
    if not isinstance(payload, dict):
        raise TokenUnusable(what, "is not a JWT (its claims are not a JSON object)")
    aud = payload.get("aud", ())
    audiences = (aud,) if isinstance(aud, str) else tuple(str(a) for a in aud or ())
    scope = payload.get("scope", "")
    scopes = tuple(str(scope).split()) if isinstance(scope, str) else ()

    def number(name: str) -> float | None:
        value = payload.get(name)
        return float(value) if isinstance(value, int | float) else None

    return Claims(str(payload.get("iss", "")), audiences, scopes, number("exp"), number("nbf"))


def check_valid(claims: Claims, what: str, now: float) -> None:
    """TokenExpired when `exp` is past (or `nbf` still ahead)."""
    if claims.expires_at is not None and claims.expires_at <= now:
        raise TokenExpired(what, f"expired at {when(claims.expires_at)}")
    if claims.not_before is not None and claims.not_before > now + 60:
        raise TokenExpired(what, f"not valid before {when(claims.not_before)}")


def read_claims(path: str, *, owner_uid: int, run_as: RunAs | None) -> Claims:
    """The claims of the token in `path`, read with the owner's rights: the owner's own
    regular file, mode 0600 (XRootD refuses a looser one). TokenUnusable otherwise."""
    from stork.transfer.proxy import read_owned

    try:
        data = read_owned(path, run_as, owner_uid, private=True)
    except CredentialInvalid as exc:
        raise TokenUnusable(path, exc.reason) from None
    if len(data) > MAX_TOKEN_BYTES:
        raise TokenUnusable(path, f"larger than {MAX_TOKEN_BYTES} bytes: not a token")
    return parse_claims(data.decode(errors="replace"), path)


def expiry_warning(path: str, claims: Claims, now: float, size_bytes: int | None,
                   rate_mbps: float) -> str | None:
    """Words for the job when the token expires before the transfer's estimated end
    (`size_bytes` at `rate_mbps`); None when it lasts, or the end cannot be told."""
    if claims.expires_at is None or size_bytes is None or rate_mbps <= 0:
        return None
    end = now + size_bytes * 8 / (rate_mbps * 1e6)
    if claims.expires_at >= end:
        return None
    return (f"bearer token {path} expires at {when(claims.expires_at)}, before the "
            f"transfer's estimated end at {when(end)} ({size_bytes} bytes at "
            f"{rate_mbps:g} Mbit/s); refresh it")


# -- why a server refused -------------------------------------------------------------------

@dataclass(frozen=True)
class End:
    """One end of a refused operation: its URL, what was done there ("read" or "write"),
    its token's file and claims (None: no token)."""

    url: str
    operation: str
    path: str | None = None
    claims: Claims | None = None


def _covers(scope_path: str, url_path: str) -> bool:
    """Whether a scope's path covers `url_path`. A server maps scope paths under its own
    base path, which the client does not know: the scope covers the URL when the URL's
    path, after some leading directories, lies under it."""
    scope_path = "/" + scope_path.strip("/")
    if scope_path == "/":
        return True
    parts = [p for p in url_path.split("/") if p]
    for start in range(len(parts)):
        rest = "/" + "/".join(parts[start:])
        if rest == scope_path or rest.startswith(scope_path + "/"):
            return True
    return False


def _scope_allows(claims: Claims, operation: str, url_path: str) -> bool:
    names = READ_SCOPES if operation == "read" else WRITE_SCOPES
    for scope in claims.scopes:
        name, _, path = scope.partition(":")
        if name in names and _covers(path or "/", url_path):
            return True
    return False


def _path_of(url: str) -> str:
    """The path a URL names on its server (root://host//path names /path)."""
    return "/" + urlsplit(url).path.lstrip("/")


def _may_replace(claims: Claims, url_path: str) -> bool:
    """Whether a scope lets the token replace a file at `url_path` (storage.create only
    makes new ones)."""
    return any(name in WRITE_SCOPES[1:] and _covers(path or "/", url_path)
               for name, _, path in (scope.partition(":") for scope in claims.scopes))


def _storage_scopes(claims: Claims) -> str:
    return " ".join(s for s in claims.scopes if s.partition(":")[0] in
                    (*READ_SCOPES, *WRITE_SCOPES, "storage.stage"))


def _audience_names(audience: str, host: str) -> bool:
    if audience in ANY_AUDIENCES:
        return True
    if "://" in audience:
        named = urlsplit(audience).hostname or ""
    else:  # a host, or HOST:PORT
        named = audience.rpartition(":")[0] if audience.count(":") == 1 else audience
    return named.lower() == host.lower()


def is_refusal(failure: TransferError) -> bool:
    """Whether a failure is a server refusing access: judged so (HTTP 401/403, EACCES), or
    not judged at all (no errno the tables know) and saying so in words (XRootD's failed
    authentication). A failure judged as something else (the network) is none."""
    if isinstance(failure, AccessDenied):
        return True
    text = str(failure).lower()
    return type(failure) in _UNJUDGED and any(words in text for words in REFUSALS)


def explain(end: End, now: float, said: str = "") -> BearerTokenError | None:
    """Why `end`'s server refused it (`said`: the server's words), from its token's claims;
    None when they do not explain it (the token is as it should be for this end)."""
    if not takes_token(end.url):
        return None
    if end.claims is None or end.path is None:
        return TokenMissing(end.url, said)
    what, claims = end.path, end.claims
    try:
        check_valid(claims, what, now)
    except TokenExpired as exc:
        return exc
    url = urlsplit(end.url)
    path = _path_of(end.url)
    if not _scope_allows(claims, end.operation, path):
        names = READ_SCOPES[:1] if end.operation == "read" else WRITE_SCOPES[:2]
        needed = " or ".join(names)
        return TokenScopeMissing(what, end.operation, path, needed, _storage_scopes(claims))
    host = url.hostname or ""
    if claims.audiences and not any(_audience_names(a, host) for a in claims.audiences):
        return TokenNotAccepted(what, f"{end.url.split('://')[0]}://{url.netloc} refused it: "
                                      f"its audience ({', '.join(claims.audiences)}) does not "
                                      f"name that server")
    return None


def explain_refusal(failure: TransferError, ends: Sequence[End],
                    now: float | None = None) -> TransferError:
    """The failure a refusal really is, judged from the tokens of `ends` (the source read,
    the destination written); `failure` itself when it is no refusal, or when no end takes
    a token. A refusal the claims cannot explain is the server not accepting the token
    (`TokenNotAccepted`, naming its issuer), with the server's words."""
    if not is_refusal(failure) or not any(takes_token(e.url) for e in ends):
        return failure
    now = time.time() if now is None else now
    said = " ".join(str(failure).split())[-300:]
    for end in ends:
        found = explain(end, now, said)
        if found is not None:
            return found
    with_token = [e for e in ends if e.claims is not None and e.path and takes_token(e.url)]
    if not with_token:
        return failure
    end = with_token[-1]
    assert end.claims is not None and end.path is not None
    path = _path_of(end.url)
    only_creates = "" if end.operation != "write" or _may_replace(end.claims, path) else (
        f"; or a file is already at {path}: this token may only create files there "
        f"(storage.create), and replacing one, even what a failed earlier try left, needs "
        f"storage.modify")
    return TokenNotAccepted(end.path, f"refused (issuer {end.claims.issuer or '?'}, audience "
                                      f"{', '.join(end.claims.audiences) or 'none'}): the "
                                      f"server may not trust the issuer{only_creates}; it "
                                      f"said: {failure}")


# -- before an attempt ------------------------------------------------------------------------

@dataclass(frozen=True)
class TokenFacts:
    """A job's token files and their claims, read before an attempt."""

    tokens: BearerTokens | None
    claims: Mapping[str, Claims]
    judges: bool = True  # False: a refusal is left as it was (a job with a proxy, no token)

    @property
    def src_file(self) -> str | None:
        return self.tokens.src if self.tokens else None

    def ends(self, src_url: str, dest_url: str) -> tuple[End, End]:
        """The source (read) and the destination (written), each with its token."""
        src = self.tokens.src if self.tokens else None
        dest = self.tokens.dest if self.tokens else None
        return (End(src_url, "read", src, self.claims.get(src or "")),
                End(dest_url, "write", dest, self.claims.get(dest or "")))

    def explain(self, failure: TransferError, src_url: str, dest_url: str,
                now: float | None = None) -> TransferError:
        if not self.judges:
            return failure
        return explain_refusal(failure, self.ends(src_url, dest_url), now)


NO_TOKENS = TokenFacts(None, {})
PROXY_ONLY = TokenFacts(None, {}, judges=False)


def check_tokens(tokens: BearerTokens | None, src_url: str, dest_url: str, *,
                 owner_uid: int, run_as: RunAs | None, x509proxy: str | None = None,
                 now: float | None = None) -> TokenFacts:
    """The claims of the files the ends that take tokens use, read with the owner's rights;
    TokenUnusable or TokenExpired (before any byte moves) when one cannot work. A job with
    an `x509proxy` and no token is not judged as one (its refusals stay the proxy's)."""
    if tokens is None:
        return PROXY_ONLY if x509proxy else NO_TOKENS
    now = time.time() if now is None else now
    claims: dict[str, Claims] = {}
    for url, path in ((src_url, tokens.src), (dest_url, tokens.dest)):
        if path and path not in claims and takes_token(url):
            claims[path] = read_claims(path, owner_uid=owner_uid, run_as=run_as)
            check_valid(claims[path], path, now)
    return TokenFacts(tokens, claims)
