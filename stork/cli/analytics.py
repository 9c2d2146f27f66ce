"""stork_history analytics: regression models of the transfer rate (section IV of Sen, Rao et
al.): polynomial with interactions, bagging and boosting, fitted to the transfer log (through
the daemon) or to CSV tables in the formats of the public transfer logs.

    stork_history analytics [FILE.csv ...] [-src HOST] [-dest HOST] [-since UNIX_TIME]
        [--folds K] [--predict RTT_MS,FLOWS ...] [--extrapolate] [--hold-out-rtt RTT_MS]
        [--rtt-tolerance SHARE] [--plot DIR]

Prints per model the hyper-parameters chosen by k-fold cross-validation, the cross-validated
RMSE and R^2, the R^2 of the fit, the out-of-bag RMSE (bagging), the predictors' importance
and the generalization bound with its constants. `--predict` answers with each model's
estimate; a point outside the measured range of a predictor is flagged and makes the command
exit 1 unless `--extrapolate` is given. `--hold-out-rtt` fits on every other RTT and prints
each model's error on the held-out RTT's rows (the rows within --rtt-tolerance of it: RTTs the
daemon measured jitter). `--plot DIR` writes one PNG per model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from stork.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_name,
    error,
    load_settings,
    parser,
    run,
)
from stork.errors import AnalyticsError
from stork.tuning.rate_table import RTT_TOLERANCE, groups_text, rtt_groups

if TYPE_CHECKING:
    from stork.tuning.rate_models import Fit
    from stork.tuning.rate_table import Table


def _point(text: str) -> tuple[float, float]:
    try:
        rtt, flows = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected RTT_MS,FLOWS (e.g. 120,8), got {text!r}") from None
    return rtt, flows


def main(argv: list[str]) -> int:
    p = parser("stork_history analytics",
               "Fit polynomial, bagging and boosting models of the transfer rate over RTT and "
               "flows (and concurrency, pipelining, file size where they vary) to the "
               "transfer log, or to CSV tables (HARP grid or parallelism-sweeps columns).")
    add_name(p)
    p.add_argument("command", choices=["analytics"], help=argparse.SUPPRESS)
    p.add_argument("files", nargs="*", metavar="FILE.csv",
                   help="tables to fit (together); default: the daemon's transfer log")
    p.add_argument("-src", help="transfer log: only transfers from this host")
    p.add_argument("-dest", help="transfer log: only transfers to this host")
    p.add_argument("-since", type=float, default=0.0, metavar="UNIX_TIME",
                   help="transfer log: only transfers that started from then on")
    p.add_argument("--folds", type=int, default=5, metavar="K",
                   help="folds of the cross-validation (default 5)")
    p.add_argument("--predict", type=_point, action="append", default=[],
                   metavar="RTT_MS,FLOWS", help="each model's estimate there (repeatable)")
    p.add_argument("--extrapolate", action="store_true",
                   help="exit 0 even when a --predict point lies outside the measured ranges "
                        "(it is still flagged)")
    p.add_argument("--hold-out-rtt", type=float, metavar="RTT_MS",
                   help="fit on the other RTTs and print each model's error at this one")
    p.add_argument("--rtt-tolerance", type=float, default=RTT_TOLERANCE, metavar="SHARE",
                   help="--hold-out-rtt takes the rows whose RTT is within this share of it "
                        f"(default {RTT_TOLERANCE:g}; 0: that value only)")
    p.add_argument("--plot", metavar="DIR", help="write fits against measurements here")
    args = p.parse_args(argv)

    def body() -> int:
        if args.folds < 2:
            error(f"--folds must be 2 or more, got {args.folds}")
            return EXIT_FAILED
        if not 0 <= args.rtt_tolerance < 1:
            error(f"--rtt-tolerance is a share in [0, 1), got {args.rtt_tolerance:g}")
            return EXIT_FAILED
        table = _table(args)
        print(f"table: {table.source}: {len(table)} rows used, {table.skipped} skipped")
        print("predictors: " + ", ".join(f"{c} {low:g}..{high:g}"
                                         for c, (low, high) in table.ranges().items()))
        if args.hold_out_rtt is not None:
            return _hold_out(table, args.hold_out_rtt, args.folds, args.rtt_tolerance)
        from stork.tuning.rate_models import fit_all, predict

        fits = fit_all(table, args.folds)
        _print_fits(fits, args.folds)
        status = EXIT_OK
        for rtt, flows in args.predict:
            answer = predict(fits, table, rtt, flows)
            others = ", ".join(f"{c} {v:g}" for c, v in answer.point.items()
                               if c not in ("rtt_ms", "flows"))
            print(f"\nat RTT {rtt:g} ms, {flows:g} flows" + (f" ({others})" if others else "")
                  + ": " + ", ".join(f"{f} {v:.1f} Mbit/s" for f, v in answer.estimates.items()))
            if answer.extrapolated:
                print("  EXTRAPOLATED, not backed by measurements: " + "; ".join(answer.outside))
                if not args.extrapolate:
                    error(f"RTT {rtt:g} ms, {flows:g} flows lies outside the data "
                          f"({'; '.join(answer.outside)}); --extrapolate to accept")
                    status = EXIT_FAILED
        if args.plot:
            from stork.analytics.plot import draw

            for path in draw(fits, table, args.plot):
                print(f"wrote {path}")
        return status

    return run(body)


def _table(args: argparse.Namespace) -> Table:
    from stork.tuning import rate_table as tables

    if args.files:
        return tables.read_csv(args.files)
    from stork.client import Client
    from stork.translog import TransferRecord

    client = Client.from_settings(load_settings(args.config), args.name)
    try:
        rows = client.transfers(args.src, args.dest, args.since)
    finally:
        client.close()
    return tables.from_records([TransferRecord(**r) for r in rows])


def _print_fits(fits: Sequence[Fit], folds: int) -> None:
    print(f"\n| model | chosen by {folds}-fold CV | CV RMSE (Mbit/s) | CV R^2 | R^2 of the fit | "
          f"OOB RMSE (Mbit/s) | importance |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for f in fits:
        importance = ", ".join(f"{c} {v:.2f}" for c, v in
                               sorted(f.importance.items(), key=lambda kv: -kv[1]))
        oob = f"{f.oob_rmse:.1f}" if f.oob_rmse is not None else "-"
        print(f"| {f.family} | {f.setting} | {f.cv_rmse:.1f} | {f.cv_r2:.3f} | {f.r2:.3f} | "
              f"{oob} | {importance} |")
    print("\ncross-validated RMSE of every setting tried:")
    for f in fits:
        print(f"  {f.family}: " + ", ".join(f"{k} {v:g}" for k, v in f.cv_curve.items()))
    print("\ngeneralization bound (section IV-D; rates in units of C, the largest rate measured; "
          "I_hat(f) = the CV MSE):")
    for f in fits:
        c2 = f.bound.c_mbps ** 2
        print(f"  {f.family}: I_hat(f) = {f.cv_rmse ** 2 / c2:.4g} C^2; {f.bound.text()}")


def _hold_out(table: Table, rtt_ms: float, folds: int, tolerance: float) -> int:
    from stork.tuning.rate_models import fit_all

    mask = table.near_rtt(rtt_ms, tolerance)
    if not mask.any():
        known = groups_text(rtt_groups(table.column("rtt_ms"), max(tolerance, RTT_TOLERANCE)))
        raise AnalyticsError(table.source, f"no rows at RTT {rtt_ms:g} ms (within "
                                           f"{tolerance:.0%}) to hold out (measured: {known} ms)")
    train = table.without(mask, f"{table.source} without RTT {rtt_ms:g} ms")
    held = table.only(mask, f"RTT {rtt_ms:g} ms")
    fits = fit_all(train, folds)
    low, high = train.ranges()["rtt_ms"]
    at_low, at_high = held.ranges()["rtt_ms"]
    flag = "" if low <= at_low and at_high <= high else \
        f" (EXTRAPOLATED: trained on {low:.4g}..{high:.4g} ms)"
    where = f"{at_low:.4g}" if at_low == at_high else f"{at_low:.4g}..{at_high:.4g}"
    print(f"\nheld out RTT {rtt_ms:g} ms: {len(held)} rows (measured at {where} ms); fitted on "
          f"{len(train)} rows{flag}")
    print("\n| model | chosen by CV | RMSE at the held-out RTT (Mbit/s) | mean relative error | "
          "R^2 there |")
    print("| --- | --- | ---: | ---: | ---: |")
    flows = np.unique(held.column("flows"))
    curves = {}
    for f in fits:
        predicted = f.predict(held.x)
        rmse = float(np.sqrt(np.mean((predicted - held.y) ** 2)))
        relative = float(np.mean(np.abs(predicted - held.y) / held.y))
        total = float(np.sum((held.y - held.y.mean()) ** 2))
        r2 = 1 - float(np.sum((predicted - held.y) ** 2)) / total if total > 0 else 0.0
        print(f"| {f.family} | {f.setting} | {rmse:.1f} | {relative:.3f} | {r2:.3f} |")
        curves[f.family] = [float(predicted[held.column("flows") == n].mean()) for n in flows]
    print("\n| flows | measured mean | " + " | ".join(curves) + " |")
    print("| ---: | ---: |" + " ---: |" * len(curves))
    for i, n in enumerate(flows):
        measured = float(held.y[held.column("flows") == n].mean())
        print(f"| {n:g} | {measured:.1f} | " + " | ".join(f"{c[i]:.1f}" for c in curves.values())
              + " |")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
