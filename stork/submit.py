"""Submit files: ClassAds (parsed by HTCondor's classad2) -> validated JobSpecs.

A file holds one or more ``[ ... ]`` ads, with ClassAd comments (``//``, ``/* */``) and
whole-line ``#`` comments. Every problem is reported with the file, the line and position
of the ad, and the attribute; if any ad is invalid the whole file is rejected. A syntax error
is reported at the line and attribute where parsing failed. Attributes Stork does not read are
kept on the job ad; `unknown_attributes` lists them with the nearest known name (likely typos),
except the user's own annotations, named with USER_PREFIX.
"""

from __future__ import annotations

import bisect
import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import classad2

from stork.config import ONLINE_OPTIMIZERS, OPTIMIZER_NAMES
from stork.dataset.base import parse_dir_url
from stork.dataset.expand import LISTERS, is_dataset
from stork.errors import ArgumentsError, SubmitError, SubmitProblem
from stork.job import DapType, JobSpec
from stork.transfer.options import parse_arguments
from stork.transfer.registry import Registry
from stork.urls import parse_url, with_scheme

# The attributes the parser reads, in lower case (ClassAd names are case-insensitive). This is
# the one list: _validate sees only these names, and every other name is reported by
# unknown_attributes (unless it starts with USER_PREFIX).
KNOWN_ATTRIBUTES = (
    "dap_type", "src_url", "dest_url", "arguments", "optimization", "use_history",
    "stork_server", "opt_server", "output", "err", "log", "x509proxy", "alt_protocols",
    "max_retries", "verify_checksum", "size", "recursive", "url_list", "checksum",
    "bearer_token_file", "src_bearer_token_file", "dest_bearer_token_file",
)
TOKEN_ATTRIBUTES = ("bearer_token_file", "src_bearer_token_file", "dest_bearer_token_file")
USER_PREFIX = "user_"  # names starting with this are the user's own: never warned about
SUGGEST_CUTOFF = 0.7  # difflib similarity (0..1) a known name needs to be suggested

_JWT = re.compile(r"eyJ[\w-]*\.[\w-]+\.[\w-]*\Z")  # a token where a file name belongs
_ASSIGNED = re.compile(r"([A-Za-z_]\w*)\s*=\s*\Z")
_MAX_SEARCHED_TOKENS = 256  # longer values with a syntax error are not searched token by token
_TOKEN = re.compile(r"""\s*(?:
    (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>"(?:[^"\\]|\\.)*(?:"|\\?\Z))
  | (?P<name>[A-Za-z_]\w*|'(?:[^'\\]|\\.)*(?:'|\\?\Z))
  | (?P<number>\.?\d[\w.]*)
  | (?P<op>=\?=|=!=|>>>|==|!=|<=|>=|&&|\|\||<<|>>|.)
  | \Z)""", re.VERBOSE | re.DOTALL)


@dataclass(frozen=True)
class RawAd:
    text: str
    index: int  # 1-based position in the file
    line: int  # line of its opening bracket


@dataclass(frozen=True)
class UnknownAttribute:
    """An attribute Stork does not read: kept on the job ad, but perhaps a typo."""

    filename: str
    ad_index: int  # 1-based position of the ad in the file
    line: int  # line of the attribute
    attribute: str
    suggestion: str | None  # the nearest known attribute, if one is close

    def __str__(self) -> str:
        guess = f"; did you mean '{self.suggestion}'?" if self.suggestion else ""
        return (f"{self.filename}:{self.line}: ad {self.ad_index}: attribute '{self.attribute}' "
                f"is not one Stork knows{guess} (prefix your own attributes with "
                f"'{USER_PREFIX}' or pass --no-warn to silence this)")


