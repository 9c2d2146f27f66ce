"""Submit files are parsed by the real classad2 library and validated with clear errors."""

from __future__ import annotations

from pathlib import Path

import classad2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stork.errors import ArgumentsError, SubmitError
from stork.job import DapType
from stork.submit import parse_submit
from stork.transfer.options import parse_arguments, parse_size
from stork.transfer.registry import Registry

REPO = Path(__file__).resolve().parent.parent
REG = Registry.default()
GOOD = 'dap_type = transfer; src_url = "file:///data/a"; dest_url = "ftp://h:2811/b"'


def parse(text: str, filename: str = "job.dap"):  # type: ignore[no-untyped-def]
    return parse_submit(text, filename, iwd="/home/u/work", registry=REG)


def problem(text: str) -> str:
    with pytest.raises(SubmitError) as info:
        parse(text)
    return str(info.value)


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
    ('[ dap_type = copy; src_url = "file:///a"; dest_url = "file:///b" ]', "dap_type", "unknown type 'copy'"),
    ('[ src_url = "file:///a"; dest_url = "file:///b" ]', "dap_type", "is missing"),
    ('[ dap_type = transfer; dest_url = "file:///b" ]', "src_url", "is missing"),
    ('[ dap_type = transfer; src_url = "data/a"; dest_url = "file:///b" ]', "src_url", "not a URL"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file://host/b" ]', "dest_url", "names host"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "ftp:///b" ]', "dest_url", "names no host"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "s3://bucket/b" ]', "dest_url", "no transfer module handles file -> s3"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; optimization = 3 ]', "optimization", '"YES" or "NO"'),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; max_retries = "x" ]', "max_retries", "non-negative integer"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; arguments = "-p 4 -f /etc/passwd" ]', "arguments", "unknown option '-f'"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; arguments = "-p many" ]', "arguments", "-p needs a stream count"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; arguments = "-p 2\\n-p 3" ]', "arguments", "control characters"),
    ('[ dap_type = transfer; src_url = "file:///a b"; dest_url = "file:///b" ]', "src_url", "whitespace"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; output = 7 ]', "output", "must be a string"),
    ('[ dap_type = transfer; src_url = undefined_thing; dest_url = "file:///b" ]', "src_url", "evaluates to undefined"),
    ('[ dap_type = transfer; src_url = "file:///a"; dest_url = "file:///b"; alt_protocols = "ftp" ]', "alt_protocols", "pairs like"),
])
def test_invalid_ads_name_file_ad_and_attribute(ad: str, attribute: str, fragment: str) -> None:
    text = f"[ {GOOD} ]\n\n{ad}\n"
    message = problem(text)
    assert message.startswith(f"job.dap:3: ad 2: attribute '{attribute}': "), message
    assert fragment in message


def test_syntax_errors_name_the_ad_and_line() -> None:
    message = problem(f"[ {GOOD} ]\n[ {GOOD}\n  ; broken = ; ]\n")
    assert message.startswith("job.dap:2: ad 2: ClassAd syntax error")
    assert "job.dap:4: ad 3" in problem(f"[ {GOOD} ]\n[ {GOOD} ]\n\n[ a = ]")
    assert "not closed" in problem(f"[ {GOOD} ]\n[ {GOOD}")
    assert "outside any [ ... ] ad" in problem(f"dap_type = transfer\n[ {GOOD} ]")
    assert "no [ ... ] ad found" in problem("// nothing here\n")


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
