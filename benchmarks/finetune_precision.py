"""Fine-tuning precision on a CPU: bf16 autocast against fp32, per model size, side by side in one run.

What `precision: auto` picks on a CPU rests on these figures (workloads/backbones/finetune.py `resolve_precision`,
CPU_BF16_MIN_PARAMS). For each model, `train_step` (the step `finetune` runs) on random clips and captions,
alternating bf16 and fp32 runs, each in a fresh process pinned to one core with one torch thread, after two untimed
steps; it prints CPU seconds per step (process time: what a loaded machine leaves comparable) and the ratio
bf16 / fp32 of the medians. Whether the CPU has native bf16 is printed too: without it bf16 is emulated and far
slower, and the comparison says nothing about models.

    python -m benchmarks.finetune_precision [--models mlvp-tiny:64,ViT-B-32:8] [--steps 3] [--repeat 2] [--smoke]

Each model is NAME:BATCH (clips per step, 4 frames each; the quickstart's mlvp-tiny fine-tune uses 64).
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


def step_inputs(model_name: str, batch: int, steps: int):
    """A fresh clip4clip of `model_name` on the CPU (seed 0) with its optimizer and schedule for `steps`, and `batch`
    random clips (4 frames) and captions: what `train_step` is timed on here and in benchmarks/finetune_threads.py.
    Returns (model, optimizer, schedule, tokens, clips)."""
    import torch

    from workloads.backbones import create_backbone
    from workloads.backbones.finetune import FinetuneConfig, optimizer

    torch.manual_seed(0)
    config = FinetuneConfig(backbone="clip4clip", clip_model=model_name, steps=steps, batch_size=batch)
    model = create_backbone("clip4clip", model_name, clip_only=True, device=torch.device("cpu")).train()
    opt, sched = optimizer(model, config)
    size = model.image_size
    g = torch.Generator().manual_seed(0)
    clips = torch.randint(0, 256, (batch, config.frames_per_clip, size, size, 3), dtype=torch.uint8, generator=g)
    tokens = model.tokenize([f"caption number {i} of a moving shape" for i in range(batch)])
    return model, opt, sched, tokens, clips


def one(model_name: str, batch: int, precision: str, steps: int) -> dict:
    """CPU seconds per step of one configuration, in this process."""
    import time

    import torch

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    torch.set_num_threads(1)
    model, opt, sched, tokens, clips = step_inputs(model_name, batch, steps + 2)
    from workloads.backbones.finetune import train_step
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    for _ in range(2):
        train_step(model, opt, sched, autocast, tokens, clips)
    c0 = time.process_time()
    for _ in range(steps):
        train_step(model, opt, sched, autocast, tokens, clips)
    return {"cpu_s_per_step": (time.process_time() - c0) / steps,
            "params": sum(p.numel() for p in model.parameters())}


# `--smoke`: seconds, mlvp-micro at 4 clips, one step, one run of each precision (the options given after it win)
SMOKE = ["--models", "mlvp-micro:4", "--steps", "1", "--repeat", "1"]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.provenance import smoke_argv

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.finetune_precision --models mlvp-tiny:64 "
                                        "--steps 5")
    ap.add_argument("--models", default="mlvp-tiny:64,ViT-B-32:8",
                    help="comma-separated NAME:BATCH (default mlvp-tiny:64,ViT-B-32:8)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per run (default 3)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each precision, alternated (default 2)")
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "BATCH", "PRECISION"), help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="seconds: the sizes of SMOKE")
    args = ap.parse_args(smoke_argv(argv, SMOKE))
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.one[2], args.steps)))
        return 0

    from workloads.backbones.finetune import CPU_BF16_MIN_PARAMS, cpu_has_native_bf16

    from benchmarks.provenance import cpu_model

    cpu = cpu_model()
    print(f"{cpu}; native bf16: {cpu_has_native_bf16()}; one core, one torch thread; load average "
          f"{os.getloadavg()[0]:.1f}; CPU_BF16_MIN_PARAMS {CPU_BF16_MIN_PARAMS / 1e6:.0f}M", flush=True)
    print("| model | params | batch (x4 frames) | bf16 CPU s/step | fp32 CPU s/step | bf16 / fp32 | faster |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for item in args.models.split(","):
        name, batch = item.rsplit(":", 1)
        runs: dict[str, list[float]] = {"bf16": [], "fp32": []}
        params = 0
        for _ in range(args.repeat):
            for precision in ("bf16", "fp32"):
                cmd = [sys.executable, "-m", "benchmarks.finetune_precision", "--steps", str(args.steps), "--one",
                       name, batch, precision]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
                figures = json.loads(out.stdout.strip().splitlines()[-1])
                runs[precision].append(figures["cpu_s_per_step"])
                params = figures["params"]
        bf16, fp32 = statistics.median(runs["bf16"]), statistics.median(runs["fp32"])
        each = lambda xs: "/".join(f"{x:.3f}" for x in xs)   # noqa: E731
        print(f"| {name} | {params / 1e6:.0f}M | {batch} | {bf16:.3f} ({each(runs['bf16'])}) | {fp32:.3f} "
              f"({each(runs['fp32'])}) | {bf16 / fp32:.2f} | {'bf16' if bf16 < fp32 else 'fp32'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
