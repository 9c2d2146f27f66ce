"""Thin client of the stork_server API (Unix socket or TCP).

A server that is busy answers 503 with Retry-After: the client waits (jittered, doubling,
at least what the server asked) and tries again, saying so on stderr. Waiting for a job is a
long poll that the server answers when the job changes; a lost connection is re-made.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from stork.config import Settings
from stork.errors import ApiError, ServerUnreachable
from stork.urls import parse_hostport

DEFAULT_TIMEOUT_S = 60.0
BUSY_RETRY_FOR_S = 600.0  # how long a command keeps retrying a busy (503) server
WAIT_POLL_S = 55.0  # what a long poll asks the server to wait (STORK_API_WAIT_TIMEOUT caps it)
RECONNECT_FOR_S = 600.0  # how long a waiting command tries to reach a server that went away
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def resolve_server(name: str | None, settings: Settings) -> str:
    """Where to talk: `-name` or the ad's stork_server, else the configured socket.

    A name containing "/" is a Unix socket path; HOST:PORT is the TCP API; a bare host that
    is this machine means the local socket.
    """
    if not name:
        return settings.socket
    if "/" in name:
        return name
    try:
        return str(parse_hostport(name))  # HOST:PORT
    except ValueError:
        pass
    try:
        host = parse_hostport(name, default_port=1).host  # a bare HOST (the port is unused)
    except ValueError as exc:
        raise ApiError(f"stork_server {name!r}: {exc}") from None
    if host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn()):
        return settings.socket
    raise ApiError(f"stork_server {name!r} is a remote host without a port; "
                   "write HOST:PORT (the server's STORK_API_ADDRESS)")


def _token(settings: Settings) -> str | None:
    if not settings.api_token_file:
        return None
    try:
        return open(settings.api_token_file).read().strip()
    except OSError:
        return None


def say(message: str) -> None:
    """A notice on stderr, named by the command that prints it."""
    print(f"{os.path.basename(sys.argv[0]) or 'stork'}: {message}", file=sys.stderr, flush=True)


def backoff_s(attempt: int, floor_s: float = 0.0, cap_s: float = 8.0) -> float:
    """Delay before retry `attempt` (1-based): `floor_s` (the server's Retry-After) plus a
    jittered doubling share, so clients refused together do not come back together."""
    return floor_s + random.uniform(0.5, 1.0) * min(cap_s, 0.5 * 2.0 ** (attempt - 1))


class Client:
    def __init__(self, target: str, token: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 notice: Callable[[str], None] = say,
                 busy_retry_for_s: float = BUSY_RETRY_FOR_S) -> None:
        self.target = target
        self.notice = notice
        self.busy_retry_for_s = busy_retry_for_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if "/" in target:
            transport = httpx.HTTPTransport(uds=target)
            base = "http://stork"
        else:
            transport = httpx.HTTPTransport()
            base = f"http://{target}"
        self._http = httpx.Client(transport=transport, base_url=base, timeout=timeout_s,
                                  headers=headers)

    @classmethod
    def from_settings(cls, settings: Settings, name: str | None = None) -> Client:
        target = resolve_server(name, settings)
        return cls(target, _token(settings) if "/" not in target else None)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        deadline = time.monotonic() + self.busy_retry_for_s
        attempt = 0
        while True:
            response = self._request(method, path, **kwargs)
            if response.status_code != 503:
                return self._body(response)
            attempt += 1
            floor = _retry_after_s(response)
            delay = backoff_s(attempt, floor)
            if time.monotonic() + delay > deadline:
                return self._body(response)  # raises ApiError with the server's words
            self.notice(f"stork_server at {self.target} is busy (503: "
                        f"{_error_text(response)}); retrying in {delay:.1f} s")
            time.sleep(delay)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(
                f"cannot reach stork_server at {self.target}: {exc or type(exc).__name__} "
                "(is stork_server running with the same configuration?)") from None

    def _body(self, response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            raise ApiError(f"stork_server at {self.target} sent a response that is not JSON "
                           f"(HTTP {response.status_code})", status=response.status_code) from None
        if response.status_code >= 400:
            raise ApiError(body.get("error", f"HTTP {response.status_code}"),
                           status=response.status_code)
        return dict(body)

    def wait(self, job_id: int, since: int = 0, terminal: bool = False,
             timeout_s: float = WAIT_POLL_S, files_seen: int | None = None) -> dict[str, Any]:
        """One long poll: returns when job `job_id` has an event newer than `since` (with
        `terminal`, when it has ended), when a dataset has more files ended than
        `files_seen` (its `files_done + files_failed` last seen), or when the server's wait
        runs out. The answer has `job`, `seq` (pass it as `since` next time), `changed` and
        `ended`."""
        params: dict[str, Any] = {"since": since, "terminal": int(terminal), "timeout": timeout_s}
        if files_seen is not None:
            params["files"] = files_seen
        return self._call("GET", f"/v1/jobs/{job_id}/wait", params=params,
                          timeout=timeout_s + DEFAULT_TIMEOUT_S)

    def wait_ended(self, job_id: int) -> dict[str, Any]:
        """The job's summary once it has ended. Long polls, asked again when the server's
        wait runs out; a server that went away (restart) is reconnected to with backoff."""
        *_, last = self.follow(job_id, terminal=True)
        return dict(last["job"])

    def follow(self, job_id: int, *, terminal: bool = False) -> Iterator[dict[str, Any]]:
        """The answers of successive long polls, until one says the job ended (that one
        included). Without `terminal`, each asks for news after the last answer: a newer
        event (`since` its `seq`) or more of a dataset's files ended (`files_seen`). A
        server that went away (restart) is reconnected to with backoff, for up to
        RECONNECT_FOR_S."""
        seq, files_seen = 0, None
        lost_since: float | None = None
        attempt = 0
        while True:
            try:
                answer = self.wait(job_id, since=seq, terminal=terminal, files_seen=files_seen)
            except ServerUnreachable as exc:
                now = time.monotonic()
                lost_since = lost_since if lost_since is not None else now
                if now - lost_since > RECONNECT_FOR_S:
                    raise
                attempt += 1
                delay = backoff_s(attempt)
                self.notice(f"{exc}; reconnecting in {delay:.1f} s")
                time.sleep(delay)
                continue
            lost_since, attempt = None, 0
            if not terminal:
                seq = answer["seq"]
                files_seen = answer["job"]["files_done"] + answer["job"]["files_failed"]
            yield answer
            if answer["ended"]:
                return

    def ping(self) -> dict[str, Any]:
        return self._call("GET", "/v1/ping")

    def submit(self, text: str, filename: str, iwd: str, lognotes: str | None = None,
               dry_run: bool = False, datasets: dict[str, Any] | None = None,
               bearer_token: dict[str, str] | None = None) -> list[int]:
        """Queue the ads of a submit file; `datasets` carries the files of the datasets
        stork_submit listed (`stork.dataset.wire`), by ad number; `bearer_token` the token
        the WLCG discovery found for ads that name none ({"where", "path"} or
        {"where", "value"})."""
        body: dict[str, Any] = {"text": text, "filename": filename, "iwd": iwd,
                                "lognotes": lognotes, "dry_run": dry_run,
                                "datasets": datasets or {}}
        if bearer_token:
            body["bearer_token"] = bearer_token
        return list(self._call("POST", "/v1/jobs", json=body)["ids"])

    def jobs(self, constraint: str | None = None, long: bool = False,
             states: list[str] | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {}
        if constraint:
            params["constraint"] = constraint
        if long:
            params["long"] = "1"
        if states:
            params["state"] = states
        return list(self._call("GET", "/v1/jobs", params=params)["jobs"])

    def job_rows(self, columns: list[str], constraint: str | None = None,
                 states: list[str] | None = None) -> list[dict[str, Any]]:
        """Like `jobs`, with only `columns`: sent as rows (a third of the bytes and of the
        parsing for a queue of 100,000 jobs) and handed back as dicts of those fields."""
        params: dict[str, Any] = {"columns": ",".join(columns)}
        if constraint:
            params["constraint"] = constraint
        if states:
            params["state"] = states
        body = self._call("GET", "/v1/jobs", params=params)
        names = body["columns"]
        return [dict(zip(names, row, strict=True)) for row in body["rows"]]

    def status(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def files(self, job_id: int, states: list[str] | None = None, offset: int = 0,
              limit: int | None = None) -> dict[str, Any]:
        """A dataset job's files (`files`: index, rel_path, src_url, dest_url, state,
        size_bytes, bytes_done, attempts, failures, last_error, failure_kind, chunk, ...)."""
        params: dict[str, Any] = {"offset": offset}
        if states:
            params["state"] = ",".join(states)
        if limit is not None:
            params["limit"] = limit
        return self._call("GET", f"/v1/jobs/{job_id}/files", params=params)

    def history(self, src: str, dest: str, limit: int = 50) -> dict[str, Any]:
        return self._call("GET", "/v1/history", params={"src": src, "dest": dest, "limit": limit})

    def transfers(self, src: str | None = None, dest: str | None = None, since: float = 0.0,
                  limit: int | None = None) -> list[dict[str, Any]]:
        """Transfer log rows (newest first), as TransferRecord fields."""
        params: dict[str, Any] = {"since": since}
        for key, value in (("src", src), ("dest", dest), ("limit", limit)):
            if value is not None:
                params[key] = value
        return list(self._call("GET", "/v1/transfers", params=params)["transfers"])

    def import_transfers(self, name: str, text: str) -> dict[str, Any]:
        """Add a HARP-grid table to the transfer log: `added` and `skipped` rows."""
        return self._call("POST", "/v1/transfers", json={"name": name, "text": text})

    def matrix(self) -> dict[str, Any]:
        return self._call("GET", "/v1/matrix")

    def nodes(self) -> dict[str, Any]:
        return self._call("GET", "/v1/nodes")

    def remove(self, job_id: int) -> dict[str, Any]:
        job: dict[str, Any] = self._call("DELETE", f"/v1/jobs/{job_id}")["job"]
        return job


def _retry_after_s(response: httpx.Response) -> float:
    text = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(text))
    except ValueError:
        return 1.0


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))
    except ValueError:
        return response.text[:200]