class _Token(NamedTuple):  # a tuple: files can hold millions
    kind: str  # "name" (also a 'quoted' name), "string", "number" or "op"
    text: str
    start: int  # offsets in the scanned text
    end: int


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
    spanning: tuple[int, int] | None = None  # (offset, line) of this ad's first multi-line string
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
                problems.append(SubmitProblem(filename, None, line, None,
                                              "unterminated /* comment"))
                break
            line += text.count("\n", i, end)
            i = end + 2
            continue
        if ch in "\"'" and depth > 0:  # a string, or a 'quoted' attribute name
            end = i + 1
            while end < n and text[end] != ch:
                end += 2 if text[end] == "\\" else 1
            if end >= n:
                culprit, culprit_line = spanning or (i, line)
                problems.append(SubmitProblem(
                    filename, len(ads) + 1, culprit_line, _assigned_at(text, start, culprit),
                    f"string {_snippet(text[culprit:])!r} is never closed (a missing {ch!r}?)"
                    if spanning is None else
                    f"string {_snippet(text[culprit:])!r} runs over several lines and the file "
                    f"ends inside a later string (a missing {ch!r} here?)"))
                depth = 0
                break
            if spanning is None and "\n" in text[i:end]:
                spanning = (i, line)
            line += text.count("\n", i, end)
            i = end + 1
            continue
        if ch == "[":
            if depth == 0:
                start, start_line = i, line
                spanning = None
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                problems.append(SubmitProblem(filename, None, line, None, "unmatched ']'"))
                depth = 0
            elif depth == 0:
                ads.append(RawAd(text[start : i + 1], len(ads) + 1, start_line))
        elif depth == 0 and not ch.isspace():
            snippet = text[i : i + 20].split("\n", maxsplit=1)[0]
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


def _lex(text: str) -> list[_Token]:
    """ClassAd tokens of `text`, without whitespace and comments."""
    return [_Token(kind, match.group(kind), match.start(kind), match.end())
            for match in _TOKEN.finditer(text)
            if (kind := match.lastgroup) is not None and kind != "comment"]


def _line_finder(raw: RawAd) -> Callable[[int], int]:
    """Maps an offset in ``raw.text[1:-1]`` (where tokens are) to its line in the file."""
    breaks = [match.start() for match in re.finditer("\n", raw.text)]
    return lambda offset: raw.line + bisect.bisect_left(breaks, offset + 1)


def _statements(raw: RawAd) -> list[list[_Token]]:
    """The ad's top-level ``name = expression`` parts, as tokens of ``raw.text[1:-1]``."""
    statements: list[list[_Token]] = []
    current: list[_Token] = []
    depth = 0  # of nested ads: only they may hold a ';'
    for token in _lex(raw.text[1:-1]):
        if token.text == ";" and depth == 0:
            if current:
                statements.append(current)
            current = []
            continue
        if token.text == "[":
            depth += 1
        elif token.text == "]" and depth > 0:
            depth -= 1
        current.append(token)
    if current:
        statements.append(current)
    return statements


def _name(tokens: list[_Token], at: int = 0) -> str | None:
    """The attribute name if ``tokens[at:]`` starts with ``name =``."""
    if len(tokens) > at + 1 and tokens[at].kind == "name" and tokens[at + 1].text == "=":
        name = tokens[at].text
        return name[1:-1] if name.startswith("'") else name
    return None


def _parses(assignment: str) -> bool:
    try:
        classad2.ClassAd(f"[\n{assignment}\n]")
    except Exception:  # noqa: BLE001 - classad2 raises ClassAdException, UnicodeError, ...
        return False
    return True


def _syntax_problem(raw: RawAd, filename: str, error: str) -> SubmitProblem:
    """Where an ad that classad2 rejects goes wrong: the first assignment that does not parse
    alone, and in it the longest start that does; the token after it is where parsing failed."""
    body = raw.text[1:-1]
    line = _line_finder(raw)
    for tokens in _statements(raw):
        name = _name(tokens)
        first, last = tokens[0], tokens[-1]
        if name is None:
            return SubmitProblem(filename, raw.index, line(first.start), None,
                                 f"syntax error near {_snippet(body[first.start : last.end])!r} "
                                 "(expected an attribute: name = value)")
        if _parses(body[first.start : last.end]):
            continue
        expression = tokens[2:]
        texts = [t.text for t in expression]
        hint = next((f" (a missing {close!r}?)" for open_, close in (("(", ")"), ("{", "}"))
                     if texts.count(open_) > texts.count(close)), "")
        if not expression:
            return SubmitProblem(filename, raw.index, line(first.start), name,
                                 "syntax error: no value after '='")
        if len(expression) > _MAX_SEARCHED_TOKENS:  # one parse per token: too slow to search
            return SubmitProblem(filename, raw.index, line(first.start), name,
                                 f"syntax error in its value{hint}")
        good = next((k for k in range(len(expression) - 1, 0, -1)
                     if _parses(body[first.start : expression[k - 1].end])), 0)
        bad = expression[good]
        spanning = [t for t in expression[: good + 1] if t.kind == "string" and "\n" in t.text]
        if spanning:
            return SubmitProblem(filename, raw.index, line(spanning[0].start), name,
                                 f"syntax error: string {_snippet(spanning[0].text)!r} runs over "
                                 "several lines (a missing '\"'?)")
        near = _snippet(body[bad.start : last.end])
        following = _name(expression, good)
        if following is not None:
            return SubmitProblem(filename, raw.index, line(bad.start), following,
                                 f"syntax error near {near!r} (a missing ';' after the previous "
                                 f"attribute '{name}'?)")
        return SubmitProblem(filename, raw.index, line(bad.start), name,
                             f"syntax error near {near!r}{hint}")
    return SubmitProblem(filename, raw.index, raw.line, None, f"ClassAd syntax error: {error}")


