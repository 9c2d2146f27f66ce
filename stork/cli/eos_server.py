"""eos_server: the EOS on its own, for stork_servers whose jobs name it as opt_server.

Serves POST /v1/estimate (body: src_url, dest_url, arguments, size, use_history) and
GET /v1/ping on EOS_API_ADDRESS (loopback by default), with its history in STORK_DATABASE.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stork.cli.common import EXIT_INVALID, EXIT_OK, error, load_settings, parser
from stork.cli.server import LOG_FORMAT
from stork.eos.service import EosService, EstimateRequest
from stork.errors import ConfigError
from stork.server.api import send_json
from stork.store import open_store

log = logging.getLogger("stork.eos_server")


def _handler(eos: EosService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug(format, *args)

        def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            send_json(self, status, body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/v1/ping":
                self._send(HTTPStatus.OK, {"server": "eos_server",
                                           "sampling_runs": eos.sampling_runs})
            else:
                self._send(HTTPStatus.BAD_REQUEST, {"error": f"no endpoint GET {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/v1/estimate":
                self._send(HTTPStatus.BAD_REQUEST, {"error": f"no endpoint POST {self.path}"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(min(length, 1 << 20)) or b"{}")
                request = EstimateRequest.from_json(body)
            except (KeyError, ValueError, TypeError) as exc:
                self._send(HTTPStatus.BAD_REQUEST, {"error": f"bad estimation request: {exc}"})
                return
            try:
                self._send(HTTPStatus.OK, {"result": eos.estimate(request)})
            except Exception as exc:  # the sampler's own message
                self._send(HTTPStatus.BAD_GATEWAY, {"error": str(exc)})

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = parser("eos_server", "The Estimation and Optimization Service on its own.")
    args = p.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        error(str(exc))
        return EXIT_INVALID
    logging.basicConfig(level=settings.log_level, format=LOG_FORMAT)
    store = open_store(settings.database)
    eos = EosService(settings, store)
    host, _, port = settings.eos_api_address.rpartition(":")
    httpd = ThreadingHTTPServer((host, int(port)), _handler(eos))
    httpd.daemon_threads = True
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log.info("eos_server serving on %s", settings.eos_api_address)
    stop.wait()
    httpd.shutdown()
    eos.shutdown()
    store.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
