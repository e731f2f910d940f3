"""How `plan` scales with a grid's trials (issue #47 item 6; docs/notes/2026-12-02-plan-at-scale.md):

    python -m benchmarks.plan_scale [--seeds 10 100 1000] [--smoke]

The grid: grids/all_perturbations.yaml with every registered method and `seeds: [0, ..., N-1]` (1,220 trials per
seed). For each N, in a fresh process: CPU seconds (`time.process_time`: the dev machine is shared, wall time says
little) of `plan`'s three steps, building the plan (`plan_for_sizing`), reading the ledger's status of every trial
(`select_trials`, an empty results folder) and printing the plan (`print_plan`, into a string), the peak RSS and the
longest printed line. Nothing is written: the grid goes to a temporary folder, the results folder stays empty.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

ONE = """
import io, resource, sys, time
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import missing_videos, plan_for_sizing
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.sync import select_trials
from orchestrator.run.console import make_console, print_plan

t0 = time.process_time()
plan = plan_for_sizing(sys.argv[1], Paths.make(sys.argv[2], sys.argv[3]))
plan.notes.extend(missing_videos(plan))
t1 = time.process_time()
todo, status = select_trials(plan, TrialLedger(plan.paths.ledger, read_only=True), False, False)
t2 = time.process_time()
out = io.StringIO()
print_plan(plan, status, todo, make_console(out))
t3 = time.process_time()
n = len(plan.trials)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{n:>9,} trials: build {t1 - t0:6.1f} s, select {t2 - t1:6.1f} s, print {t3 - t2:6.1f} s, total "
      f"{t3 - t0:6.1f} s = {1e6 * (t3 - t0) / n:5.1f} us/trial; peak RSS {rss:,.0f} MB; longest line "
      f"{max(map(len, out.getvalue().splitlines())):,}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--smoke", action="store_true", help="one grid of 1 seed (seconds)")
    args = ap.parse_args()
    if args.smoke:
        args.seeds = [1]
    from workloads.methods import METHODS

    grid = yaml.safe_load((REPO / "grids" / "all_perturbations.yaml").read_text())   # a shipped grid, not user input
    grid.update(name="plan_scale", methods=list(METHODS.names()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="mlvp-plan-scale-") as tmp:
        for n in args.seeds:
            path = Path(tmp) / f"seeds{n}.yaml"
            path.write_text(yaml.safe_dump({**grid, "seeds": list(range(n))}, sort_keys=False))
            subprocess.run([sys.executable, "-c", ONE, str(path), str(Path(tmp) / "results"),
                            str(Path(tmp) / "cache")], env=env, check=True)


if __name__ == "__main__":
    main()
