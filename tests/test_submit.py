"""Submit files are parsed by the real classad2 library and validated with clear errors."""

from __future__ import annotations

from pathlib import Path

import classad2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stork.errors import ArgumentsError, SubmitError
from stork.job import DapType, JobSpec
from stork.submit import KNOWN_ATTRIBUTES, USER_PREFIX, parse_submit, unknown_attributes
from stork.transfer.options import parse_arguments, parse_size
from stork.transfer.registry import Registry
from tests.support import StorkServer

REPO = Path(__file__).resolve().parent.parent
REG = Registry.default()
GOOD = 'dap_type = transfer; src_url = "file:///data/a"; dest_url = "ftp://h:2811/b"'


def parse(text: str, filename: str = "job.dap") -> list[JobSpec]:
    return parse_submit(text, filename, iwd="/home/u/work", registry=REG)


def problem(text: str) -> str:
    with pytest.raises(SubmitError) as info:
        parse(text)
    return str(info.value)


def test_a_single_file_names_the_eos_or_an_online_optimizer() -> None:
    for name in ("eos", "climb", "harp-climb"):
        [spec] = parse(f'[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
                       f'optimization = "{name}" ]')
        assert spec.optimization is True and spec.optimizer == name


def test_paper_example_is_accepted_as_printed() -> None:
    text = (REPO / "submit_examples" / "paper" / "paper_example.dap").read_text()
    [spec] = parse(text, "paper_example.dap")
    assert spec.dap_type is DapType.TRANSFER  # the bare word `transfer`
    assert spec.src_url == "gsiftp://eric1.loni.org/default/scratch/test.dat"
    assert spec.optimization is True and spec.use_history is False
    assert spec.stork_server == spec.opt_server == "oliver1.loni.org"
    assert spec.options.tcp_buffer_bytes == 128 * 1024
    assert spec.options.sample_size_bytes == 10 * 1024 * 1024
    assert spec.output == "/home/u/work/tran.out" and spec.log == "/home/u/work/tran.log"
    assert spec.x509proxy == "default"
    ad = classad2.ClassAd(spec.ad_text)
    assert ad["dap_type"] == "transfer"


def test_several_ads_comments_and_expressions() -> None:
    text = f"""
    # a shell-style comment line
    // a ClassAd comment
    [ {GOOD}; arguments = strcat("-p ", string(2 * 2)); max_retries = 1 + 2;
      note = "mine /* not a comment */ ]"; /* block
      comment */ use_history = "yes"; ]
    [ dap_type = "estimation"; src_url = "ftp://a:1/x"; dest_url = "ftp://b:2/y";
      size = 10 * 1024 ]
    """
    first, second = parse(text)
    assert first.options.streams == 4
    assert first.max_retries == 3
    assert first.use_history is True
    assert classad2.ClassAd(first.ad_text)["note"] == "mine /* not a comment */ ]"
    assert second.dap_type is DapType.ESTIMATION and second.size_bytes == 10240


def test_unknown_attributes_are_kept() -> None:
    [spec] = parse(f"[ {GOOD}; experiment = \"atlas\"; run = 42 ]")
    ad = classad2.ClassAd(spec.ad_text)
    assert ad["experiment"] == "atlas" and ad["run"] == 42


