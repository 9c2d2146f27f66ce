"""HTTP/JSON API on a Unix socket (callers known by peer credentials) and optionally TCP.

Endpoints are documented in docs/API.md. Handlers only translate between HTTP and
`Service`; errors from the exception tree map to status codes in one table.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import socket
import socketserver
import struct
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from stork.errors import (InvalidRequest, JobNotFound, PermissionDenied, StorkError,
                          SubmitError)
from stork.server.service import Caller, Service

log = logging.getLogger(__name__)

_STATUS: tuple[tuple[type[Exception], HTTPStatus], ...] = (
    (SubmitError, HTTPStatus.BAD_REQUEST),
    (InvalidRequest, HTTPStatus.BAD_REQUEST),
    (JobNotFound, HTTPStatus.NOT_FOUND),
    (PermissionDenied, HTTPStatus.FORBIDDEN),
    (StorkError, HTTPStatus.INTERNAL_SERVER_ERROR),
)
_JOB = re.compile(r"^/v1/jobs/([0-9]{1,18})$")
REMOTE_UID = -1


def send_json(handler: BaseHTTPRequestHandler, status: HTTPStatus, body: dict[str, Any]) -> None:
    """Write one JSON response (both APIs, stork_server's and eos_server's, use it)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    if handler.close_connection:  # tell the client, so it does not reuse the connection
        handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(data)


class _Handler(BaseHTTPRequestHandler):
    server: _UnixServer | _TcpServer
    protocol_version = "HTTP/1.1"
    server_version = "stork_server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("api: " + format, *args)

    # -- identity -------------------------------------------------------------------------

    def _caller(self) -> Caller:
        if isinstance(self.server, _UnixServer):
            creds = self.request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                            struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            return Caller.from_uid(uid)
        token = self.server.token
        given = self.headers.get("Authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].strip(), token):
            raise PermissionDenied("the TCP API needs 'Authorization: Bearer <token>' with the "
                                   "token from STORK_API_TOKEN_FILE")
        return Caller(REMOTE_UID, "remote")

    # -- plumbing -------------------------------------------------------------------------

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        send_json(self, status, body)

    def _body(self) -> dict[str, Any]:
        length_text = self.headers.get("Content-Length", "0")
        if not length_text.isdigit():
            raise InvalidRequest("Content-Length must be a number")
        length = int(length_text)
        limit = self.server.service.dispatcher.settings.max_submit_bytes
        if length > limit + 65536:  # the submit file plus its JSON wrapping
            raise InvalidRequest(f"request body of {length} bytes is more than the limit "
                                 f"STORK_MAX_SUBMIT_BYTES = {limit} (plus 64 KiB)")
        raw = self.rfile.read(length)
        self._body_read = True
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise InvalidRequest("request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise InvalidRequest("request body must be a JSON object")
        return body

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """Protocol errors (bad request line, unknown method, ...) in JSON like the rest."""
        self.close_connection = True
        status = HTTPStatus(code)
        self._send(status, {"error": f"{status.phrase}: {message}" if message else status.phrase})

    def _dispatch(self, method: str) -> None:
        self._body_read = False
        try:
            status, body = self._route(method)
        except SubmitError as exc:
            self.close_connection = True
            self._send(HTTPStatus.BAD_REQUEST,
                       {"error": str(exc), "problems": [str(p) for p in exc.problems]})
            return
        except Exception as exc:
            code = next((c for t, c in _STATUS if isinstance(exc, t)),
                        HTTPStatus.INTERNAL_SERVER_ERROR)
            if code is HTTPStatus.INTERNAL_SERVER_ERROR:
                log.exception("api: %s %s failed", method, self.path)
            self.close_connection = True
            self._send(code, {"error": str(exc) or type(exc).__name__})
            return
        if not self._body_read and self.headers.get("Content-Length", "0") not in ("0", ""):
            self.close_connection = True  # an unread body must not be taken for a request
        self._send(status, body)

    def _route(self, method: str) -> tuple[HTTPStatus, dict[str, Any]]:
        caller = self._caller()
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        service = self.server.service
        if url.path == "/v1/ping" and method == "GET":
            return HTTPStatus.OK, {**service.ping(), "caller": caller.name}
        if url.path == "/v1/jobs":
            if method == "POST":
                return HTTPStatus.CREATED, service.submit(self._body(), caller)
            if method == "GET":
                return HTTPStatus.OK, service.list_jobs(
                    constraint=(query.get("constraint") or [None])[0],
                    long=(query.get("long") or ["0"])[0] in ("1", "true"),
                    states=query.get("state"), caller=caller)
        if url.path == "/v1/history" and method == "GET":
            src, dest = (query.get("src") or [""])[0], (query.get("dest") or [""])[0]
            if not src or not dest:
                raise InvalidRequest("GET /v1/history needs src and dest (hosts or URLs)")
            limit = (query.get("limit") or ["50"])[0]
            return HTTPStatus.OK, service.history(src, dest, int(limit) if limit.isdigit() else 50)
        if url.path == "/v1/matrix" and method == "GET":
            return HTTPStatus.OK, service.matrix()
        if url.path == "/v1/estimate" and method == "POST":
            return HTTPStatus.OK, service.estimate(self._body())
        match = _JOB.match(url.path)
        if match:
            job_id = int(match.group(1))
            if method == "GET":
                return HTTPStatus.OK, service.status(job_id, caller)
            if method == "DELETE":
                return HTTPStatus.OK, service.remove(job_id, caller)
        raise InvalidRequest(f"no endpoint {method} {url.path}")

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, path: str, service: Service) -> None:
        self.service = service
        super().__init__(path, _Handler)


class _TcpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], service: Service, token: str) -> None:
        self.service = service
        self.token = token
        super().__init__(address, _Handler)


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


class ApiServers:
    """The Unix socket server and, when configured, the TCP one, each on its own thread."""

    def __init__(self, service: Service, socket_path: str, tcp_address: str = "",
                 token: str = "") -> None:
        if os.path.exists(socket_path):
            os.unlink(socket_path)  # stale: the caller checked socket_in_use first
        os.makedirs(os.path.dirname(socket_path), exist_ok=True)
        self.socket_path = socket_path
        self._servers: list[socketserver.BaseServer] = [_UnixServer(socket_path, service)]
        os.chmod(socket_path, 0o777)  # every local user may talk; peer credentials say who
        if tcp_address:
            host, _, port = tcp_address.rpartition(":")
            self._servers.append(_TcpServer((host.strip("[]"), int(port)), service, token))
        self._threads = [threading.Thread(target=s.serve_forever, name="api", daemon=True)
                         for s in self._servers]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
