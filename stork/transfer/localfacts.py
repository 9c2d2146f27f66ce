"""Sizes and MD5s of local files, looked at with the rights of the job's owner.

The daemon checks a dataset's local destinations (and, for files left in doubt, sources)
after the tool ran. Run as root it must not look with its own rights: a user could name
``/root/...`` and learn whether such a file has a given size or content. So when the job
runs as another user, one child per check (`stork.process.Child`, as the owner) reads the
paths from stdin and answers JSON; with no user to switch to, the daemon looks itself.

    python -m stork.transfer.localfacts [--md5] < paths   ->   [[size or null, md5 or null], ...]
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence

from stork.identity import RunAs
from stork.process import Child

CHUNK = 1 << 20


def facts_here(paths: Sequence[str], md5: bool) -> list[tuple[int | None, str | None]]:
    """(size, MD5 when asked) of each path with this process's rights; (None, None) for one
    that cannot be looked at."""
    out: list[tuple[int | None, str | None]] = []
    for path in paths:
        try:
            if not md5:
                out.append((os.stat(path).st_size, None))
                continue
            digest = hashlib.md5(usedforsecurity=False)
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                while block := handle.read(CHUNK):
                    digest.update(block)
            out.append((size, digest.hexdigest()))
        except OSError:
            out.append((None, None))
    return out


def local_facts(paths: Sequence[str], run_as: RunAs | None, *, md5: bool = False
                ) -> list[tuple[int | None, str | None]]:
    """`facts_here` with the rights of `run_as` (a child process), or of the daemon when
    `run_as` is None. A child that fails answers (None, None) for every path."""
    if not paths:
        return []
    if run_as is None:
        return facts_here(paths, md5)
    chunks: list[bytes] = []
    argv = [sys.executable, "-m", "stork.transfer.localfacts", *(["--md5"] if md5 else [])]
    child = Child(argv, run_as=run_as, on_stdout=chunks.append,
                  stdin="".join(p + "\n" for p in paths).encode())
    try:
        ended = child.run(timeout_s=600)
        answer = json.loads(b"".join(chunks)) if ended.code == 0 else None
    except (OSError, ValueError):
        answer = None
    if not isinstance(answer, list) or len(answer) != len(paths):
        return [(None, None)] * len(paths)
    return [(a[0], a[1]) for a in answer]


def main() -> int:
    paths = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    json.dump(facts_here(paths, "--md5" in sys.argv[1:]), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