@pytest.mark.parametrize("ad, attribute, fragment", [
    ('[ dap_type = copy; src_url = "file:///a"; dest_url = "file:///b" ]', "dap_type",
     "unknown type 'copy'"),
    ('[ src_url = "file:///a"; dest_url = "file:///b" ]', "dap_type", "is missing"),
    ('[ dap_type = transfer; dest_url = "file:///b" ]', "src_url", "is missing"),
    ('[ dap_type = transfer; src_url = "data/a"; dest_url = "file:///b" ]', "src_url", "not a URL"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file://host/b" ]', "dest_url",
     "names host"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "ftp:///b" ]', "dest_url",
     "names no host"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "s3://bucket/b" ]', "dest_url",
     "no transfer module handles file -> s3"),
    (('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
      'optimization = 3 ]'), "optimization", '"YES" or "NO"'),
    (('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
      'optimization = "harp" ]'), "optimization",
     "harp tunes datasets (cc, p, pp); a single file takes"),
    (('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
      'max_retries = "x" ]'), "max_retries", "non-negative integer"),
    (('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
      'arguments = "-p 4 -f /etc/passwd" ]'), "arguments", "unknown option '-f'"),
    (('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
      'arguments = "-p many" ]'), "arguments", "-p needs a stream count"),
    (('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
      'arguments = "-p 2\\n-p 3" ]'), "arguments", "control characters"),
    ('[ dap_type = transfer; src_url = "file:///a b"; dest_url = "file:///b" ]', "src_url",
     "whitespace"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; output = 7 ]', "output",
     "must be a string"),
    ('[ dap_type = transfer; src_url = undefined_thing; dest_url = "file:///b" ]', "src_url",
     "evaluates to undefined"),
    (('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; '
      'alt_protocols = "ftp" ]'), "alt_protocols", "pairs like"),
])
def test_invalid_ads_name_file_ad_and_attribute(ad: str, attribute: str, fragment: str) -> None:
    text = f"[ {GOOD} ]\n\n{ad}\n"
    message = problem(text)
    assert message.startswith(f"job.dap:3: ad 2: attribute '{attribute}': "), message
    assert fragment in message


def test_syntax_errors_name_the_ad_and_line() -> None:
    message = problem(f"[ {GOOD} ]\n[ {GOOD}\n  ; broken = ; ]\n")
    assert message == "job.dap:3: ad 2: attribute 'broken': syntax error: no value after '='"
    assert "job.dap:4: ad 3" in problem(f"[ {GOOD} ]\n[ {GOOD} ]\n\n[ a = ]")
    assert "not closed" in problem(f"[ {GOOD} ]\n[ {GOOD}")
    assert "outside any [ ... ] ad" in problem(f"dap_type = transfer\n[ {GOOD} ]")
    assert "no [ ... ] ad found" in problem("// nothing here\n")


def ad_lines(*lines: str) -> str:
    """An ad written one attribute a line, as users write them: ``[`` is line 1."""
    return "[\n" + "\n".join(f"  {line}" for line in lines) + "\n]\n"


@pytest.mark.parametrize("lines, where, fragment", [
    # a missing ';': parsing fails at the next attribute, which is named with its line
    (('dap_type = transfer;', 'src_url = "file:///a"', 'dest_url = "ftp://h:2811/b";'),
     "job.dap:4: ad 1: attribute 'dest_url': syntax error near 'dest_url = \"ftp://h:2811/b\"'",
     "a missing ';' after the previous attribute 'src_url'?"),
    (('dap_type = transfer', 'src_url = "file:///a";', 'dest_url = "file:///b";'),
     "job.dap:3: ad 1: attribute 'src_url': syntax error near 'src_url = \"file:///a\"'",
     "a missing ';' after the previous attribute 'dap_type'?"),
    # an unterminated string: named where the string opens, not where the parser gave up
    (('dap_type = transfer;', 'src_url = "file:///a;', 'dest_url = "ftp://h:2811/b";',
      'log = "x.log";'),
     ("job.dap:3: ad 1: attribute 'src_url': syntax error: string '\"file:///a;' runs over "
      "several lines"), "a missing '\"'?"),
    (('dap_type = transfer;', 'src_url = "a;', 'dest_url = "b";'),
     "job.dap:3: ad 1: attribute 'src_url': string '\"a;' runs over several lines", "a missing"),
    (('dap_type = transfer;', 'src_url = "file:///a;', 'dest_url = 3;'),
     "job.dap:3: ad 1: attribute 'src_url': string '\"file:///a;' is never closed", "a missing"),
    # a bad expression
    ((f"{GOOD};", 'max_retries = 1 + * 2;', 'log = "x.log";'),
     "job.dap:3: ad 1: attribute 'max_retries': syntax error near '+ * 2'", ""),
    ((f"{GOOD};", 'arguments = strcat("-p ", "4";', 'log = "x.log";'),
     "job.dap:3: ad 1: attribute 'arguments': syntax error near '(\"-p \", \"4\"'",
     "a missing ')'?"),
    ((f"{GOOD};", 'a.b = 1;'),
     "job.dap:3: ad 1: syntax error near 'a.b = 1'", "expected an attribute"),
])
def test_syntax_errors_name_the_line_and_attribute(lines: tuple[str, ...], where: str,
                                                     fragment: str) -> None:
    message = problem(ad_lines(*lines))
    assert message.startswith(where), message
    assert fragment in message, message


