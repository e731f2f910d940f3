"""Do a fine-tune's batches keep a GPU's steps fed? Batch assembly measured on this machine against the device time
a step of the published recipes takes on an H200 (issue #33 item 6: fine-tuning on the GPU not data-bound).

A fine-tune decodes its train split once into a memory-mapped clip file, then assembles every step's batch from it
(workloads/backbones/finetune.py `TrainBatches`: gathering the batch's clips, X-Pool's crop and flip per clip) in
`workers` DataLoader processes, or between two steps in the training process with 0 (`train_loader`). This
benchmark builds such a clip file (`--videos` clips of 12 frames at 224 px), draws the recipe's batch plans as a
fine-tune does (`batch_plans`), and iterates `train_loader` exactly as the training loop does, while each step's
device work is stood in by a wait of its cost-model length (`finetune_step_seconds`: the measured ViT-B/32 step,
scaled by images per step; orchestrator/planning/cost_model.py). For each recipe, precision and worker count it
prints the wall time, the wait for batches and the device's busy share (its work over the wall time).

    python -m benchmarks.finetune_feed                        # xpool and clip4clip, workers 0,1,2, 12 steps
    python -m benchmarks.finetune_feed --recipes xpool --workers 0,2,4 --steps 20
    python -m benchmarks.finetune_feed --smoke                # seconds: 64 clips, xpool, workers 0 and 1, 2 steps

The clip file is read from the page cache (a fine-tune's decoded split stays there where memory allows; its task
reserves that memory: workloads/finetune_memory.py). Workers beyond this machine's cores only contend for them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def clip_file(path: Path, videos: int, frames: int, size: int) -> np.ndarray:
    clips = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(videos, frames, size, size, 3))
    rng = np.random.default_rng(0)
    for v in range(videos):
        clips[v] = rng.integers(0, 256, (frames, size, size, 3), dtype=np.uint8)
    clips.flush()
    return np.load(path, mmap_mode="r")


def feed(clips, recipe: str, steps: int, workers: int, device_s: float) -> tuple[float, float, float]:
    """(s until the first batch is in, then wall s, of which s waited for batches) of `steps` steps, each `device_s`
    of waiting once its batch is in. The first batch pays the workers' start once per fine-tune, which a real one
    (thousands of steps) spreads thin: the steady figures are those after it."""
    import torch

    from workloads.backbones.finetune import TrainBatches, batch_plans, train_loader
    from workloads.backbones.finetune_config import FinetuneConfig
    from workloads.read_ahead import Waited

    videos = clips.shape[0]
    config = FinetuneConfig(recipe=recipe, epochs=steps * FinetuneConfig(recipe=recipe).published.batch_size / videos)
    plans, _ = batch_plans(config, [[i] for i in range(videos)], videos, clips.shape[1], clips.shape[2],
                           np.random.default_rng(0))
    tokens = torch.zeros((videos, 77), dtype=torch.long)
    loader = train_loader(TrainBatches(clips, np.arange(videos), tokens), list(plans), workers, pin=False, seed=0)
    batches = Waited(loader)
    next(batches)
    first, t1 = batches.seconds, time.perf_counter()
    time.sleep(device_s)
    for _ in batches:
        time.sleep(device_s)
    wall = time.perf_counter() - t1
    waited = batches.seconds - first
    del batches, loader   # the persistent workers end with their loader
    return first, wall, waited


# `--smoke`: seconds, tiny inputs (the options given after it win)
SMOKE = ["--recipes", "xpool", "--videos", "64", "--steps", "2", "--workers", "0,1", "--repeat", "1"]


def main(argv=None) -> None:
    from benchmarks.provenance import smoke_argv
    from orchestrator.planning.cost_model import CostModel
    from workloads.backbones.finetune_config import RECIPES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.finetune_feed --recipes xpool --workers 0,2",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default="xpool,clip4clip", help="published recipes (default xpool,clip4clip)")
    ap.add_argument("--videos", type=int, default=512, help="clips in the clip file (default 512: 0.9 GB)")
    ap.add_argument("--steps", type=int, default=12, help="steps per case (default 12)")
    ap.add_argument("--workers", default="0,1,2", help="DataLoader worker counts to compare (default 0,1,2)")
    ap.add_argument("--repeat", type=int, default=2, help="rounds, each running every case once (default 2)")
    ap.add_argument("--smoke", action="store_true", help="seconds: the sizes of SMOKE")
    args = ap.parse_args(smoke_argv(argv, SMOKE))
    recipes = args.recipes.split(",")
    counts = [int(w) for w in args.workers.split(",")]
    cost = CostModel()
    device = {(r, p): cost.finetune_step_seconds(RECIPES[r].batch_size, RECIPES[r].frames, p)
              for r in recipes for p in ("fp32", "bf16")}

    with tempfile.TemporaryDirectory(prefix="finetune_feed_") as tmp:
        clips = clip_file(Path(tmp) / "clips.npy", args.videos, max(RECIPES[r].frames for r in recipes), 224)
        for r in recipes:
            feed(clips, r, 2, 0, 0.0)   # warm: the file through the page cache, cv2 and torch imported
        runs: dict[tuple, list[tuple[float, float]]] = {}
        for _ in range(args.repeat):
            for (r, p), device_s in device.items():
                for w in counts:
                    runs.setdefault((r, p, w), []).append(feed(clips, r, args.steps, w, device_s))
        alone = {r: sum(feed(clips, r, args.steps, 0, 0.0)[:2]) / args.steps for r in recipes}

    print(f"{args.videos} clips of 12 x 224 x 224 (memory-mapped), {args.steps} steps a case, medians of "
          f"{args.repeat} rounds; {os.cpu_count()} CPUs here")
    for r in recipes:
        rec = RECIPES[r]
        print(f"  {r}: batch {rec.batch_size} x {rec.frames} frames, augment {rec.augment}; assembling one batch "
              f"alone in this process: {1000 * alone[r]:.0f} ms")
    print("\n| recipe | precision | device s a step (H200) | workers | first batch in after s | then wall s | "
          "then waited for batches s | device busy share after the first batch |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (r, p, w), values in runs.items():
        first, wall, wait = (statistics.median(v[i] for v in values) for i in range(3))
        print(f"| {r} | {p} | {device[(r, p)]:.3f} | {w} | {first:.2f} | {wall:.2f} | {wait:.2f} | "
              f"{args.steps * device[(r, p)] / wall:.1%} |")


if __name__ == "__main__":
    main()
