"""The EOS boundary: EstimateRequest / EstimateResult values and their JSON, the job ad built
from them, and `stork.eos` standing on its own (it imports nothing from `stork.server`); and
the project's modules loading in one order (no two import each other)."""

from __future__ import annotations

import ast
import graphlib
import json
import subprocess
import sys
from pathlib import Path

import classad2
import pytest

from stork.eos.types import EstimateRequest, EstimateResult, SampleDetail
from stork.job import DapType, Job, JobSpec, JobState
from stork.jobad import estimate_ad, job_ad, job_summary, throughput_mbps

REPO = Path(__file__).resolve().parent.parent

SIZED = {
    "optimal_streams": 8, "estimated_throughput_mbps": 812.5, "model": "second_order",
    "model_params": {"a": 1.5, "b": -0.25}, "reason": "best fit",
    "samples": [[1, 120.0], [4, 400.0], [16, 790.0]],
    "sample_details": [{"streams": 1, "mbps": 120.0, "duration_s": 1.5, "bytes": 4194304,
                        "method": "destination size, steady part"}],
    "sampling_time_s": 6.25, "sampler": "gridftp", "from_history": False, "shared_run": True,
    "size_bytes": 1073741824, "setup_time_s": 0.4, "startup_time_s": 0.6,
    "steady_throughput_mbps": 830.0, "estimated_time_s": 10.572,
}


def test_result_json_round_trip_keeps_the_shape() -> None:
    result = EstimateResult.from_json(SIZED)
    assert result.optimal_streams == 8 and result.shared_run is True
    assert result.samples == ((1, 120.0), (4, 400.0), (16, 790.0))
    assert result.sample_details[0] == SampleDetail(1, 120.0, 1.5, 4194304,
                                                    "destination size, steady part")
    assert result.to_json() == SIZED
    assert json.loads(json.dumps(result.to_json())) == SIZED
    assert EstimateResult.of(result) is result and EstimateResult.of(SIZED) == result


def test_unsized_result_has_no_size_keys() -> None:
    result = EstimateResult(4, 300.0, "best_sample", samples=((4, 300.0),))
    body = result.to_json()
    for key in ("size_bytes", "estimated_time_s", "setup_time_s", "steady_throughput_mbps"):
        assert key not in body
    assert body["shared_run"] is False and body["from_history"] is False
    assert EstimateResult.from_json(body) == result


def test_malformed_result_is_refused() -> None:
    with pytest.raises(KeyError):
        EstimateResult.from_json({"model": "x"})
    with pytest.raises(ValueError):
        EstimateResult.from_json({**SIZED, "optimal_streams": "many"})


def test_request_json_round_trip() -> None:
    request = EstimateRequest("ftp://a:2811/x", "ftp://b:2811/y", "-b 1M -p 4", 1000, True,
                              None, queued_since=12.5)
    assert EstimateRequest.from_json(request.to_json()) == request
    assert request.triple_arguments == "-b 1048576"
    assert request.hosts() == ("a:2811", "b:2811")


def test_estimate_ad_from_the_result_or_its_json() -> None:
    text = estimate_ad(3, SIZED)
    assert text == estimate_ad(3, EstimateResult.from_json(SIZED))
    ad = classad2.ClassAd(text)
    assert ad["stork_id"] == 3 and ad["optimal_streams"] == 8
    assert ad["estimated_time_s"] == pytest.approx(10.572) and ad["size_bytes"] == 1073741824
    assert [s["streams"] for s in ad["samples"]] == [1, 4, 16]
    assert ad["model_params"]["a"] == pytest.approx(1.5)
    unsized = classad2.ClassAd(estimate_ad(4, EstimateResult(2, 50.0, "best_sample")))
    assert "estimated_time_s" not in unsized and "model_params" not in unsized


def transfer(state: JobState, rate_mbps: float = 0.0, **result: object) -> Job:
    spec = JobSpec(DapType.TRANSFER, "ftp://a/x", "file:///tmp/y",
                   ad_text='[ dap_type = "transfer"; src_url = "ftp://a/x"; '
                           'dest_url = "file:///tmp/y" ]')
    return Job(1, 0, "root", state, spec.to_json(), "transfer", spec.src_url, spec.dest_url,
               1.0, 2.0, attempts=1, rate_mbps=rate_mbps, result=dict(result))