def warnings(text: str) -> list[tuple[int, str, str | None]]:
    return [(w.line, w.attribute, w.suggestion) for w in unknown_attributes(text, "job.dap")]


def test_typos_are_warned_about_with_the_nearest_known_attribute() -> None:
    text = ad_lines(f"{GOOD};", 'optimisation = "YES";', 'use_hisotry = "YES";',
                    'MaxRetries = 2;')
    [spec] = parse(text)  # still accepted (a warning, not an error), and not optimized
    assert spec.optimization is False and spec.use_history is False
    assert warnings(text) == [(3, "optimisation", "optimization"),
                              (4, "use_hisotry", "use_history"), (5, "MaxRetries", "max_retries")]
    assert str(unknown_attributes(text, "job.dap")[0]) == (
        "job.dap:3: ad 1: attribute 'optimisation' is not one Stork knows; did you mean "
        "'optimization'? (prefix your own attributes with 'user_' or pass --no-warn to silence "
        "this)")


def test_user_annotations_and_unrelated_names() -> None:
    assert USER_PREFIX == "user_"
    quiet = (f"[ {GOOD}; user_experiment = \"atlas\"; USER_Run = 42; user_ = 1;"
             ' OPTIMIZATION = "YES"; Use_History = "NO" ]')  # names are case-insensitive
    assert parse(quiet) and warnings(quiet) == []
    loud = f"[ {GOOD};\n experiment = \"atlas\"; run = 42;\n tag = \"x\" ]\n[ {GOOD}; note = 1 ]"
    assert warnings(loud) == [(2, "experiment", None), (2, "run", None), (3, "tag", None),
                              (4, "note", None)]
    assert "did you mean" not in str(unknown_attributes(loud, "job.dap")[0])


def test_the_shipped_examples_use_only_known_attributes() -> None:
    for path in [REPO / "submit_examples" / "paper" / "paper_example.dap",
                 *(REPO / "submit_examples" / "dagman").glob("*.dap")]:
        assert unknown_attributes(path.read_text(), path.name) == [], path


@pytest.mark.parametrize("attribute", KNOWN_ATTRIBUTES)
def test_every_known_attribute_is_read_by_the_parser(attribute: str) -> None:
    """The table is the parser's: a wrong value for any name in it is an error naming it."""
    values = {"dap_type": "transfer", "src_url": '"file:///a"', "dest_url": '"file:///b"'}
    values[attribute] = "{ 1, 2 }"
    ad = "[ " + "; ".join(f"{name} = {value}" for name, value in values.items()) + " ]"
    assert f"attribute '{attribute}': " in problem(ad)


def test_warnings_skip_what_does_not_parse() -> None:
    assert unknown_attributes("[ typo = 1 ", "job.dap") == []
    assert warnings(f"[ typo = ]\n[ {GOOD}; optimizaton = 1 ]") == [
        (2, "optimizaton", "optimization")]


def test_stork_submit_prints_warnings_unless_no_warn(tmp_path: Path) -> None:
    server = StorkServer(tmp_path)  # configured, never started: --dry-run needs no daemon
    (tmp_path / "job.dap").write_text(ad_lines(f"{GOOD};", 'optimisation = "YES";',
                                               'user_note = "mine";'))
    result = server.cli("stork_submit", "--dry-run", "job.dap")
    assert result.returncode == 0, result.stderr
    assert "1 ad(s) valid; nothing submitted (--dry-run)" in result.stdout
    assert result.stderr == (
        "stork_submit: warning: job.dap:3: ad 1: attribute 'optimisation' is not one Stork knows; "
        "did you mean 'optimization'? (prefix your own attributes with 'user_' or pass --no-warn "
        "to silence this)\n")
    quiet = server.cli("stork_submit", "--dry-run", "--no-warn", "job.dap")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    (tmp_path / "bad.dap").write_text(ad_lines("dap_type = transfer;", 'src_url = "file:///a";',
                                               'dest_ur = "file:///b";'))
    bad = server.cli("stork_submit", "--dry-run", "bad.dap")
    assert bad.returncode == 3
    warning, error = bad.stderr.splitlines()[:2]  # the typo first: it explains the error
    assert "attribute 'dest_ur' is not one Stork knows; did you mean 'dest_url'?" in warning
    assert error == "stork_submit: error: bad.dap:1: ad 1: attribute 'dest_url': is missing"