def _snippet(text: str, limit: int = 30) -> str:
    """The start of `text`'s first line, to quote in a message."""
    first = text.strip().split("\n", 1)[0].rstrip()
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _assigned_at(text: str, ad_start: int, offset: int) -> str | None:
    """The attribute whose ``name =`` is just before `offset`, in the ad at `ad_start`."""
    match = _ASSIGNED.search(text, ad_start, offset)
    return match.group(1) if match else None


def _bare_word(ad: classad2.ClassAd, attr: str) -> str | None:
    """The name of a bare attribute reference such as ``dap_type = transfer;``."""
    expr = str(ad.lookup(attr)).strip()
    if expr.replace("_", "a").isalnum() and not expr[0].isdigit():
        return expr
    return None


def _value(ad: classad2.ClassAd, attr: str) -> Any:
    try:
        value = ad.eval(attr)
    except Exception as exc:  # noqa: BLE001 - classad2 raises more than ClassAdException
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


def _optimization(ad: classad2.ClassAd) -> tuple[bool, str | None]:
    """`optimization`: "YES" or "NO", or the name of an optimizer of (cc, p, pp)."""
    value = _value(ad, "optimization")
    if isinstance(value, str) and value.strip().lower() in OPTIMIZER_NAMES:
        return True, value.strip().lower()
    try:
        return _yes_no(ad, "optimization"), None
    except _Invalid:
        raise _Invalid("optimization", f'must be "YES" or "NO", or name an optimizer of '
                                       f'datasets ({", ".join(OPTIMIZER_NAMES)}); got '
                                       f'{value!r}') from None


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


def _alt_protocols(text: str, src: str, dest: str,
                   registry: Registry) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for part in text.split(","):
        item = part.strip()
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
                raise _Invalid("alt_protocols",
                               f"{item}: {attr} rewritten to {scheme}: {exc}") from None
        pairs.append((a, b))
    return tuple(pairs)


def _urls(ad: classad2.ClassAd, has: Callable[[str], bool], dap_type: DapType
          ) -> tuple[dict[str, str], dict[str, str]]:
    """src_url and dest_url, checked, with their schemes. A transfer's source may name a
    dataset: a directory (ending in '/') or a glob in its last segment; its dest_url is then
    a directory (a missing '/' is added)."""
    urls: dict[str, str] = {}
    schemes: dict[str, str] = {}
    for attr in ("src_url", "dest_url"):
        if not has(attr):
            raise _Invalid(attr, "is missing")
        urls[attr] = _string(ad, attr)
    many = dap_type is DapType.TRANSFER and is_dataset(urls["src_url"])
    if many and not urls["dest_url"].endswith("/"):
        urls["dest_url"] += "/"
    for attr, url in urls.items():
        try:
            if not many:
                schemes[attr] = parse_url(url).scheme
            elif attr == "dest_url" or url.endswith("/"):
                schemes[attr] = parse_dir_url(url).scheme
            else:  # a glob: its directory must be a directory URL
                schemes[attr] = parse_dir_url(url.rsplit("/", 1)[0] + "/").scheme
        except ValueError as exc:
            raise _Invalid(attr, str(exc)) from None
    if many and schemes["src_url"] not in LISTERS:
        raise _Invalid("src_url", f"{schemes['src_url']}:// directories cannot be listed; "
                                  f"datasets are listed on "
                                  f"{', '.join(s + '://' for s in LISTERS)} (or use url_list)")
    if dap_type is DapType.ESTIMATION and (urls["src_url"].endswith("/")):
        raise _Invalid("src_url", "an estimation job names one file, not a directory")
    return urls, schemes


