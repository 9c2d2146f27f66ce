"""The `arguments` attribute, parsed strictly into known transfer options.

Only these options exist; anything else is refused at submit time, so nothing a user
writes in `arguments` ever reaches a tool's command line unchecked:

    -p N        parallel TCP streams (1..256)
    -cc N       concurrency: files of a dataset in flight at once (1..64)
    -pp N       pipelining depth: transfer commands queued ahead on one control channel
                (1..1000; globus-url-copy only switches pipelining on or off, so 1 is off
                and 2 or more is on: see stork.dataset.chunks)
    -b SIZE     TCP buffer size
    -bs SIZE    block size
    -s SIZE     sample size for the EOS

SIZE is a whole number of bytes with an optional K, M or G suffix (powers of 1024).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stork.errors import ArgumentsError

MAX_STREAMS = 256
MAX_CONCURRENCY = 64
MAX_PIPELINING = 1000
_SIZE = re.compile(r"^([0-9]{1,15})([KMG]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str) -> int:
    """``"128K"`` -> 131072. Raises ArgumentsError on anything else."""
    match = _SIZE.match(text)
    if not match:
        raise ArgumentsError(f"expected a size such as 1048576, 128K, 10M or 1G, got {text!r}")
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value <= 0:
        raise ArgumentsError(f"size must be positive, got {text!r}")
    return value


@dataclass(frozen=True)
class TransferOptions:
    streams: int | None = None
    tcp_buffer_bytes: int | None = None
    block_size_bytes: int | None = None
    sample_size_bytes: int | None = None
    concurrency: int | None = None
    pipelining: int | None = None

    def to_arguments(self) -> str:
        """The canonical `arguments` text for these options."""
        parts: list[str] = []
        for flag, value in (("-p", self.streams), ("-b", self.tcp_buffer_bytes),
                            ("-bs", self.block_size_bytes), ("-s", self.sample_size_bytes),
                            ("-cc", self.concurrency), ("-pp", self.pipelining)):
            if value is not None:
                parts += [flag, str(value)]
        return " ".join(parts)


_FLAGS = {"-p": "streams", "-b": "tcp_buffer_bytes", "-bs": "block_size_bytes",
          "-s": "sample_size_bytes", "-cc": "concurrency", "-pp": "pipelining"}
# counts: flag -> (field, highest value, what it counts)
_COUNTS = {"-p": ("streams", MAX_STREAMS, "a stream count"),
           "-cc": ("concurrency", MAX_CONCURRENCY, "a concurrency"),
           "-pp": ("pipelining", MAX_PIPELINING, "a pipelining depth")}


def parse_arguments(text: str) -> TransferOptions:
    """Parse `arguments`; raises ArgumentsError naming the offending option."""
    if any(ord(ch) < 32 and ch not in " \t" for ch in text):
        raise ArgumentsError("control characters (such as newlines) are not allowed")
    tokens = text.split()
    values: dict[str, int] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        field = _FLAGS.get(flag)
        if field is None:
            known = ", ".join(_FLAGS)
            raise ArgumentsError(f"unknown option {flag!r} (known options: {known})")
        if field in values:
            raise ArgumentsError(f"option {flag} given twice")
        if i + 1 >= len(tokens):
            raise ArgumentsError(f"option {flag} needs a value")
        raw = tokens[i + 1]
        if flag in _COUNTS:
            _, highest, what = _COUNTS[flag]
            if not raw.isdigit() or not 1 <= int(raw) <= highest:
                raise ArgumentsError(f"{flag} needs {what} from 1 to {highest}, got {raw!r}")
            values[field] = int(raw)
        else:
            try:
                values[field] = parse_size(raw)
            except ArgumentsError as exc:
                raise ArgumentsError(f"{flag}: {exc}") from None
        i += 2
    return TransferOptions(**values)
