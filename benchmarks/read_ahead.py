"""Can the render cache feed a GPU trial's query stream? The stream's input side measured on this machine against the
device time a batch takes on an H200 (issue #33 item 6: the GPU >= 90% busy during trials).

A trial reads each batch of clips from the render cache (workloads/trial.py `read_clip_batch`: file read, sha256
check, stacking) between two batches of model work. This benchmark builds a render cache of `--clips` clips at the
trial size (12 frames at 224 px, the format trials read), then streams it in batches exactly as a trial does
(`read_ahead` over `read_clip_batch`) while the device's work on each batch is stood in by a wait of its measured
length (the cost model's `trial_s_per_batch`, fp32 and bf16: orchestrator/planning/cost_model.py). The GPU is not
needed, and the wait leaves the CPU free as waiting for a CUDA kernel does. For each precision and read-ahead depth
it prints the stream's wall time, how long it waited for its input, and the device's busy share (its work over the
wall time), side by side in one run, alternating the depths.

    python -m benchmarks.read_ahead                       # 256 clips, depths 0 and 2, 3 rounds
    python -m benchmarks.read_ahead --clips 512 --depths 0,1,2,4 --repeat 5
    python -m benchmarks.read_ahead --smoke               # seconds: 32 clips at 64 px, one round

The clips are read from the page cache (written just before), as a trial reads clips rendered on its node shortly
before; a cold disk reads slower. On a GPU the real figure is every trial's `input_wait_s` timing.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np



def build_cache(root: Path, clips: int, frames: int, resolution: int):
    from workloads.render_cache import RenderCache, RenderKey

    cache = RenderCache(root)
    rng = np.random.default_rng(0)
    keys = [RenderKey("msrvtt", "bench", f"video{i}", "gaussian_noise", 5, 0, frames, resolution)
            for i in range(clips)]
    for key in keys:
        cache.write(key, rng.integers(0, 256, (frames, resolution, resolution, 3), dtype=np.uint8),
                    {"faithful": True})
    return cache, keys


def stream(cache, keys, batch: int, depth: int, device_s: float) -> tuple[float, float]:
    """(wall s, s waited for input) of one pass: each batch read as a trial reads it, then `device_s` of waiting."""
    from workloads.read_ahead import Waited, read_ahead
    from workloads.trial import read_clip_batch

    starts = range(0, len(keys), batch)
    t0 = time.perf_counter()
    batches = Waited(read_ahead(lambda s: read_clip_batch(cache, keys[s:s + batch]), starts, depth))
    for _ in batches:
        time.sleep(device_s)
    return time.perf_counter() - t0, batches.seconds


# `--smoke`: seconds, tiny inputs (the options given after it win)
SMOKE = ["--clips", "32", "--resolution", "64", "--repeat", "1"]


def main(argv=None) -> None:
    from benchmarks.provenance import smoke_argv
    from orchestrator.planning.cost_model import CostModel

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m benchmarks.read_ahead --clips 256 --depths 0,2",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=256, help="clips in the stream (default 256)")
    ap.add_argument("--batch", type=int, default=16, help="queries per batch (runtime.batch_size; default 16)")
    ap.add_argument("--frames", type=int, default=12, help="frames per clip (default 12)")
    ap.add_argument("--resolution", type=int, default=224, help="frame side in px (default 224, ViT-B/32)")
    ap.add_argument("--depths", default="0,2", help="read-ahead depths to compare (default 0,2: off, the trials')")
    ap.add_argument("--repeat", type=int, default=3, help="rounds, each running every case once (default 3)")
    ap.add_argument("--smoke", action="store_true", help="seconds: the sizes of SMOKE")
    args = ap.parse_args(smoke_argv(argv, SMOKE))
    depths = [int(d) for d in args.depths.split(",")]
    cost = CostModel()
    device = {p: cost.trial_gpu_seconds(args.batch, args.batch, p) for p in ("fp32", "bf16")}

    with tempfile.TemporaryDirectory(prefix="read_ahead_") as tmp:
        cache, keys = build_cache(Path(tmp), args.clips, args.frames, args.resolution)
        n_batches = -(-len(keys) // args.batch)
        stream(cache, keys, args.batch, 0, 0.0)   # warm: every file once through the page cache
        runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for _ in range(args.repeat):
            for precision, device_s in device.items():
                for depth in depths:
                    runs.setdefault((precision, depth), []).append(
                        stream(cache, keys, args.batch, depth, device_s))
        t = time.perf_counter()
        stream(cache, keys, args.batch, 0, 0.0)
        read_s = (time.perf_counter() - t) / n_batches

    mb = args.batch * args.frames * args.resolution ** 2 * 3 / 2 ** 20
    print(f"{args.clips} clips of {args.frames} x {args.resolution}x{args.resolution} in batches of {args.batch} "
          f"({mb:.0f} MiB a batch); reading one batch alone: {1000 * read_s:.0f} ms; medians of {args.repeat} "
          "rounds\n")
    print("| precision | device ms a batch (H200) | read-ahead | wall s | waited for input s | device busy share |")
    print("|---|---:|---:|---:|---:|---:|")
    for (precision, depth), values in runs.items():
        wall = statistics.median(v[0] for v in values)
        wait = statistics.median(v[1] for v in values)
        busy = n_batches * device[precision] / wall
        print(f"| {precision} | {1000 * device[precision]:.0f} | {depth} | {wall:.2f} | {wait:.2f} | {busy:.1%} |")
    for precision in device:
        walls = {d: statistics.median(v[0] for v in runs[(precision, d)]) for d in depths}
        base = walls[depths[0]]
        print(f"\n{precision}: wall with depth {depths[0]} over wall with depth d: "
              + ", ".join(f"d={d}: {base / w:.2f}x" for d, w in walls.items() if d != depths[0]))


if __name__ == "__main__":
    main()
