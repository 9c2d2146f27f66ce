"""The one HTTP layer of the project: stork_server's API and eos_server both run on it.

aiohttp serves, on an event loop in its own thread, a Unix socket (the caller is known by
the socket's peer credentials) and optionally a TCP address (the caller must send the bearer
token). Handlers are plain functions run on a bounded thread pool, so the loop never blocks
on the store, the dispatcher or the EOS. A long poll (`WaitRoute`) waits on the loop itself,
a future per waiter, and is woken by `notify(keys)` from any thread. Past `max_inflight`
requests at work, or `max_waiters` long polls, a request is answered 503 with Retry-After
at once: nothing waits unbounded in a queue. Every answer, protocol errors included, is JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web, web_protocol

from stork.caller import Caller
from stork.errors import (
    ApiError,
    ConfigError,
    EosError,
    IdentityError,
    InvalidRequest,
    JobNotFound,
    Overloaded,
    PermissionDenied,
    StoreUnavailable,
    SubmitError,
)
from stork.urls import HostPort

log = logging.getLogger(__name__)

Body = dict[str, Any]


@dataclass(frozen=True)
class Raw:
    """An answer that is not JSON: the Prometheus text format, the status page."""

    body: bytes
    content_type: str  # the whole Content-Type header, charset included


Answer = tuple[int, Body | Raw]

# exception class -> HTTP status; the first match wins, so subclasses come first
_STATUS: tuple[tuple[type[BaseException], HTTPStatus], ...] = (
    (SubmitError, HTTPStatus.BAD_REQUEST),
    (InvalidRequest, HTTPStatus.BAD_REQUEST),
    (JobNotFound, HTTPStatus.NOT_FOUND),
    (PermissionDenied, HTTPStatus.FORBIDDEN),
    (IdentityError, HTTPStatus.FORBIDDEN),  # the caller cannot be acted as
    (StoreUnavailable, HTTPStatus.SERVICE_UNAVAILABLE),
    (Overloaded, HTTPStatus.SERVICE_UNAVAILABLE),
    (EosError, HTTPStatus.BAD_GATEWAY),  # the sample transfer's own failure
    (ApiError, HTTPStatus.BAD_GATEWAY),  # a remote eos_server's
)
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class Request:
    """What a handler sees: the caller, the path's named parts, the query and the body."""

    caller: Caller
    method: str
    path: str
    params: Mapping[str, str]
    query: Mapping[str, list[str]]
    body: Body = field(default_factory=dict)

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default

    def number(self, name: str, default: float, *, minimum: float = 0) -> float:
        """A numeric query argument; InvalidRequest naming it when it is not a number."""
        text = self.arg(name)
        if text is None or text == "":
            return default
        try:
            value = float(text)
        except ValueError:
            raise InvalidRequest(
                f"query argument {name!r} must be a number, got {text!r}") from None
        if not value >= minimum:
            raise InvalidRequest(f"query argument {name!r} must be at least {minimum:g}")
        return value


Handler = Callable[[Request], Answer]


@dataclass(frozen=True)
class Route:
    """METHOD /path/{name} -> handler; `body` routes read a JSON object."""

    method: str
    path: str  # literal parts and {name} parts (digits only)
    handler: Handler
    body: bool = False
    # on TCP, whether a caller without the token may have it, given its IP address (the
    # route then runs as the remote caller); None: never
    open_to: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class WaitRoute:
    """A long poll. `check(request)` (on the pool) answers (done, status, body); while not
    done, the request waits until `notify` names its `key(request)` or `timeout_s` passes,
    then checks once more and answers whatever it finds."""

    method: str
    path: str
    key: Callable[[Request], int]
    check: Callable[[Request], tuple[bool, int, Body]]


@dataclass(frozen=True)
class Limits:
    max_inflight: int = 1024  # requests at work (handlers queued or running on the pool)
    max_waiters: int = 10000  # long polls waiting
    max_body_bytes: int = 16 << 20
    wait_timeout_s: float = 60.0  # the longest a long poll waits
    inflight_knob: str = "STORK_API_MAX_INFLIGHT"
    waiters_knob: str = "STORK_API_MAX_WAITERS"
    body_knob: str = "STORK_MAX_SUBMIT_BYTES"


def _pattern(path: str) -> re.Pattern[str]:
    regex = re.sub(r"\{([a-z_]+)\}", r"(?P<\1>[0-9]{1,18})", path)
    return re.compile(f"^{regex}$")


def error_answer(exc: BaseException) -> Answer:
    """The HTTP status and JSON body for an exception from a handler."""
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)),
                  HTTPStatus.INTERNAL_SERVER_ERROR)
    body: Body = {"error": str(exc) or type(exc).__name__}
    if isinstance(exc, SubmitError):
        body["problems"] = [str(p) for p in exc.problems]
    return status, body


