"""A CPU fine-tune's step on one torch thread against several, side by side in one run.

What a fine-tune that has the node to itself gains from its CPUs (orchestrator/planning/resources.py
`first_finetune_cpus`: the quickstart's clip4clip trains on both cores of a 2-core machine). For each thread count,
`train_step` (the step `finetune` runs, fp32) on random clips and captions, in a fresh process, after two untimed
steps; the thread counts' runs alternated. It prints wall seconds per step (what the critical path waits for: the
machine must be quiet), the ratio to one thread, and whether the weights after the timed steps are the same bits as
one thread's (a thread count changes the rounding of torch's reductions: the fine-tune records its count).

    python -m benchmarks.finetune_threads [--model mlvp-tiny:64] [--threads 1,2] [--steps 8] [--repeat 2] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one(model_name: str, batch: int, threads: int, steps: int) -> dict:
    """Wall seconds per step and a digest of the weights after them, in this process."""
    import hashlib
    import time

    import torch

    from benchmarks.finetune_precision import step_inputs

    torch.set_num_threads(threads)
    model, opt, sched, tokens, clips = step_inputs(model_name, batch, steps + 2)
    from workloads.backbones.finetune import train_step
    fp32 = torch.autocast("cpu", dtype=torch.bfloat16, enabled=False)
    for _ in range(2):
        train_step(model, opt, sched, fp32, tokens, clips)
    t0 = time.perf_counter()
    for _ in range(steps):
        train_step(model, opt, sched, fp32, tokens, clips)
    wall = (time.perf_counter() - t0) / steps
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    return {"wall_s_per_step": wall, "weights": digest.hexdigest()[:16]}


# `--smoke`: seconds, mlvp-micro at 4 clips, one step, one run of each count (the options given after it win)
SMOKE = ["--model", "mlvp-micro:4", "--steps", "1", "--repeat", "1"]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.provenance import smoke_argv

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.finetune_threads --threads 1,2 --steps 8")
    ap.add_argument("--model", default="mlvp-tiny:64", help="NAME:BATCH, clips per step at 4 frames (default "
                                                            "mlvp-tiny:64, the quickstart's fine-tune)")
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (default 1,2)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per run (default 8)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each count, alternated (default 2)")
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "BATCH", "THREADS"), help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="seconds: the sizes of SMOKE")
    args = ap.parse_args(smoke_argv(argv, SMOKE))
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), int(args.one[2]), args.steps)))
        return 0

    from benchmarks.provenance import commit, cpu_model

    name, batch = args.model.rsplit(":", 1)
    counts = [int(t) for t in args.threads.split(",")]
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; {commit(mark_uncommitted=True)}; load average "
          f"{os.getloadavg()[0]:.1f}; {name}, {batch} clips x 4 frames a step, fp32", flush=True)
    runs: dict[int, list[dict]] = {t: [] for t in counts}
    for _ in range(args.repeat):
        for t in counts:
            cmd = [sys.executable, "-m", "benchmarks.finetune_threads", "--steps", str(args.steps), "--one", name,
                   batch, str(t)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
            runs[t].append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = statistics.median(r["wall_s_per_step"] for r in runs[counts[0]])
    print(f"| torch threads | wall s/step (runs) | vs {counts[0]} | weights after {args.steps} steps |")
    print("|---:|---:|---:|---|")
    for t in counts:
        walls = [r["wall_s_per_step"] for r in runs[t]]
        digests = {r["weights"] for r in runs[t]}
        same = "same bits" if digests == {r["weights"] for r in runs[counts[0]]} else "other bits"
        print(f"| {t} | {statistics.median(walls):.3f} ({'/'.join(f'{w:.3f}' for w in walls)}) | "
              f"{base / statistics.median(walls):.2f}x | {same}{'' if len(digests) == 1 else ' (runs differ)'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
