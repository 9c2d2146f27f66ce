"""The `arguments` attribute, parsed strictly into known transfer options.

Only these options exist; anything else is refused at submit time, so nothing a user
writes in `arguments` ever reaches a tool's command line unchecked:

    -p N        parallel TCP streams (1..256)
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

    def to_arguments(self) -> str:
        """The canonical `arguments` text for these options."""
        parts: list[str] = []
        for flag, value in (("-p", self.streams), ("-b", self.tcp_buffer_bytes),
                            ("-bs", self.block_size_bytes), ("-s", self.sample_size_bytes)):
            if value is not None:
                parts += [flag, str(value)]
        return " ".join(parts)


_FLAGS = {"-p": "streams", "-b": "tcp_buffer_bytes", "-bs": "block_size_bytes",
          "-s": "sample_size_bytes"}


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
        if field == "streams":
            if not raw.isdigit() or not 1 <= int(raw) <= MAX_STREAMS:
                raise ArgumentsError(
                    f"-p needs a stream count from 1 to {MAX_STREAMS}, got {raw!r}")
            values[field] = int(raw)
        else:
            try:
                values[field] = parse_size(raw)
            except ArgumentsError as exc:
                raise ArgumentsError(f"{flag}: {exc}") from None
        i += 2
    return TransferOptions(**values)