# checksum = "TYPE:HEX": the types the field uses, and their hex digits at most
CHECKSUM_DIGITS = {"adler32": 8, "crc32c": 8, "md5": 32}


def _checksum(text: str) -> str:
    """``adler32:0a1b2c3d`` -> the same, normalised (lower case, adler32/crc32c to 8 digits)."""
    kind, sep, value = text.strip().partition(":")
    kind, value = kind.strip().lower(), value.strip().lower()
    if not sep or kind not in CHECKSUM_DIGITS:
        raise _Invalid("checksum", f"{text!r} is not TYPE:VALUE with TYPE one of "
                                   f"{', '.join(sorted(CHECKSUM_DIGITS))} "
                                   "(e.g. \"adler32:0a1b2c3d\")")
    digits = CHECKSUM_DIGITS[kind]
    if not value or len(value) > digits or any(c not in "0123456789abcdef" for c in value):
        raise _Invalid("checksum", f"{value!r} is not a {kind} value ({digits} hex digits)")
    if kind == "md5" and len(value) != digits:
        raise _Invalid("checksum", f"{value!r} is not an md5 value (32 hex digits)")
    return f"{kind}:{value.rjust(digits, '0')}"


def _validate(ad: classad2.ClassAd, iwd: str, registry: Registry) -> JobSpec:
    # Only the names in KNOWN_ATTRIBUTES are read, so that table cannot miss one.
    present = {key.lower(): key for key in ad if key.lower() in KNOWN_ATTRIBUTES}

    def has(attr: str) -> bool:
        return attr in present

    if not has("dap_type"):
        raise _Invalid("dap_type", "is missing (transfer or estimation)")
    word = _bare_word(ad, "dap_type")
    dap_text = word if word is not None else _string(ad, "dap_type")
    try:
        dap_type = DapType(dap_text.strip().lower())
    except ValueError:
        raise _Invalid("dap_type",
                       f"unknown type {dap_text!r} (expected transfer or estimation)") from None

    fields: dict[str, Any] = {}
    if has("url_list"):
        if dap_type is not DapType.TRANSFER:
            raise _Invalid("url_list", "only a transfer job can name a url_list")
        fields["url_list"] = _local_path(ad, "url_list", iwd)
        for attr in ("src_url", "dest_url"):
            if has(attr):
                raise _Invalid(attr, "a job with url_list takes its sources and destinations "
                                     "from the list; leave src_url and dest_url out")
        urls, schemes = {"src_url": "", "dest_url": ""}, dict[str, str]()
    else:
        urls, schemes = _urls(ad, has, dap_type)
    if has("recursive"):
        fields["recursive"] = _yes_no(ad, "recursive")
        if fields["recursive"] and (dap_type is not DapType.TRANSFER
                                    or not is_dataset(urls["src_url"])):
            raise _Invalid("recursive", "descends into the directories of a dataset: src_url "
                                        "must end in '/' or have a glob in its last segment")
    if has("arguments"):
        arguments = _string(ad, "arguments")
        try:
            fields["arguments"] = parse_arguments(arguments).to_arguments()
        except ArgumentsError as exc:
            raise _Invalid("arguments", str(exc)) from None
    for attr in ("use_history", "verify_checksum"):
        if has(attr):
            fields[attr] = _yes_no(ad, attr)
    if has("optimization"):
        fields["optimization"], optimizer = _optimization(ad)
        if optimizer is not None:
            fields["optimizer"] = optimizer
    for attr in ("stork_server", "opt_server", "x509proxy"):
        if has(attr):
            fields[attr] = _string(ad, attr)
    if fields.get("x509proxy") not in (None, "default"):  # a file, relative to the submit dir
        fields["x509proxy"] = os.path.normpath(os.path.join(iwd, fields["x509proxy"]))
    for attr in ("output", "err", "log", *TOKEN_ATTRIBUTES):
        if has(attr):
            if attr in TOKEN_ATTRIBUTES and _JWT.match(_string(ad, attr).strip()):
                raise _Invalid(attr, "holds a token itself, not the name of a file: put the "
                                     "token in a file of mode 0600 and name that file")
            fields[attr] = _local_path(ad, attr, iwd)
    if has("max_retries"):
        fields["max_retries"] = _non_negative_int(ad, "max_retries")
    if has("checksum"):
        fields["checksum"] = _checksum(_string(ad, "checksum"))
    if has("size"):
        size = _non_negative_int(ad, "size")
        if size == 0:
            raise _Invalid("size", "must be a positive number of bytes")
        fields["size_bytes"] = size

    dataset = dap_type is DapType.TRANSFER and is_dataset(urls["src_url"], fields.get("url_list"))
    optimizer = fields.get("optimizer")
    if optimizer and not dataset and optimizer not in (*ONLINE_OPTIMIZERS, "eos"):
        raise _Invalid("optimization", f"{optimizer} tunes datasets (cc, p, pp); a single "
                                       "file takes optimization = \"YES\" (EOS_OPTIMIZER), "
                                       f"{' or '.join(ONLINE_OPTIMIZERS)} (its ranges tuned "
                                       "while they move) or eos (the EOS's samples, then its "
                                       "streams)")
    if dataset and "checksum" in fields:
        raise _Invalid("checksum", "is one file's expected checksum; a dataset takes "
                                   "verify_checksum = true")
    if dataset and "size_bytes" in fields:
        raise _Invalid("size", "is for one file; a dataset's sizes come from its listing")
    if dap_type is DapType.TRANSFER and schemes:
        if registry.find(schemes["src_url"], schemes["dest_url"]) is None:
            raise _Invalid("dest_url", f"no transfer module handles "
                           f"{schemes['src_url']} -> {schemes['dest_url']}")
        if has("alt_protocols"):
            fields["alt_protocols"] = _alt_protocols(
                _string(ad, "alt_protocols"), urls["src_url"], urls["dest_url"], registry)

    normal = ad.__copy__() if hasattr(ad, "__copy__") else classad2.ClassAd(str(ad))
    normal[present["dap_type"]] = dap_type.value
    for attr in ("output", "err", "log", "url_list"):
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
        except Exception as exc:  # noqa: BLE001 - any classad2 failure is a syntax problem
            problems.append(_syntax_problem(raw, filename, str(exc)))
            continue
        try:
            spec = _validate(ad, iwd, registry)
        except _Invalid as exc:
            problems.append(SubmitProblem(filename, raw.index, raw.line, exc.attribute,
                                          exc.message))
            continue
        if lognotes is not None:
            spec = JobSpec(**{**spec.__dict__, "lognotes": lognotes})
        specs.append(spec)
    if problems:
        raise SubmitError(problems)
    return specs


