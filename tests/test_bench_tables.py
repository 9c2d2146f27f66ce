"""The replay benches (bench/bench_grid.py, bench/bench_eos.py) on small synthetic tables:
partial grids, missing levels, `BufferSize 0`, tables with no usable row, and the judging
(cross-repeat by default, same-curve as an option; the best fixed setting learned from the
other data sets)."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from stork.translog import GRID_COLUMNS, read_grid_csv
from stork.tuning.rate_table import read_rows

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import bench_eos  # noqa: E402
import bench_grid  # noqa: E402

PYTHON = sys.executable
SWEEP_HEADER = ("Note,FileSize,FileNumbers,Network,Source,Destination,Bandwidth,RTT,BufferSize,"
                "P,CC,PP,FAST,Throughput,TestBed,Protocol,Version,Dedicated,TransferDuration")

Cell = tuple[int, int, int]


def rate(cell: Cell, size_bytes: float, repeat: int = 0) -> float:
    """A smooth surface (Mbit/s) that rises with the streams and pipelining, a little noise
    per repeat."""
    cc, p, pp = cell
    streams = cc * p
    top = 4000.0 if size_bytes > 1e8 else 2000.0
    noise = 1 + 0.03 * math.sin(7 * repeat + cc + 3 * p + 5 * pp)
    return top * (1 - math.exp(-streams / 12)) * (1 + 0.02 * math.log2(pp)) * noise


def grid_lines(cells: Iterable[Cell], *, size: float, count: int, repeats: int = 3,
               buffer: str = "33554432", rtt: str = "0.04", bandwidth: str = "10000",
               src: str = "alpha", dest: str = "beta",
               mbps_of: Callable[[Cell, float, int], float] = rate) -> list[str]:
    """Rows of `cells` in the grid columns, `repeats` times, each cell's Mbit/s
    `mbps_of(cell, size, repeat)`."""
    lines = []
    for r in range(repeats):
        for i, cell in enumerate(cells):
            mbps = mbps_of(cell, size, r)
            duration = size * count * 8 / 1e6 / mbps
            cc, p, pp = cell
            lines.append(f"{size:.0f},{count},{bandwidth},{rtt},{buffer},{p},{cc},{pp},0,"
                         f"{mbps:.6f},{duration:.6f},2015-04-08,1{r}:{i // 60:02d}:{i % 60:02d},"
                         f"{src},{dest}")
    return lines


def write_grid(path: Path, lines: list[str]) -> Path:
    path.write_text(",".join(GRID_COLUMNS) + "\n" + "\n".join(lines) + "\n")
    return path


def full(levels: Iterable[int], pps: Iterable[int] = (1,)) -> list[Cell]:
    levels = list(levels)
    return [(cc, p, pp) for cc in levels for p in levels for pp in pps]


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, str(REPO / "bench" / script), *args], capture_output=True,
                          text=True, timeout=300, check=False)


def one_clear_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a bench printed when refusing its tables (exit status 2, no traceback)."""
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [message] = done.stderr.strip().splitlines()
    return message


def grid_json(*paths: Path, extra: tuple[str, ...] = ()) -> dict[str, object]:
    names = [str(p) for p in paths]
    done = run_bench("bench_grid.py", "--history", *names, "--test", *names, "--seeds", "2",
                     "--scale-rows", "0", "--json", *extra)
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


# -- the table readers ------------------------------------------------------------------------

def test_buffer_size_zero_is_unknown(tmp_path: Path) -> None:
    table = write_grid(tmp_path / "zero.csv",
                       grid_lines(full((1, 2)), size=1e7, count=10, repeats=1, buffer="0"))
    records, skipped = read_grid_csv(table)
    assert skipped == [] and len(records) == 4
    assert {r.buffer_bytes for r in records} == {None}
    rows, dropped = read_rows(table)  # the analytics read the grids through the same rules
    assert len(rows) == 4 and dropped == 0