def test_one_throughput_figure_per_job() -> None:
    done = transfer(JobState.COMPLETED, achieved_throughput_mbps=757.5, transfer_time_s=2.0)
    ad = job_ad(done)
    assert throughput_mbps(done) == job_summary(done)["rate_mbps"] == 757.5
    assert ad["transfer_rate_mbps"] == ad["achieved_throughput_mbps"] == 757.5
    running = transfer(JobState.RUNNING, rate_mbps=123.4567)
    assert job_summary(running)["rate_mbps"] == 123.4567
    assert job_ad(running)["transfer_rate_mbps"] == 123.457
    assert throughput_mbps(transfer(JobState.FAILED, rate_mbps=9.0)) == 0.0
    assert throughput_mbps(transfer(JobState.IDLE)) == 0.0


def imported(package: str) -> list[tuple[str, str]]:
    """(module file, name) of every import in `package`'s modules."""
    found = []
    for path in sorted((REPO / "stork" / package).glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(path.name, name) for name in names]
    return found


def test_the_tuning_layer_stands_below_the_services() -> None:
    """Every optimizer and its numerics live in `stork.tuning`, which imports none of the
    services that use them (the EOS, ASM's analysis job, the analytics, the daemon)."""
    above = ("stork.server", "stork.eos", "stork.asm", "stork.analytics", "stork.cli",
             "stork.optimizers")
    for module, name in imported("tuning"):
        assert not name.startswith(above), f"stork/tuning/{module} imports {name}"
    # a module of the layer loads no optimizer it was not asked for (nor scikit-learn)
    code = ("import sys, stork.server.daemon, stork.tuning.online, stork.tuning.sampling\n"
            "print('sklearn' in sys.modules, 'stork.tuning.harp' in sys.modules)\n"
            "from stork.tuning import OPTIMIZERS\n"
            "print(sorted(OPTIMIZERS), 'stork.tuning.harp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout.splitlines()
    assert out == ["False False", "['asm', 'dw', 'dw-interval', 'eos', 'harp'] True"], out


def test_eos_modules_import_nothing_from_the_server() -> None:
    for module, name in imported("eos"):
        assert not name.startswith("stork.server"), f"{module} imports {name}"
    code = ("import sys, pkgutil, importlib, stork.eos\n"
            "for m in pkgutil.iter_modules(stork.eos.__path__):\n"
            "    importlib.import_module('stork.eos.' + m.name)\n"
            "print(sorted(n for n in sys.modules if n.startswith('stork.server')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_a_request_carries_its_token_files_never_a_token() -> None:
    from stork.transfer.tokens import BearerTokens

    body = {"src_url": "davs://a:1/x", "dest_url": "root://b:2//y",
            "bearer_token_file": "/home/u/both.tok", "dest_bearer_token_file": "/home/u/d.tok"}
    request = EstimateRequest.from_json(body)
    assert request.tokens == BearerTokens("/home/u/both.tok", "/home/u/d.tok")
    again = EstimateRequest.from_json(request.to_json())
    assert again.tokens == request.tokens
    assert EstimateRequest.from_json({"src_url": "ftp://a:1/x", "dest_url": "file:///y"}
                                     ).tokens is None


def loaded_at_import(path: Path, modules: set[str]) -> set[str]:
    """The project's modules `path` imports as it loads: its top level and the branches
    of its top-level ``if`` and ``try``; not a function's own imports, nor what only a type
    checker reads (``if TYPE_CHECKING``)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit([s for h in node.handlers for s in h.body])
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                             else node.module for a in node.names)

    visit(ast.parse(path.read_text(), str(path)).body)
    return found & modules


def test_no_two_modules_import_each_other() -> None:
    """The project's modules load in one order: no circle of imports among them (issue
    27 drew the engine between the dispatcher and the modules; the dataset pass and the
    probing optimizers' tuning had imported each other)."""
    paths = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (REPO / "stork").rglob("*.py")}
    graph = {name: loaded_at_import(path, set(paths)) - {name} for name, path in paths.items()}
    assert graph["stork.server.dataset_run"] >= {"stork.server.dataset_batches",
                                                 "stork.server.dataset_flow",
                                                 "stork.engine"}  # (the graph has the edges)
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"modules that import each other: {' -> '.join(exc.args[1])}")
    assert order.index("stork.server.dataset_batches") < order.index("stork.server.dataset_run")
    assert order.index("stork.server.dataset_flow") < order.index("stork.server.dataset_run")