class _Protocol(web_protocol.RequestHandler):
    """aiohttp's connection handler, answering protocol errors in JSON like the rest."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        log.debug("http: protocol error %s: %s", status, message or exc)
        phrase = HTTPStatus(status).phrase
        text = f"{phrase}: {message}" if message and status != 500 else phrase
        response = web.json_response({"error": text}, status=status)
        response.force_close()
        return response


class _Server(web.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return _Protocol(self, loop=self._loop, **self._kwargs)


class HttpServer:
    """Serves `routes` on a Unix socket and/or TCP until `stop`. `limits` are fixed, or a
    function asked at each request (live knobs)."""

    def __init__(self, name: str, routes: Sequence[Route | WaitRoute], *,
                 socket_path: str | None = None, tcp: HostPort | None = None,
                 token: str = "", token_knob: str = "STORK_API_TOKEN_FILE",  # noqa: S107 - a knob name, not a secret
                 limits: Limits | Callable[[], Limits] | None = None,
                 workers: int = 8) -> None:
        if socket_path is None and tcp is None:
            raise ValueError("HttpServer needs a Unix socket path or a TCP address")
        if tcp is not None and not token:
            raise ValueError("a TCP API needs a token")
        self.name = name
        fixed = limits if isinstance(limits, Limits) else Limits()
        self._limits: Callable[[], Limits] = limits if callable(limits) else lambda: fixed
        self._routes = [(_pattern(r.path), r) for r in routes]
        self._socket_path = socket_path
        self._tcp = tcp
        self._token = token
        self._token_knob = token_knob
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-api")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.BaseRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._watch: dict[int, set[asyncio.Future[None]]] = {}
        self.inflight = 0  # changed on the loop only
        self.waiting = 0
        self.refused = 0  # 503s answered since start

    def set_routes(self, routes: Sequence[Route | WaitRoute]) -> None:
        """Replace the route table (before `start`)."""
        self._routes = [(_pattern(r.path), r) for r in routes]

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bind and serve on a thread of its own; raises what binding raised."""
        self._thread = threading.Thread(target=self._serve, name=f"{self.name}-http", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._bind())
        except BaseException as exc:  # noqa: BLE001 - handed to start()'s caller
            self._failure = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._unbind())
            loop.close()

    async def _bind(self) -> None:
        server = _Server(self._handle, handler_cancellation=True, access_log=None,
                         max_field_size=16384)
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        self._runner = runner
        if self._socket_path is not None:
            path = self._socket_path
            if os.path.exists(path):  # noqa: ASYNC240 - once, before anything is served
                os.unlink(path)  # stale: the caller checked socket_in_use first
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            await web.UnixSite(runner, path, backlog=1024).start()
            os.chmod(path, 0o777)  # noqa: S103 - every local user may talk; peer credentials say who
        if self._tcp is not None:
            await web.TCPSite(runner, self._tcp.host, self._tcp.port, backlog=1024,
                              reuse_address=True).start()

    async def _unbind(self) -> None:
        for waiters in self._watch.values():
            for future in waiters:
                future.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._socket_path)

    def notify(self, keys: Iterable[int]) -> None:
        """Wake the long polls waiting on `keys` (from any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        keys = list(keys)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._wake, keys)

    def _wake(self, keys: list[int]) -> None:
        for key in keys:
            for future in self._watch.pop(key, ()):
                if not future.done():
                    future.set_result(None)

    # -- one request --------------------------------------------------------------------------

    async def _handle(self, raw: web.BaseRequest) -> web.StreamResponse:
        try:
            status, body, retry = await self._answer(raw)
        except Exception as exc:
            status, body = error_answer(exc)
            retry = isinstance(exc, (Overloaded, StoreUnavailable))
            if status == HTTPStatus.INTERNAL_SERVER_ERROR:
                log.error("api: %s %s failed", raw.method, raw.path, exc_info=exc)
        headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None
        if isinstance(body, Raw):
            return web.Response(body=body.body, status=status,
                                headers={"Content-Type": body.content_type,
                                         "Cache-Control": "no-store"})
        if isinstance(body, bytes):  # encoded on the pool
            return web.Response(body=body, status=status, headers=headers,
                                content_type="application/json")
        return web.json_response(body, status=status, headers=headers)

    async def _answer(self, raw: web.BaseRequest) -> tuple[int, Body | Raw | bytes, bool]:
        try:
            caller = self._caller(raw)
        except PermissionDenied:
            if not self._open_without_token(raw):
                raise
            caller = Caller.remote_caller()
        route, params = self._route(raw.method, raw.path)
        limits = self._limits()
        loop = asyncio.get_running_loop()
        query = parse_qs(raw.query_string)
        if isinstance(route, WaitRoute):
            if self.waiting >= limits.max_waiters:
                return self._busy(f"{self.waiting} requests are waiting for jobs "
                                  f"({limits.waiters_knob} = {limits.max_waiters})")
            request = Request(caller, raw.method, raw.path, params, query)
            self.waiting += 1
            try:
                status, body = await self._long_poll(route, request, limits, loop)
            finally:
                self.waiting -= 1
            return status, body, False
        if self.inflight >= limits.max_inflight:
            return self._busy(f"{self.inflight} requests are in progress "
                              f"({limits.inflight_knob} = {limits.max_inflight})")
        self.inflight += 1
        try:
            body = await self._read_json(raw, limits) if route.body else {}
            request = Request(caller, raw.method, raw.path, params, query, body)
            status, answer = await loop.run_in_executor(self._pool, _encoded, route.handler,
                                                        request)
        finally:
            self.inflight -= 1
        return status, answer, False

    def _busy(self, why: str) -> tuple[int, Body, bool]:
        self.refused += 1
        return (HTTPStatus.SERVICE_UNAVAILABLE,
                {"error": f"{self.name} is busy: {why}; retry after {RETRY_AFTER_S} s"}, True)

    async def _long_poll(self, route: WaitRoute, request: Request, limits: Limits,
                         loop: asyncio.AbstractEventLoop) -> Answer:
        timeout = min(request.number("timeout", limits.wait_timeout_s), limits.wait_timeout_s)
        key = route.key(request)
        future: asyncio.Future[None] = loop.create_future()
        self._watch.setdefault(key, set()).add(future)  # before the check: no lost wake-up
        try:
            done, status, body = await loop.run_in_executor(self._pool, route.check, request)
            if done or timeout <= 0:
                return status, body
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future, timeout)
            _, status, body = await loop.run_in_executor(self._pool, route.check, request)
            return status, body
        finally:
            waiters = self._watch.get(key)
            if waiters is not None:
                waiters.discard(future)
                if not waiters:
                    del self._watch[key]

    def _open_without_token(self, raw: web.BaseRequest) -> bool:
        """Whether the route asked for lets this TCP caller in without the token."""
        for pattern, route in self._routes:
            if route.method == raw.method and pattern.match(raw.path):
                return (isinstance(route, Route) and route.open_to is not None
                        and route.open_to(raw.remote or ""))
        return False

    def _route(self, method: str, path: str) -> tuple[Route | WaitRoute, dict[str, str]]:
        for pattern, route in self._routes:
            match = pattern.match(path)
            if match and route.method == method:
                return route, match.groupdict()
        raise InvalidRequest(f"no endpoint {method} {path}")

    def _caller(self, raw: web.BaseRequest) -> Caller:
        transport = raw.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and sock.family == socket.AF_UNIX:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                    struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            return Caller.from_uid(uid)
        given = raw.headers.get("Authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(
                given[7:].strip().encode(), self._token.encode()):
            raise PermissionDenied(f"the TCP API needs 'Authorization: Bearer <token>' with the "
                                   f"token from {self._token_knob}")
        return Caller.remote_caller()

    @staticmethod
    async def _read_json(raw: web.BaseRequest, limits: Limits) -> Body:
        length = raw.content_length
        limit = limits.max_body_bytes + 65536  # the submit file plus its JSON wrapping
        if length is not None and length > limit:
            raise InvalidRequest(f"request body of {length} bytes is more than the limit "
                                 f"{limits.body_knob} = {limits.max_body_bytes} (plus 64 KiB)")
        data = bytearray()
        while chunk := await raw.content.readany():
            data.extend(chunk)
            if len(data) > limit:
                raise InvalidRequest(f"request body is more than the limit {limits.body_knob} "
                                     f"= {limits.max_body_bytes} (plus 64 KiB)")
        try:
            body = json.loads(bytes(data) or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise InvalidRequest("request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
        return body


def _encoded(handler: Handler, request: Request) -> tuple[int, bytes | Raw]:
    """Run a handler and encode its answer, both on the pool: a listing of 100,000 jobs is
    tens of megabytes of JSON, which must not hold the event loop."""
    status, body = handler(request)
    return status, body if isinstance(body, Raw) else json.dumps(body).encode()


def socket_in_use(path: str) -> bool:
    """True when a live server answers on `path`; a stale socket file is not in use."""
    if not os.path.exists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def read_token(path: str, knob: str) -> str:
    """A bearer token from a file; ConfigError naming the knob when missing or weak."""
    if not path:
        raise ConfigError(f"a TCP API needs a token file: set {knob}")
    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.read().strip()
    except OSError as exc:
        raise ConfigError(f"{knob}: cannot read {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise ConfigError(f"{knob}: token in {path} is shorter than 16 characters")
    return token