def test_a_negative_buffer_size_is_still_skipped(tmp_path: Path) -> None:
    table = write_grid(tmp_path / "neg.csv",
                       grid_lines(full((1,)), size=1e7, count=10, repeats=1, buffer="-5"))
    records, skipped = read_grid_csv(table)
    assert records == [] and "BufferSize '-5'" in skipped[0].reason


# -- bench_grid -------------------------------------------------------------------------------

def test_grid_with_fewer_levels(tmp_path: Path) -> None:
    # cc, p in {1, 2, 4}, pp in {1, 4}: not the published 6 x 6 x 6
    cells = full((1, 2, 4), (1, 4))
    table = write_grid(tmp_path / "small.csv",
                       grid_lines(cells, size=1e7, count=100)
                       + grid_lines(cells, size=5e8, count=8))
    out = grid_json(table)
    datasets = out["datasets"]
    assert isinstance(datasets, list) and len(datasets) == 2
    for d in datasets:
        assert 0 < d["share"] <= 1.0 + 1e-9
        for run in d["runs"]:
            cc, p, pp = run["params"]
            assert cc in (1, 2, 4) and p in (1, 2, 4) and pp in (1, 4)


def test_partial_grid_and_missing_levels(tmp_path: Path) -> None:
    # a grid with holes: one dataset lacks every cell at p = 4, the other some single cells
    cells = full((1, 2, 4, 8), (1, 2))
    holed = [c for c in cells if c[1] != 4]
    sparse = [c for i, c in enumerate(cells) if i % 5 != 2]
    table = write_grid(tmp_path / "holes.csv",
                       grid_lines(holed, size=1e7, count=100)
                       + grid_lines(sparse, size=5e8, count=8))
    out = grid_json(table)
    datasets = out["datasets"]
    assert isinstance(datasets, list) and len(datasets) == 2
    for d in datasets:
        assert 0 < d["share"] <= 1.0 + 1e-9
        assert set(d["baselines"]) >= {"1,1,1", "best fixed", "preset", "oracle"}


def test_grid_with_buffer_size_zero(tmp_path: Path) -> None:
    cells = full((1, 2, 4))
    table = write_grid(tmp_path / "zero.csv",
                       grid_lines(cells, size=1e7, count=100, buffer="0")
                       + grid_lines(cells, size=5e8, count=8, buffer="0"))
    out = grid_json(table)
    assert isinstance(out["datasets"], list) and len(out["datasets"]) == 2


def test_grid_with_no_usable_row_names_the_file(tmp_path: Path) -> None:
    lines = grid_lines(full((1, 2)), size=1e7, count=10, bandwidth="1")  # all above the link
    table = write_grid(tmp_path / "bad.csv", lines)
    done = run_bench("bench_grid.py", "--history", str(table), "--test", str(table),
                     "--scale-rows", "0")
    message = one_clear_error(done)
    assert "bad.csv" in message and "no usable row" in message
    assert "above the link rate" in message


def test_grid_without_a_column_names_the_file(tmp_path: Path) -> None:
    table = tmp_path / "cols.csv"
    table.write_text("FileSize,FileCount,Throughput\n1,2,3\n")
    done = run_bench("bench_grid.py", "--history", str(table), "--test", str(table),
                     "--scale-rows", "0")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "cols.csv" in done.stderr and "Parallelism" in done.stderr


def test_grid_judges_cross_repeat_by_default(tmp_path: Path) -> None:
    cells = full((1, 2, 4))
    table = write_grid(tmp_path / "g.csv", grid_lines(cells, size=1e7, count=100)
                       + grid_lines(cells, size=5e8, count=8))
    out = grid_json(table)
    assert out["judge"] == "cross-repeat"
    same = grid_json(table, extra=("--judge", "same-curve"))
    assert same["judge"] == "same-curve"


