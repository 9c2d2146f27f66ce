"""Options, exit codes and output helpers shared by every command."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from stork import config
from stork.config import Settings
from stork.errors import ApiError, ConfigError, ServerUnreachable, StorkError

# Exit codes (documented in every command's --help).
EXIT_OK = 0
EXIT_FAILED = 1  # the command ran, but a job failed or an action was refused
EXIT_USAGE = 2  # bad command line (argparse's own code)
EXIT_INVALID = 3  # invalid submit file or configuration
EXIT_UNREACHABLE = 4  # the server could not be reached

EXIT_CODES_HELP = (
    "exit codes: 0 success; 1 a job failed or the server refused the request; "
    "2 bad command line; 3 invalid submit file or configuration; 4 server unreachable"
)


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description, epilog=EXIT_CODES_HELP)
    p.add_argument("-c", "--config", metavar="FILE",
                   help=f"configuration file (default: ${config.ENV_CONFIG}, "
                        "else built-in defaults)")
    return p


def add_name(p: argparse.ArgumentParser) -> None:
    p.add_argument("-name", metavar="SERVER", default=None,
                   help="stork_server to use: a Unix socket path or HOST:PORT "
                        "(default: the ad's stork_server, else STORK_SOCKET)")


def load_settings(path: str | None) -> Settings:
    return config.load(config.config_path(path, os.environ))


def error(message: str) -> None:
    print(f"{os.path.basename(sys.argv[0]) or 'stork'}: error: {message}", file=sys.stderr)


def run(body: Callable[[], int]) -> int:
    """Run a command body, turning the exception tree into messages and exit codes."""
    try:
        return body()
    except ConfigError as exc:
        error(str(exc))
        return EXIT_INVALID
    except ServerUnreachable as exc:
        error(str(exc))
        return EXIT_UNREACHABLE
    except ApiError as exc:
        error(str(exc))
        return EXIT_INVALID if exc.status == 400 else EXIT_FAILED
    except StorkError as exc:
        error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def when(stamp: float | None) -> str:
    if not stamp:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
