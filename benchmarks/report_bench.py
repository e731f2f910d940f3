"""How long `report` takes on the paper's whole matrix: grids/full_mlvp.yaml planned over stand-in
annotation files (tests/conftest.py's layouts, so no real data is needed), every trial given a ledger-like entry with
made-up metrics (1% failed, 1% never run), then orchestrator/report/page.py's write_report timed. Also the size of what
it writes.

    python -m benchmarks.report_bench [--trials N] [--smoke]

`--trials N` reports the plan's first N trials only; `--smoke` (seconds) is `--trials 200`.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=None, help="the plan's first N trials only (default: all)")
    ap.add_argument("--smoke", action="store_true", help="seconds: the first 200 trials")
    args = ap.parse_args(argv)
    if args.smoke:
        args.trials = args.trials or 200

    from tests.conftest import stand_in_data, stand_in_videos

    from orchestrator.config.grid import load_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.report.page import write_report

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        stand_in_data(tmp / "data")
        stand_in_videos(tmp / "data")
        import torch

        torch.save({}, tmp / "w.bin")   # a stand-in in the weights format: planning digests it, no trial loads it
        os.environ.update(MLVP_DATA=str(tmp / "data"), MLVP_WEIGHTS=str(tmp / "w.bin"))
        t0 = time.perf_counter()
        grid = load_grid(ROOT / "grids" / "full_mlvp.yaml")
        plan = build_plan(grid, Paths.make(tmp / "results", tmp / "cache"))
        t_plan = time.perf_counter() - t0
        trials = plan.trials[:args.trials] if args.trials else plan.trials
        rng = np.random.default_rng(0)
        entries = []
        for i, t in enumerate(trials):
            if i % 100 == 99:
                continue                                           # never run
            spec = t.to_dict()
            if i % 100 == 98:
                entries.append({"key": t.key, "spec": spec, "status": "failed", "error": "RuntimeError: made up",
                                "traceback": "Traceback ...", "metrics": {}, "timings": {}})
                continue
            metrics = {"R1": float(rng.uniform(10, 50)), "R5": 60.0, "R10": 70.0, "MdR": 3.0, "MnR": 20.0,
                       "hub_skewness": float(rng.uniform(0, 3)), "hub_robin_hood": float(rng.uniform(0.2, 0.5)),
                       "hub_antihub_occurrence": float(rng.uniform(0, 0.4)), "hub_k": 10.0}
            entries.append({"key": t.key, "spec": spec, "status": "ok", "metrics": metrics,
                            "timings": {"per_query_ms": float(rng.uniform(1, 40)), "gallery_s": 5.0},
                            "k_occurrence": rng.poisson(10, 1000).tolist(),
                            "batch_R1": rng.uniform(0, 100, 63).round(2).tolist(), "n_queries": 1000})
        t1 = time.perf_counter()
        files = write_report(grid, trials, entries, tmp / "results" / grid.name)
        t_report = time.perf_counter() - t1
        size = sum(f.stat().st_size for f in files)
        html = (tmp / "results" / grid.name / "report" / "index.html").stat().st_size
        print(f"grid {grid.name}: {len(plan.trials)} trials planned in {t_plan:.1f}s; {len(trials)} reported, "
              f"{len(entries)} ledger entries")
        print(f"write_report: {t_report:.1f}s, {len(files)} files, {size / 1e6:.1f} MB "
              f"(index.html {html / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
