"""Submit files: ClassAds (parsed by HTCondor's classad2) -> validated JobSpecs.

A file holds one or more ``[ ... ]`` ads, with ClassAd comments (``//``, ``/* */``) and
whole-line ``#`` comments. Every problem is reported with the file, the line and position
of the ad, and the attribute; if any ad is invalid the whole file is rejected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import classad2

from stork.errors import ArgumentsError, SubmitError, SubmitProblem
from stork.job import DapType, JobSpec
from stork.transfer.options import parse_arguments
from stork.transfer.registry import Registry
from stork.urls import parse_url, with_scheme

KNOWN_ATTRIBUTES = (
    "dap_type", "src_url", "dest_url", "arguments", "optimization", "use_history",
    "stork_server", "opt_server", "output", "err", "log", "x509proxy", "alt_protocols",
    "max_retries", "verify_checksum", "size",
)


@dataclass(frozen=True)
class RawAd:
    text: str
    index: int  # 1-based position in the file
    line: int  # line of its opening bracket


class _Invalid(Exception):
    def __init__(self, attribute: str | None, message: str) -> None:
        super().__init__(message)
        self.attribute = attribute
        self.message = message


def split_ads(text: str, filename: str) -> list[RawAd]:
    """Find the top-level ``[ ... ]`` ads, skipping strings and comments."""
    ads: list[RawAd] = []
    problems: list[SubmitProblem] = []
    depth = 0
    start = start_line = 0
    line = 1
    i = 0
    n = len(text)
    at_line_start = True
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            at_line_start = True
            i += 1
            continue
        if at_line_start and ch in " \t\r":
            i += 1
            continue
        if at_line_start and ch == "#" and depth == 0:
            while i < n and text[i] != "\n":
                i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                problems.append(SubmitProblem(filename, None, line, None, "unterminated /* comment"))
                break
            line += text.count("\n", i, end)
            i = end + 2
            continue
        if ch == '"' and depth > 0:
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
            i += 1
            continue
        if ch == "[":
            if depth == 0:
                start, start_line = i, line
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                problems.append(SubmitProblem(filename, None, line, None, "unmatched ']'"))
                depth = 0
            elif depth == 0:
                ads.append(RawAd(text[start : i + 1], len(ads) + 1, start_line))
        elif depth == 0 and not ch.isspace():
            snippet = text[i : i + 20].split("\n")[0]
            problems.append(SubmitProblem(
                filename, None, line, None,
                f"unexpected text {snippet!r} outside any [ ... ] ad"))
            while i < n and text[i] not in "\n[":
                i += 1
            continue
        i += 1
    if depth > 0:
        problems.append(SubmitProblem(filename, len(ads) + 1, start_line, None,
                                      "ad is not closed with ']'"))
    if not ads and not problems:
        problems.append(SubmitProblem(filename, None, None, None, "no [ ... ] ad found"))
    if problems:
        raise SubmitError(problems)
    return ads


def _bare_word(ad: classad2.ClassAd, attr: str) -> str | None:
    """The name of a bare attribute reference such as ``dap_type = transfer;``."""
    expr = str(ad.lookup(attr)).strip()
    if expr.replace("_", "a").isalnum() and not expr[0].isdigit():
        return expr
    return None


def _value(ad: classad2.ClassAd, attr: str) -> Any:
    try:
        value = ad.eval(attr)
    except Exception as exc:  # classad2 raises plain exceptions on evaluation errors
        raise _Invalid(attr, f"cannot be evaluated: {exc}") from None
    if isinstance(value, classad2.Value):
        raise _Invalid(attr, f"evaluates to {value.name.lower()} (expression: {ad.lookup(attr)})")
    return value


def _string(ad: classad2.ClassAd, attr: str) -> str:
    value = _value(ad, attr)
    if not isinstance(value, str):
        raise _Invalid(attr, f"must be a string, got {type(value).__name__} {value!r}")
    return value


def _yes_no(ad: classad2.ClassAd, attr: str) -> bool:
    value = _value(ad, attr)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().upper() in ("YES", "NO"):
        return value.strip().upper() == "YES"
    raise _Invalid(attr, f'must be "YES" or "NO", got {value!r}')


def _non_negative_int(ad: classad2.ClassAd, attr: str) -> int:
    value = _value(ad, attr)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Invalid(attr, f"must be a non-negative integer, got {value!r}")
    return value


def _local_path(ad: classad2.ClassAd, attr: str, iwd: str) -> str:
    value = _string(ad, attr)
    if not value or "\x00" in value or "\n" in value:
        raise _Invalid(attr, f"must name a file, got {value!r}")
    return value if os.path.isabs(value) else os.path.normpath(os.path.join(iwd, value))


def _alt_protocols(text: str, src: str, dest: str, registry: Registry) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        a, sep, b = item.partition("-")
        if not sep or not a.isalnum() or not b.isalnum():
            raise _Invalid("alt_protocols", f"expected pairs like 'ftp-file', got {item!r}")
        a, b = a.lower(), b.lower()
        if registry.find(a, b) is None:
            raise _Invalid("alt_protocols", f"no transfer module handles {a} -> {b}")
        for attr, url, scheme in (("src_url", src, a), ("dest_url", dest, b)):
            try:
                parse_url(with_scheme(url, scheme))
            except ValueError as exc:
                raise _Invalid("alt_protocols", f"{item}: {attr} rewritten to {scheme}: {exc}") from None
        pairs.append((a, b))
    return tuple(pairs)


def _validate(ad: classad2.ClassAd, iwd: str, registry: Registry) -> JobSpec:
    present = {key.lower(): key for key in ad.keys()}

    def has(attr: str) -> bool:
        return attr in present

    if not has("dap_type"):
        raise _Invalid("dap_type", "is missing (transfer or estimation)")
    word = _bare_word(ad, "dap_type")
    dap_text = word if word is not None else _string(ad, "dap_type")
    try:
        dap_type = DapType(dap_text.strip().lower())
    except ValueError:
        raise _Invalid("dap_type", f"unknown type {dap_text!r} (expected transfer or estimation)") from None

    urls: dict[str, str] = {}
    schemes: dict[str, str] = {}
    for attr in ("src_url", "dest_url"):
        if not has(attr):
            raise _Invalid(attr, "is missing")
        url = _string(ad, attr)
        try:
            schemes[attr] = parse_url(url).scheme
        except ValueError as exc:
            raise _Invalid(attr, str(exc)) from None
        urls[attr] = url

    fields: dict[str, Any] = {}
    if has("arguments"):
        arguments = _string(ad, "arguments")
        try:
            fields["arguments"] = parse_arguments(arguments).to_arguments()
        except ArgumentsError as exc:
            raise _Invalid("arguments", str(exc)) from None
    for attr in ("optimization", "use_history", "verify_checksum"):
        if has(attr):
            fields[attr] = _yes_no(ad, attr)
    for attr in ("stork_server", "opt_server", "x509proxy"):
        if has(attr):
            fields[attr] = _string(ad, attr)
    if fields.get("x509proxy") not in (None, "default"):  # a file, relative to the submit dir
        fields["x509proxy"] = os.path.normpath(os.path.join(iwd, fields["x509proxy"]))
    for attr in ("output", "err", "log"):
        if has(attr):
            fields[attr] = _local_path(ad, attr, iwd)
    if has("max_retries"):
        fields["max_retries"] = _non_negative_int(ad, "max_retries")
    if has("size"):
        size = _non_negative_int(ad, "size")
        if size == 0:
            raise _Invalid("size", "must be a positive number of bytes")
        fields["size_bytes"] = size

    if dap_type is DapType.TRANSFER:
        if registry.find(schemes["src_url"], schemes["dest_url"]) is None:
            raise _Invalid("dest_url", f"no transfer module handles "
                           f"{schemes['src_url']} -> {schemes['dest_url']}")
        if has("alt_protocols"):
            fields["alt_protocols"] = _alt_protocols(
                _string(ad, "alt_protocols"), urls["src_url"], urls["dest_url"], registry)

    normal = ad.__copy__() if hasattr(ad, "__copy__") else classad2.ClassAd(str(ad))
    normal[present["dap_type"]] = dap_type.value
    for attr in ("output", "err", "log"):
        if attr in fields:
            normal[present[attr]] = fields[attr]
    return JobSpec(dap_type=dap_type, src_url=urls["src_url"], dest_url=urls["dest_url"],
                   ad_text=str(normal), **fields)


def parse_submit(text: str, filename: str, *, iwd: str, registry: Registry,
                 lognotes: str | None = None, max_ads: int | None = None) -> list[JobSpec]:
    """Every ad in `text`, validated; raises SubmitError listing every problem."""
    specs: list[JobSpec] = []
    problems: list[SubmitProblem] = []
    raws = split_ads(text, filename)
    if max_ads is not None and len(raws) > max_ads:
        raise SubmitError([SubmitProblem(filename, max_ads + 1, raws[max_ads].line, None,
                                         f"{len(raws)} ads is more than the limit "
                                         f"STORK_MAX_ADS_PER_SUBMIT = {max_ads}")])
    for raw in raws:
        try:
            ad = classad2.ClassAd(raw.text)
        except Exception as exc:
            problems.append(SubmitProblem(filename, raw.index, raw.line, None,
                                          f"ClassAd syntax error: {exc}"))
            continue
        try:
            spec = _validate(ad, iwd, registry)
        except _Invalid as exc:
            problems.append(SubmitProblem(filename, raw.index, raw.line, exc.attribute, exc.message))
            continue
        if lognotes is not None:
            spec = JobSpec(**{**spec.__dict__, "lognotes": lognotes})
        specs.append(spec)
    if problems:
        raise SubmitError(problems)
    return specs