def test_grid_cross_repeat_draw() -> None:
    # the probes of a cell answer one repeat; the cell is judged on the mean of the others;
    # a cell measured once cannot be judged on other repeats and is left out
    cells = {(1, 1, 1): [10.0, 20.0, 30.0], (2, 1, 1): [40.0, 50.0], (4, 1, 1): [99.0]}
    t = bench_grid.TestSet(("a", "b", 1e7, 10), [], cells,
                           {c: sorted(v)[len(v) // 2] for c, v in cells.items()})
    view = bench_grid.draw(t, "cross-repeat", random.Random(3))
    assert view is not None
    assert set(view.judged) == {(1, 1, 1), (2, 1, 1)}
    for cell in view.judged:
        values = list(cells[cell])
        values.remove(view.probe(cell))
        assert view.judged[cell] == pytest.approx(sum(values) / len(values))
    same = bench_grid.draw(t, "same-curve", random.Random(3))
    assert same is not None and set(same.judged) == set(cells)
    assert all(same.judged[c] == same.probe(c) for c in cells)
    once = bench_grid.TestSet(("a", "b", 1e7, 10), [], {(1, 1, 1): [5.0]}, {(1, 1, 1): 5.0})
    assert bench_grid.draw(once, "cross-repeat", random.Random(0)) is None


def test_grid_unmeasured_cell_is_answered_by_the_nearest() -> None:
    measured = [(1, 1, 1), (4, 4, 1), (8, 2, 2)]
    assert bench_grid.nearest_cell((4, 8, 1), measured) == (4, 4, 1)
    assert bench_grid.nearest_cell((8, 2, 2), measured) == (8, 2, 2)


def test_climb_replayed_as_a_flow_counts_its_tries(tmp_path: Path) -> None:
    """The online controller replayed on a grid: the dataset moves window by window at the
    settings the climb chose, so its share counts the time of its tries and ramps."""
    def replayed(mbps_of: Callable[[Cell, float, int], float], size: float, count: int
                 ) -> tuple[bench_grid.Run, bench_grid.View]:
        name = f"g{size:.0f}x{count}.csv"
        table = write_grid(tmp_path / name, grid_lines(full((1, 2, 4, 8, 16)), size=size,
                                                        count=count, mbps_of=mbps_of))
        records, _ = bench_grid.load([table])
        [t] = bench_grid.test_sets(records)
        view = bench_grid.draw(t, "cross-repeat", random.Random(1))
        assert view is not None
        return bench_grid.replay_climb([], t, view, t.limits(), random.Random(2)), view

    # every cell alike: nothing to win, nothing lost to the tries
    flat, _ = replayed(lambda cell, size, repeat: 1000.0, 1e7, 2000)
    assert flat.share == pytest.approx(1.0)
    # streams pay (medium files from the preset, cc 8 p 2): the climb moves up and beats the
    # preset it started at, but not the best cell (its tries and ramps are counted)
    rising, view = replayed(rate, 6e7, 400)
    assert rising.probes >= 2 and rising.streams > 16
    assert view.share((8, 2, 1)) < rising.share < view.share(rising.params) <= 1.0
    # a dataset gone before the first judgement: where it started, no change
    short, view = replayed(rate, 6e7, 4)
    assert short.probes == 1 and short.params == (4, 2, 1)  # cc at most the 4 files
    assert short.share == pytest.approx(view.share((4, 2, 1)), rel=0.02)
    # another dataset of the class on the path is the climb's history, with the tables' host
    # names ("Gordon/Oasis") read as the daemon's log names them
    hosts = {"src": "Stampede", "dest": "Gordon/Oasis"}
    seen = write_grid(tmp_path / "seen.csv", grid_lines(full((1, 2, 4, 8, 16)), size=6e7,
                                                        count=400, **hosts))
    new = write_grid(tmp_path / "new.csv", grid_lines(full((1, 2, 4, 8, 16)), size=6.2e7,
                                                       count=400, **hosts))
    history, _ = bench_grid.load([seen])
    [t] = bench_grid.test_sets(bench_grid.load([new])[0])
    view = bench_grid.draw(t, "cross-repeat", random.Random(1))
    assert view is not None
    known = bench_grid.replay_climb(history, t, view, t.limits(), random.Random(2))
    assert "the path's history (25 settings measured)" in known.reason, known.reason


# -- bench_eos --------------------------------------------------------------------------------

def sweep_lines(files: dict[int, dict[int, list[float]]], note: str = "sweep",
                buffer: str = "16777216") -> list[str]:
    """{file size: {P: [Mbit/s of each repeat]}} -> rows, repeat by repeat."""
    lines = []
    for size, by_p in files.items():
        repeats = max(len(v) for v in by_p.values())
        for r in range(repeats):
            for p, values in sorted(by_p.items()):
                if r < len(values):
                    lines.append(f"{note},{size},1,NET,h1,h2,10000000000,0.002,{buffer},{p},na,"
                                 f"na,OFF,{values[r]},REAL,GRIDFTP,x,yes,1")
    return lines


def write_sweep(path: Path, lines: list[str]) -> Path:
    path.write_text(SWEEP_HEADER + "\n" + "\n".join(lines) + "\n")
    return path


def eos_json(*specs: str, extra: tuple[str, ...] = ()) -> dict[str, object]:
    args = [a for spec in specs for a in ("--data", spec)]
    done = run_bench("bench_eos.py", *args, "--json", "--synthetic", "", "--strategies",
                     "guided,dw d=3 w=2", *extra)
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def curve(top: float, best: int, levels: Iterable[int] = (1, 2, 4, 8, 16)) -> dict[int, float]:
    return {p: top * (1 - 0.1 * abs(math.log2(p) - math.log2(best))) for p in levels}


def test_sweep_file_missing_a_stream_count(tmp_path: Path) -> None:
    a = curve(900, 8)
    b = {p: v for p, v in curve(700, 4).items() if p != 8}  # this file never ran P = 8
    files = {1000: {p: [v, v * 1.02] for p, v in a.items()},
             2000: {p: [v, v * 0.97] for p, v in b.items()}}
    table = write_sweep(tmp_path / "holes.csv", sweep_lines(files))
    out = eos_json(str(table), extra=("--judge", "both"))
    sets = out["data_sets"]
    assert isinstance(sets, dict)
    (result,) = sets.values()
    for mode in ("same", "cross"):
        assert result[mode]["curves"] == 4
        fixed = result[mode]["fixed"]
        assert fixed["8"]["curves"] == 4 and fixed["8"]["stand_ins"] == 2
        assert fixed["4"]["stand_ins"] == 0


def test_sweep_repeat_missing_a_level(tmp_path: Path) -> None:
    # the second repeat of a file lacks P = 16: the first still has it
    files = {1000: {1: [100.0, 110.0], 2: [200.0, 190.0], 4: [300.0, 310.0], 16: [320.0]}}
    table = write_sweep(tmp_path / "r.csv", sweep_lines(files))
    out = eos_json(str(table), extra=("--judge", "both"))
    (result,) = out["data_sets"].values()  # type: ignore[union-attr]
    assert result["same"]["curves"] == 2 and result["cross"]["curves"] == 2


def test_sweep_buffer_size_zero(tmp_path: Path) -> None:
    files = {1000: {p: [v, v * 1.01] for p, v in curve(500, 4).items()}}
    table = write_sweep(tmp_path / "z.csv", sweep_lines(files, buffer="0"))
    out = eos_json(str(table))
    (result,) = out["data_sets"].values()  # type: ignore[union-attr]
    assert result["cross"]["curves"] == 2


def test_sweep_with_no_usable_row_names_the_file(tmp_path: Path) -> None:
    table = write_sweep(tmp_path / "nap.csv",
                        [line.replace(",1,na,na,", ",na,na,na,")
                         for line in sweep_lines({1000: {1: [5.0, 6.0]}})])
    done = run_bench("bench_eos.py", "--data", str(table), "--json", "--synthetic", "")
    message = one_clear_error(done)
    assert "nap.csv" in message and "no usable row" in message
    assert "P" in message


def test_sweep_note_that_selects_nothing(tmp_path: Path) -> None:
    table = write_sweep(tmp_path / "n.csv", sweep_lines({1000: {1: [5.0, 6.0]}}))
    done = run_bench("bench_eos.py", "--data", f"{table}:nothing", "--json", "--synthetic", "")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "n.csv" in done.stderr and "nothing" in done.stderr


def test_sweep_without_a_column(tmp_path: Path) -> None:
    table = tmp_path / "c.csv"
    table.write_text("Note,P\nx,1\n")
    done = run_bench("bench_eos.py", "--data", str(table), "--json", "--synthetic", "")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "c.csv" in done.stderr and "Throughput" in done.stderr


def test_eos_judges_cross_repeat_by_default(tmp_path: Path) -> None:
    files = {1000: {p: [v, v * 1.02, v * 0.99] for p, v in curve(900, 8).items()}}
    table = write_sweep(tmp_path / "d.csv", sweep_lines(files))
    out = eos_json(str(table))
    (result,) = out["data_sets"].values()  # type: ignore[union-attr]
    assert set(result) >= {"cross"} and "same" not in result
    out = eos_json(str(table), extra=("--judge", "same-curve"))
    (result,) = out["data_sets"].values()  # type: ignore[union-attr]
    assert "same" in result and "cross" not in result


def test_eos_cross_repeat_judges_on_the_other_repeats() -> None:
    repeats = ({1: 10.0, 2: 30.0}, {1: 20.0, 2: 10.0}, {1: 30.0, 2: 20.0})
    f = bench_eos.File(("f",), ("h",), repeats, (0, 1, 2))
    data = bench_eos.DataSet("d", (f,), (1, 2))
    cases = bench_eos._cases(data, "cross")
    assert len(cases) == 3
    _, sampled, judged, r = cases[0]
    assert sampled == repeats[0] and r == 0
    assert judged == {1: 25.0, 2: 15.0}


def test_eos_best_fixed_learned_from_the_other_data_sets(tmp_path: Path) -> None:
    # a and b peak at 4 streams, c at 16: c's best fixed from the others is 4, a's is 4
    def table(name: str, best: int) -> str:
        files = {s: {p: [v * (1 + 0.01 * s / 1000), v] for p, v in curve(800, best).items()}
                 for s in (1000, 2000)}
        return str(write_sweep(tmp_path / f"{name}.csv", sweep_lines(files)))

    out = eos_json(table("a", 4), table("b", 4), table("c", 16))
    sets = out["data_sets"]
    assert isinstance(sets, dict)
    assert sets["c"]["cross"]["best_fixed_elsewhere"]["streams"] == 4
    assert sets["a"]["cross"]["best_fixed_elsewhere"]["streams"] == 4
    assert sets["c"]["cross"]["best_fixed"]["streams"] == 16  # in hindsight, on c itself
    share = sets["c"]["cross"]["best_fixed_elsewhere"]["mean_share"]
    assert share == pytest.approx(sets["c"]["cross"]["fixed"]["4"]["mean_share"])


def test_climb_replayed_on_a_sweep_as_a_flow(tmp_path: Path) -> None:
    """The default strategy of the sweep replay is the daemon's online controller, moved as
    one flow of each curve's transfer from the streams the daemon starts it with: on a long
    dataset it moves P and pays for its tries; a single file too short to repay a try runs
    untuned at the preset."""
    falling = curve(900, 4, levels=(1, 2, 4, 8, 16, 32))  # 0.8 of the best at 16, 0.7 at 32
    files = {size: {p: [v, v * 1.02, v * 0.99] for p, v in falling.items()}
             for size in (50_000_000, 5_000_000_000)}
    # 100 files of 50 MB (about a minute at these rates); one file of 5 GB, predicted 4 s
    # at the table's 10 Gbit/s, below the shortest tuned file
    lines = [line.replace("sweep,50000000,1,", "sweep,50000000,100,")
             for line in sweep_lines(files)]
    table = write_sweep(tmp_path / "fall.csv", lines)
    done = run_bench("bench_eos.py", "--data", str(table), "--json", "--synthetic", "",
                     "--strategies", "climb")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["default_strategy"] == "climb"
    (result,) = out["data_sets"].values()
    climb = result["cross"]["strategies"]["climb"]
    assert climb["default"] and climb["curves"] == 6  # two transfers, three repeats each
    assert climb["acted"] == 3  # the dataset's three flows; the file ran untuned
    # the daemon's starts on a 2.5 MB BDP: 8 ranges of 4 streams for the file (`FileRun`),
    # 8 files of 4 streams for the dataset of large files (its chunk's preset)
    bdp = bench_eos._bdp("0.002", "10000000000")
    assert bench_eos._preset("5000000000", bdp) == 32
    assert bench_eos._preset("50000000", bdp, "100") == 32
    assert bench_eos._preset("50000000", bdp, "100", streams=False) == 4
    assert result["cross"]["preset"]["mean_share"] == pytest.approx(0.7, abs=0.01)
    # the file at the preset's share; the dataset came down from it, its tries counted: the
    # mean lies between the preset's and the oracle's
    assert 0.7 < climb["mean_share"] < 1.0
    assert climb["mean_samples"] > 1


def test_a_replayed_flow_takes_history_of_its_own_size_class_only(tmp_path: Path) -> None:
    """`--history` as the daemon reads its log: files of about the flow's size, else of its
    size class. A dataset of 1 MB files (small on a 2.5 MB BDP) is best at P 1 and its
    flows climb down there; a single 5 GB file after them (large: none of that history is
    its) runs untuned at its preset's 32 streams, its best, as without any history."""
    small = curve(900, 1, levels=(1, 2, 4, 8, 16, 32))
    large = curve(900, 32, levels=(1, 2, 4, 8, 16, 32))
    files = {1_000_000: {p: [v, v * 1.02, v * 0.99] for p, v in small.items()},
             5_000_000_000: {p: [v, v * 1.01, v * 0.98] for p, v in large.items()}}
    lines = [line.replace("sweep,1000000,1,", "sweep,1000000,20000,")  # 160 s at 900
             for line in sweep_lines(files)]
    table = write_sweep(tmp_path / "classes.csv", lines)
    data = bench_eos.load_sweeps(table, note="sweep")
    cases = bench_eos._cases(data, "cross")
    assert [c[0].key[0] for c in cases] == ["1000000"] * 3 + ["5000000000"] * 3
    row = bench_eos.replay_flow(cases, "cross", True, best_p=32)
    assert row.shares[3:] == [pytest.approx(1.0, abs=0.02)] * 3  # the preset, untouched
    assert row.samples[3:] == [1, 1, 1]
    assert all(share > 0.8 for share in row.shares[:3])  # the small files climbed down


# -- bench_layout -----------------------------------------------------------------------------

def layout_lines(size: float, best_cc: int, totals: Iterable[int] = (16, 32)) -> list[str]:
    """A grid of one dataset whose every total of streams is fastest laid out as `best_cc`
    transfers (the rate falls with the distance from it on a log scale), two repeats."""
    cells = [(cc, total // cc, 1) for total in totals for cc in (1, 2, 4, 8, 16)
             if total % cc == 0]

    def mbps(cell: Cell, _size: float, repeat: int) -> float:
        cc, p, _ = cell
        return 1000.0 * cc * p / 16 / (1 + abs(math.log2(cc / best_cc))) + repeat

    return grid_lines(cells, size=size, count=8, repeats=2, mbps_of=mbps)


def test_layout_counts_which_concurrency_wins_at_the_same_streams(tmp_path: Path) -> None:
    table = write_grid(tmp_path / "big.csv", layout_lines(3e9, best_cc=4)
                       + layout_lines(1e7, best_cc=1))  # small files: not counted
    done = run_bench("bench_layout.py", str(table))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    # cc 4 beats every other concurrency at both totals (16 and 32 streams), once per total
    assert "| 2 | 4 | 0 | 2 |" in rows and "| 4 | 8 | 2 | 2 |" in rows
    assert "| 4 | 16 | 2 | 2 |" in rows and "| 1 | 4 | 0 | 2 |" in rows
    best = [line for line in rows if "3 GB" in line]
    assert len(best) == 2 and all(line.endswith("| cc 4 |") for line in best)
    assert not [line for line in rows if "10 MB" in line]  # below --min-mb


def test_layout_counts_how_often_both_halvings_lose(tmp_path: Path) -> None:
    """Large files whose rate follows the streams (cc x p): each halving loses half, along
    either axis. Small files whose rate follows cc alone: halving cc loses, halving p not."""
    cells = full((1, 2, 4))
    large = grid_lines(cells, size=3e9, count=8, repeats=2,
                       mbps_of=lambda c, _s, r: 100.0 * c[0] * c[1] + r)
    small = grid_lines(cells, size=1e6, count=8, repeats=2, src="gamma",
                       mbps_of=lambda c, _s, r: 100.0 * c[0] + r)
    done = run_bench("bench_layout.py", str(write_grid(tmp_path / "g.csv", large + small)),
                     "--totals", "4")
    assert done.returncode == 0, done.stderr
    rows = done.stdout.split("the other axis (every dataset)")[1].splitlines()
    # (cc, p) with both halvings measured: (2, 2), (2, 4), (4, 2), (4, 4): two halvings each
    assert "| large | 8 | 8 | 1.00 |" in rows, rows
    assert "| small | 4 | 0 | 0.00 |" in rows, rows  # only cc's halvings lost


def test_layout_without_a_large_dataset_names_the_table(tmp_path: Path) -> None:
    table = write_grid(tmp_path / "small.csv", layout_lines(1e7, best_cc=4))
    done = run_bench("bench_layout.py", str(table))
    message = one_clear_error(done)
    assert "small.csv" in message and "1000 MB or more" in message


# -- bench_presets ----------------------------------------------------------------------------

def concurrency_lines(size: float, peak_cc: int, src: str = "alpha") -> list[str]:
    """A grid of one dataset at p 1 and 4, pp 1 and 2, whose rate at p 1 rises with cc up to
    `peak_cc` and falls past it (pp 2 a little faster), two repeats."""
    cells = [(cc, p, pp) for cc in (1, 2, 4, 8, 16, 32) for p in (1, 4) for pp in (1, 2)]

    def mbps(cell: Cell, _size: float, repeat: int) -> float:
        cc, p, pp = cell
        return 100.0 * min(cc, peak_cc) * (peak_cc / max(cc, peak_cc)) ** 0.5 * p * pp \
            + repeat

    return grid_lines(cells, size=size, count=100, repeats=2, src=src, mbps_of=mbps)


def test_presets_reads_small_files_concurrency_at_one_stream(tmp_path: Path) -> None:
    from stork.dataset.chunks import DEFAULT_CC, SizeClass

    table = write_grid(tmp_path / "grid.csv",
                       concurrency_lines(1e7, peak_cc=32)  # small at 40 ms, 10 Gbit/s
                       + concurrency_lines(2e7, peak_cc=8, src="gamma")
                       + concurrency_lines(3e9, peak_cc=4))  # large: not counted
    done = run_bench("bench_presets.py", str(table))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines()
            if line.startswith("| ") and " x 100 " in line]
    assert len(rows) == 2 and not [line for line in rows if "3 GB" in line], rows
    top, peaked = rows  # ordered by file size
    preset = DEFAULT_CC[SizeClass.SMALL]
    # each cell at its best pipelining depth (pp 2) and p 1: 200 x cc, the mean of repeats
    # 0 and 1 as the median
    assert "| 3200 | 6400 | cc 32 (largest measured)" in top, top
    assert f"| {(200 * preset + 0.5) / 6400.5:.2f} | cc 32 |" in top, top
    assert "| cc 8 |" in peaked and "largest measured" not in peaked  # past its peak it falls
    assert peaked.endswith("| cc 8 |"), peaked


def test_presets_without_a_small_dataset_names_the_table(tmp_path: Path) -> None:
    table = write_grid(tmp_path / "large.csv", concurrency_lines(3e9, peak_cc=4))
    done = run_bench("bench_presets.py", str(table))
    message = one_clear_error(done)
    assert "large.csv" in message and "one bandwidth-delay product" in message
