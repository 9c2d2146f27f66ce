"""A dataset's files as stork_submit sends them and the daemon reads them back.

A directory or glob dataset travels as its relative paths and sizes (``{"rel": [[path,
size], ...]}``: the URLs follow from the job's ``src_url`` and ``dest_url``), a url_list as
its pairs (``{"pairs": [[src, dest], ...]}``). `from_wire` checks everything again: the
daemon never trusts the client's listing more than the client itself (each URL is checked,
two sources may not share a destination, the count is within STORK_MAX_FILES_PER_JOB).
"""

from __future__ import annotations

from typing import Any

from stork.dataset.base import quote_name
from stork.dataset.expand import MAX_FILES_KNOB, Dataset, DatasetFile, _from_url_list
from stork.errors import DatasetError
from stork.urls import parse_url


def to_wire(dataset: Dataset, *, url_list: bool) -> dict[str, Any]:
    if url_list:
        return {"pairs": [[f.src_url, f.dest_url] for f in dataset.files]}
    return {"rel": [[f.rel_path, f.size_bytes] for f in dataset.files]}


def from_wire(src_url: str, dest_url: str, url_list: str | None, wire: Any, *,
              max_files: int) -> Dataset:
    """The dataset a request carries for a job (DatasetError naming what is wrong)."""
    where = url_list or src_url
    key = "pairs" if url_list else "rel"
    if not isinstance(wire, dict) or not isinstance(wire.get(key), list):
        raise DatasetError(where, f"the request must carry the dataset's files as {key!r}")
    items: list[Any] = wire[key]
    if len(items) > max_files:
        raise DatasetError(where, f"{len(items)} files is more than {MAX_FILES_KNOB} = "
                                  f"{max_files}; split the dataset or raise the limit")
    if url_list:
        lines = []
        for item in items:
            if (not isinstance(item, list) or len(item) != 2
                    or not all(isinstance(u, str) and u and '"' not in u for u in item)):
                raise DatasetError(where, f"a pair must be two URLs, got {item!r}")
            lines.append(f'"{item[0]}" "{item[1]}"')
        return _from_url_list("\n".join(lines), url_list, max_files)
    root = src_url if src_url.endswith("/") else src_url.rpartition("/")[0] + "/"
    files: list[DatasetFile] = []
    seen: set[str] = set()
    for item in items:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                or not (item[1] is None or (isinstance(item[1], int) and item[1] >= 0))):
            raise DatasetError(where, f"a file must be [relative path, size], got {item!r}")
        rel, size = item
        parts = rel.split("/")
        if not rel or any(p in ("", ".", "..") for p in parts):
            raise DatasetError(where, f"{rel!r} is not a relative path inside the dataset")
        if rel in seen:
            raise DatasetError(dest_url + rel, f"two sources go to one destination: {rel!r} "
                                               "is listed twice")
        seen.add(rel)
        qrel = "/".join(quote_name(p, where) for p in parts)
        src, dest = root + qrel, dest_url + qrel
        for url in (src, dest):
            try:
                parse_url(url)
            except ValueError as exc:
                raise DatasetError(url, str(exc)) from None
        files.append(DatasetFile(src, dest, rel, size))
    if not files:
        raise DatasetError(where, "the dataset has no files")
    return Dataset(tuple(files))
