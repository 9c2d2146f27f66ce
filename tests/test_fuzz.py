"""Hostile input: generated and mutated submit files and API requests.

Every input must end in valid jobs or a clear error (a SubmitError naming file, ad and
attribute, or an HTTP 4xx with a JSON "error"); the daemon never crashes or hangs, and a
rejected file queues nothing. `make test` runs a short version of each; the full runs
(10,000 inputs per target) carry the `slow` marker:

    .venv/bin/python -m pytest -m slow tests/test_fuzz.py
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stork.errors import SubmitError
from stork.submit import KNOWN_ATTRIBUTES, parse_submit
from stork.transfer.registry import Registry
from tests.support import StorkServer

FULL = 10_000
SHORT = 300
REGISTRY = Registry.default()

VALID = ('[ dap_type = transfer; src_url = "ftp://host.example:2811/data/f.dat";\n'
         '  dest_url = "file:///tmp/out.dat"; arguments = "-p 4 -b 1M -bs 512K"; max_retries = 3;\n'
         '  optimization = "YES"; log = "job.log"; alt_protocols = "ftp-file" ]\n'
         '[ dap_type = estimation; src_url = "gsiftp://a.example/x"; dest_url = "gsiftp://b/y";'
         ' size = 1000 ]\n')
NASTY = ["-p 4 -f /etc/passwd", "; rm -rf /", "$(touch /tmp/pwned)", "`id`", "a\nb", "\x00",
         "-p", "-p -1", "-p 99999999999999999999", "--", "-bs 1M -vb", "|| true", "' OR 1 --",
         "ftp://h/a b", "file:///a\nfile:///b", "-p 4\n-f x", "\u202e", "%00", "../../etc",
         "[", "]", "\"", ";", "/*", "*/", "//", "#", "\\", "{", "}", "!", "=", "==", "..."]
VALUES = st.one_of(
    st.sampled_from(NASTY).map(json.dumps),
    st.text(max_size=40).map(json.dumps),
    st.integers(-2**70, 2**70).map(str),
    st.floats(allow_nan=True).map(repr),
    st.sampled_from(["true", "false", "undefined", "error", "{1, 2}", "[ a = 1 ]", "x + 1",
                     "strcat(\"a\", \"b\")", "1/0", "\"transfer\"", "transfer", "estimation"]))
ATTRS = st.one_of(st.sampled_from(sorted(KNOWN_ATTRIBUTES)), st.from_regex(r"[A-Za-z_]\w{0,10}",
                                                                         fullmatch=True))
ADS = st.lists(st.tuples(ATTRS, VALUES), max_size=8).map(
    lambda pairs: "[ " + "; ".join(f"{a} = {v}" for a, v in pairs) + " ]")
FILES = st.lists(ADS, max_size=4).map("\n".join)


def mutate(rng: random.Random, text: str) -> str:
    """Random byte-level edits of a valid file: delete, duplicate, insert nasty pieces."""
    out = list(text)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out) + 1)
        op = rng.random()
        if op < 0.3 and out:
            del out[i:i + rng.randint(1, 5)]
        elif op < 0.6:
            out[i:i] = list(rng.choice(NASTY))
        elif out:
            j = rng.randrange(len(out))
            out[i:i] = out[j:j + rng.randint(1, 12)]
    return "".join(out)


MUTATED = st.randoms(use_true_random=False).map(lambda rng: mutate(rng, VALID))


def test_the_mutation_seed_is_accepted() -> None:
    """Mutations of a seed the parser rejects seldom reach the acceptance checks."""
    specs = parse_submit(VALID, "fuzz.dap", iwd="/tmp", registry=REGISTRY, max_ads=100)
    assert [s.dap_type.value for s in specs] == ["transfer", "estimation"]
    assert specs[0].arguments == "-p 4 -b 1048576 -bs 524288"


def check_parse(text: str) -> None:
    try:
        specs = parse_submit(text, "fuzz.dap", iwd="/tmp", registry=REGISTRY, max_ads=100)
    except SubmitError as exc:
        assert exc.problems
        for problem in exc.problems:
            rendered = str(problem)
            assert rendered.startswith("fuzz.dap") and problem.message, rendered
        return
    for spec in specs:  # what is accepted is well formed
        assert "\n" not in spec.src_url and "\n" not in spec.dest_url
        assert "://" in spec.src_url and not spec.src_url.startswith("-")
        for word in spec.arguments.split():
            assert word.startswith("-") or word.replace(".", "").isalnum(), spec.arguments


def fuzz_settings(count: int) -> settings:
    return settings(max_examples=count, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def fuzz_parser(strategy: st.SearchStrategy[str], count: int) -> None:
    @given(strategy)
    @fuzz_settings(count)
    def one(text: str) -> None:
        check_parse(text)

    one()


@pytest.mark.parametrize("strategy", [FILES, MUTATED], ids=["generated", "mutated"])
def test_parser_short(strategy: st.SearchStrategy[str]) -> None:
    fuzz_parser(strategy, SHORT)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [FILES, MUTATED], ids=["generated", "mutated"])
def test_parser_full(strategy: st.SearchStrategy[str]) -> None:
    fuzz_parser(strategy, FULL)


# --- the API of a live daemon ---------------------------------------------------------------

JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=3) |
                       st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
SUBMIT_BODIES = st.one_of(
    st.fixed_dictionaries({"text": st.one_of(FILES, MUTATED)},
                          optional={"filename": JSONISH, "iwd": st.sampled_from(
                              ["/tmp", "rel", "", "/"]) | JSONISH, "lognotes": JSONISH,
                                    "dry_run": JSONISH}),
    JSONISH)
QUERY = st.dictionaries(st.sampled_from(["constraint", "long", "state", "src", "dest", "limit",
                                         "x"]),
                        st.one_of(st.sampled_from(NASTY), st.text(max_size=20),
                                  st.sampled_from(["1", "IDLE", "owner == \"root\"", "-5"])),
                        max_size=3)
REQUESTS = st.one_of(
    st.tuples(st.just("POST"), st.just("/v1/jobs"), SUBMIT_BODIES, st.just({})),
    st.tuples(st.just("GET"), st.just("/v1/jobs"), st.none(), QUERY),
    st.tuples(st.sampled_from(["GET", "DELETE"]),
              st.one_of(st.integers(-5, 10**20).map(lambda i: f"/v1/jobs/{i}"),
                        st.text(max_size=12).map(lambda t: f"/v1/jobs/{quote(t, safe='')}")),
              st.none(), st.just({})),
    st.tuples(st.just("GET"), st.just("/v1/history"), st.none(), QUERY),
    st.tuples(st.just("POST"), st.just("/v1/estimate"), JSONISH, st.just({})),
    st.tuples(st.sampled_from(["GET", "PUT", "PATCH", "POST"]),
              st.sampled_from(["/v1/ping", "/v1/matrix", "/", "/v1", "/v1/jobs/1/x", "//",
                               "/v1/jobs?x", "/%00"]), JSONISH, st.just({})))


def fuzz_api(server: StorkServer, count: int) -> None:
    accepted: list[int] = []
    transport = httpx.HTTPTransport(uds=server.socket)
    with httpx.Client(transport=transport, base_url="http://stork", timeout=30) as client:

        @given(REQUESTS)
        @fuzz_settings(count)
        def one(request: tuple[str, str, object, dict[str, str]]) -> None:
            method, path, body, query = request
            content = json.dumps(body).encode() if body is not None else None
            response = client.request(method, path, content=content, params=query,
                                      headers={"Content-Type": "application/json"})
            assert response.status_code < 500, (request, response.text)
            if response.headers.get("content-type", "").startswith("text/html"):
                # the status page ("//" is "/" to the server)
                assert (method, path.strip("/"), response.status_code) == ("GET", "", 200)
                return
            payload = response.json()
            if response.status_code >= 400:
                assert isinstance(payload.get("error"), str) and payload["error"], payload
            elif method == "POST" and path == "/v1/jobs":
                accepted.extend(payload.get("ids", []))

        one()
        assert client.get("/v1/ping").status_code == 200  # still up, still answering
        jobs = client.get("/v1/jobs").json()["jobs"]
    # exactly the accepted submissions are queued: a rejected file queued nothing
    assert sorted(j["id"] for j in jobs) == sorted(accepted)


@pytest.fixture
def quiet_server(tmp_path: Path) -> Iterator[StorkServer]:
    """A daemon that never runs what the fuzzer queues (no slot to run it in)."""
    with StorkServer(tmp_path, {"STORK_DISPATCH_INTERVAL": "3600",
                                "STORK_MAX_NUM_JOBS": "1",
                                "STORK_MODULE_DIR": str(tmp_path)}) as server:
        yield server


def test_api_short(quiet_server: StorkServer) -> None:
    fuzz_api(quiet_server, SHORT)
    assert quiet_server.proc is not None and quiet_server.proc.poll() is None


@pytest.mark.slow
def test_api_full(quiet_server: StorkServer) -> None:
    fuzz_api(quiet_server, FULL)
    assert quiet_server.proc is not None and quiet_server.proc.poll() is None


# --- nothing reaches a shell or becomes an extra option -------------------------------------

RECORDER = """#!{python}
import json, sys
open(sys.argv[2][len("file://"):] + ".argv", "w").write(json.dumps(sys.argv[1:]))
"""


def test_metacharacters_stay_inside_one_argument(tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    recorder = modules / "stork.transfer.ftp-file"
    recorder.write_text(RECORDER.format(python=sys.executable))
    recorder.chmod(0o755)
    nasty_src = "ftp://h.example/a;b|c&d$(touch${IFS}/tmp/stork-pwned)`id`'q'\"dq\"&&-f>x"
    with StorkServer(tmp_path / "s", {"STORK_MODULE_DIR": str(modules)}) as server:
        dest = tmp_path / "out.dat"
        [job_id] = server.submit(f'[ dap_type = transfer; max_retries = 0; '
                                 f'src_url = {json.dumps(nasty_src)}; '
                                 f'dest_url = "file://{dest}"; ]')
        server.wait_state(job_id)
        refused = server.api("POST", "/v1/jobs", json={"iwd": "/", "text": (
            '[ dap_type = transfer; src_url = "ftp://h/a\\nfile:///etc/passwd"; '
            'dest_url = "file:///tmp/x" ]')})
        injected = server.api("POST", "/v1/jobs", json={"iwd": "/", "text": (
            '[ dap_type = transfer; src_url = "ftp://h/a"; dest_url = "file:///tmp/x"; '
            'arguments = "-p 4 -f /etc/passwd" ]')})
    argv = json.loads((tmp_path / "out.dat.argv").read_text())
    assert argv == [nasty_src, f"file://{dest}"]  # one argument each, verbatim, no shell
    assert not os.path.exists("/tmp/stork-pwned")
    assert refused.status_code == 400 and "src_url" in refused.text
    assert injected.status_code == 400 and "unknown option '-f'" in injected.text
