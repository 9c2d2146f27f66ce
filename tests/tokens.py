"""Real bearer tokens for tests: a local token issuer (an EC key of its own, tokens minted
by the ``scitokens`` library in the WLCG profile) and an xrootd that checks them (Debian's
xrootd-scitokens-plugins: ``root://`` through the ztn security protocol, WebDAV through the
``Authorization`` header).

No network: the plugin fetches an issuer's public keys over HTTPS and keeps them in a SQLite
key cache (scitokens-cpp's ``$XDG_CACHE_HOME/scitokens/scitokens_cpp.sqllite``, table
``keycache``: the issuer and a JSON object with its ``jwks``, ``next_update`` and
``expires``). The issuer's key is written there before the server starts, with the server's
``XDG_CACHE_HOME`` pointing at it, so it never asks.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from tests.gsi import TestCa, XrootdServer

ISSUER = "https://issuer.stork.invalid"
OTHER_ISSUER = "https://other-issuer.stork.invalid"  # a second server's only issuer
KEY_ID = "stork-test-key"
AUDIENCE = "https://127.0.0.1"  # what the test server takes as itself
ALL_SCOPES = "storage.read:/ storage.create:/ storage.modify:/"


def scitokens_missing() -> str | None:
    """Why tokens cannot be minted here, or None."""
    try:
        import scitokens  # noqa: F401
    except ImportError as exc:
        return f"the scitokens library is missing ({exc}); run `make setup`"
    if not Path("/usr/lib/x86_64-linux-gnu/libXrdAccSciTokens-5.so").exists() and \
            not list(Path("/usr/lib").rglob("libXrdAccSciTokens*.so")):
        return "xrootd-scitokens-plugins is not installed; run `make setup`"
    return None


class TokenIssuer:
    """An issuer with one EC (P-256) key; `mint` writes WLCG tokens."""

    def __init__(self, issuer: str = ISSUER) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec

        self.issuer = issuer
        self.key = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict[str, Any]:
        import base64

        numbers = self.key.public_key().public_numbers()

        def b64(value: int) -> str:
            return base64.urlsafe_b64encode(value.to_bytes(32, "big")).rstrip(b"=").decode()

        return {"keys": [{"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig",
                          "kid": KEY_ID, "x": b64(numbers.x), "y": b64(numbers.y)}]}

    def mint(self, *, scope: str = ALL_SCOPES, audience: str = AUDIENCE,
             lifetime_s: int = 3600, expired: bool = False, **claims: Any) -> str:
        """A signed token; `expired` makes one that ended an hour ago."""
        import scitokens

        token = scitokens.SciToken(key=self.key, key_id=KEY_ID, algorithm="ES256")
        token.update_claims({"wlcg.ver": "1.0", "sub": "stork-tester", "aud": audience,
                             "scope": scope, **claims})
        if expired:
            now = int(time.time())
            token.update_claims({"iat": now - 7200, "nbf": now - 7200})
            text = token.serialize(issuer=self.issuer, lifetime=-3600)
        else:
            text = token.serialize(issuer=self.issuer, lifetime=lifetime_s)
        return text.decode() if isinstance(text, bytes) else str(text)

    def write(self, path: Path, token: str | None = None, owner: int | None = None,
              **kwargs: Any) -> Path:
        """A token file, mode 0600 (what XRootD and Stork accept), owned by `owner`."""
        path.write_text((token or self.mint(**kwargs)) + "\n")
        path.chmod(0o600)
        if owner is not None:
            os.chown(path, owner, -1)
        return path

    def preload(self, cache_home: Path, uid: int, gid: int) -> None:
        """The issuer's keys in scitokens-cpp's key cache under `cache_home`."""
        directory = cache_home / "scitokens"
        directory.mkdir(parents=True, exist_ok=True)
        now = int(time.time())
        db = sqlite3.connect(directory / "scitokens_cpp.sqllite")
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS keycache ("
                       "issuer text UNIQUE PRIMARY KEY NOT NULL, keys text NOT NULL)")
            db.execute("INSERT OR REPLACE INTO keycache VALUES (?, ?)", (
                self.issuer, json.dumps({"jwks": self.jwks(), "next_update": now + 86400,
                                         "expires": now + 2 * 86400})))
        db.close()
        for path in (cache_home, directory, *directory.iterdir()):
            os.chown(path, uid, gid)
            path.chmod(0o700 if path.is_dir() else 0o600)


class TokenXrootdServer(XrootdServer):
    """The test xrootd that asks for a token on both protocols: ``root://`` speaks only ztn,
    WebDAV passes the ``Authorization`` header to the SciTokens authorization plugin. Paths in
    a token's scopes are relative to the export (the issuer's base path). It trusts one
    issuer, `issuer`, and knows only its keys (its own key cache under `run_dir`): two
    servers with two issuers (and two exports) trust none of each other's tokens."""

    def __init__(self, ca: TestCa, export: Path, issuer: TokenIssuer,
                 pull_token: str | None = None) -> None:
        """`pull_token`: a token of the server's own that its third-party copies (it pulls
        from the source) log in to a source with, instead of the one the client logged in
        to it with (``ofs.tpc fcreds``)."""
        super().__init__(ca, export)
        self.issuer = issuer
        self.cache_home = self.run_dir / "cache"
        self.pull_token = pull_token

    def prepare(self, uid: int, gid: int) -> None:
        self.issuer.preload(self.cache_home, uid, gid)
        if self.pull_token:
            self.issuer.write(self.run_dir / "pull.tok", self.pull_token, owner=uid)
        config = self.run_dir / "scitokens.cfg"
        config.write_text(f"""[Global]
audience = {AUDIENCE}

[Issuer stork-test]
issuer = {self.issuer.issuer}
base_path = {self.export}
""")
        os.chown(config, uid, gid)

    def tpc_options(self) -> str:
        # the client's ztn token forwarded to its copies as their BEARER_TOKEN_FILE, or
        # (with a token of its own, which is its BEARER_TOKEN_FILE) under a name they do not
        # read: the copies stay delegated ones, which reach the source by the name the
        # client gave (127.0.0.1, in the host certificate), not by its IPv6-mapped address
        variable = "STORK_FORWARDED_TOKEN_FILE" if self.pull_token else "BEARER_TOKEN_FILE"
        return f"fcreds ?ztn ={variable} "

    def extra_config(self) -> str:
        return f"""ofs.authorize 1
ofs.authlib libXrdAccSciTokens.so config={self.run_dir / "scitokens.cfg"}
xrootd.seclib libXrdSec.so
sec.protocol ztn
sec.protbind * only ztn
http.header2cgi Authorization authz
"""

    def environment(self) -> dict[str, str]:
        # its third-party copies (xrdcp --server, as the server's user) speak ztn over TLS:
        # they need the copy of the CA's trust the server may read
        env = {"XDG_CACHE_HOME": str(self.cache_home),
               "X509_CERT_DIR": str(self.run_dir / "certificates")}
        if self.pull_token:
            env["BEARER_TOKEN_FILE"] = str(self.run_dir / "pull.tok")
        return env