def test_a_job_with_a_warning_is_still_submitted(stork: StorkServer, tmp_path: Path) -> None:
    (tmp_path / "a.src").write_bytes(b"x" * 1000)
    (tmp_path / "job.dap").write_text(ad_lines(
        "dap_type = transfer;", f'src_url = "file://{tmp_path}/a.src";',
        f'dest_url = "file://{tmp_path}/a.dst";', 'use_hisotry = "YES";'))
    result = stork.cli("stork_submit", "job.dap")
    assert result.returncode == 0 and result.stdout == "Request assigned id: 1\n", result.stderr
    assert "attribute 'use_hisotry' is not one Stork knows; did you mean 'use_history'?" in (
        result.stderr)
    assert stork.wait_state(1)["state"] == "COMPLETED"


def test_every_problem_in_a_file_is_reported() -> None:
    message = problem('[ dap_type = x; src_url = "file:///a"; dest_url = "file:///b" ]\n'
                      '[ dap_type = transfer; src_url = "file:///a" ]\n')
    assert "ad 1: attribute 'dap_type'" in message and "ad 2: attribute 'dest_url'" in message


def test_arguments_parse_strictly() -> None:
    opts = parse_arguments(" -p 8  -b 4M -bs 256K -s 10M ")
    assert (opts.streams, opts.tcp_buffer_bytes, opts.block_size_bytes, opts.sample_size_bytes) == (
        8, 4 * 2**20, 256 * 2**10, 10 * 2**20)
    assert parse_arguments(opts.to_arguments()) == opts
    for bad in ("-p", "-p 0", "-p 999", "-p 4 -p 5", "-b -1", "-x 1", "; rm -rf /", "-p 4 `id`",
                "-s 10Q", "--p 4"):
        with pytest.raises(ArgumentsError):
            parse_arguments(bad)
    assert parse_size("1G") == 2**30 and parse_size("1000") == 1000


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_arguments_never_pass_unknown_tokens(text: str) -> None:
    try:
        opts = parse_arguments(text)
    except ArgumentsError:
        return
    # whatever was accepted re-serialises to known flags and numbers only
    tokens = opts.to_arguments().split()
    assert all(t in ("-p", "-b", "-bs", "-s") or t.isdigit() for t in tokens)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_gives_specs_or_a_submit_error(text: str) -> None:
    assert all(w.filename == "job.dap" for w in unknown_attributes(text, "job.dap"))
    try:
        specs = parse(text)
    except SubmitError as exc:
        assert exc.problems and all(p.filename == "job.dap" for p in exc.problems)
    else:
        assert specs


def test_error_summary_picks_the_telling_line() -> None:
    from stork.transfer.base import summarize_error

    text = ("error: globus_ftp_client: the server responded with an error\n"
            "500 500-Command failed. : globus_l_gfs_file_open failed.\n"
            "500-globus_xio: Unable to open file /x\n"
            "500-globus_xio: System error in open: No such file or directory\n"
            "500-globus_xio: A system call failed: No such file or directory\n500 End.\n")
    assert summarize_error(text) == "globus_xio: System error in open: No such file or directory"
    assert summarize_error("just one line") == "just one line"


def test_progress_is_read_from_vb_lines_split_across_chunks() -> None:
    import io

    from stork.transfer.base import read_progress

    text = (b"Source: ftp://h/\n  f -> g\n\n   1048576 bytes  1.00 MB/sec avg  1.00 MB/sec inst\r"
            b"   2097152 bytes  1.50 MB/sec avg  2.00 MB/sec inst\n")
    stream = io.BufferedReader(io.BytesIO(text), buffer_size=7)  # tiny reads split the lines
    chunks: list[bytes] = []
    seen = list(read_progress(stream, chunks.append))
    assert [p.bytes_done for p in seen] == [1048576, 2097152]
    assert seen[1].rate_mbps == pytest.approx(2 * 1024 * 1024 * 8 / 1e6)
    assert b"".join(chunks) == text