def unknown_attributes(text: str, filename: str) -> list[UnknownAttribute]:
    """The attributes of `text` that Stork does not read, each with the nearest known name.

    ClassAd names are case-insensitive, and names starting with USER_PREFIX are the user's own,
    so neither is reported. Ads (or a file) that do not parse give nothing here: parse_submit
    reports them.
    """
    try:
        raws = split_ads(text, filename)
    except SubmitError:
        return []
    found: list[UnknownAttribute] = []
    for raw in raws:
        try:
            ad = classad2.ClassAd(raw.text)
        except Exception:  # noqa: BLE001, S112 - a syntax error: parse_submit reports it
            continue
        unknown = [key for key in ad if key.lower() not in KNOWN_ATTRIBUTES
                   and not key.lower().startswith(USER_PREFIX)]
        if not unknown:
            continue
        offsets: dict[str, int] = {}
        for tokens in _statements(raw):
            name = _name(tokens)
            if name is not None:
                offsets.setdefault(name.lower(), tokens[0].start)
        line = _line_finder(raw)
        for key in unknown:
            offset = offsets.get(key.lower())
            close = difflib.get_close_matches(key.lower(), KNOWN_ATTRIBUTES, n=1,
                                              cutoff=SUGGEST_CUTOFF)
            found.append(UnknownAttribute(filename, raw.index,
                                          raw.line if offset is None else line(offset), key,
                                          close[0] if close else None))
    return sorted(found, key=lambda w: (w.ad_index, w.line, w.attribute.lower()))
