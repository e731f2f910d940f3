"""Cost of generator version 2 (`synthetic_v2`, issue #12) beside the default, version 1 (`synthetic`), in one run:

    python benchmarks/default_cost.py [--root DIR] [--steps 500] [--workers 1]

For each dataset, from nothing (a fresh root, default a temporary folder): generation (sampling + drawing + H.264
encoding of 3,000 train and 256 test clips), CLIP4Clip fine-tuning of `mlvp-tiny` as the quickstart does (its
grid's FinetuneConfig; decoding the splits included), and rendering the quickstart's cells (clean, Gaussian and
impulse noise at severities 1/3/5) of every test clip with `render_video` (workloads/render_cache.py, what the render
stage's actors run), each in wall seconds of this one process. Pin it to one core (`taskset -c 1`) for numbers
comparable between the two.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CELLS = [("clean", 0)] + [(p, s) for p in ("gaussian_noise", "impulse_noise") for s in (1, 3, 5)]


def measure(name: str, root: Path, steps: int, workers: int) -> dict:
    import torch

    from orchestrator.config.grid import load_grid
    from workloads.backbones.finetune import ensure_finetuned
    from workloads.datasets import create_dataset
    from workloads.render_cache import RenderCache, RenderKey, render_video

    torch.set_num_threads(1)
    grid = load_grid(str(Path(__file__).resolve().parents[1] / "grids" / "quickstart.yaml"))
    out = {}
    t0 = time.time()
    ds = create_dataset(name, root=str(root / "datasets"), workers=workers)
    test, train = ds.test_split(), ds.train_split()
    out["generate"] = time.time() - t0
    from orchestrator.planning.keys import CheckpointKey
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan

    plan = build_plan(grid, Paths.make(root / "results", root / "cache"))
    cfg = plan.models[CheckpointKey("clip4clip", "synthetic")].finetune
    if steps:
        from dataclasses import replace

        cfg = replace(cfg, steps=steps)
    t0 = time.time()
    _, record = ensure_finetuned(cfg, train, test, str(root / "models" / name), ds.version(), init_path=None,
                                 log=lambda s: None, device="cpu")
    out["finetune"] = time.time() - t0
    out["clean_R1"] = record["metrics"]["v2t_R1"]
    cache = RenderCache(root / "render" / name)
    t0 = time.time()
    for p in test.pairs:
        keys = [RenderKey(name, ds.version(), p.video_id, pert, sev, grid.seed, grid.runtime.num_frames, 64, "")
                for pert, sev in CELLS]
        render_video(p.video_path, keys, cache, {"video_id": p.video_id, "video_path": p.video_path})
    out["render"] = time.time() - t0
    out["clips"] = len(test.pairs) * len(CELLS)
    sizes = sum(f.stat().st_size for f in ds.data_dir.joinpath("videos").iterdir())
    out["video_MB"] = sizes / 1e6
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="", help="where to generate (default: a fresh temporary folder)")
    ap.add_argument("--steps", type=int, default=0, help="fine-tuning steps (default: the quickstart's)")
    ap.add_argument("--workers", type=int, default=1, help="generation processes")
    args = ap.parse_args(argv)
    root = Path(args.root or tempfile.mkdtemp(prefix="mlvp-cost-"))
    rows = {}
    for name in ("synthetic", "synthetic_v2"):
        rows[name] = measure(name, root, args.steps, args.workers)
        print(name, {k: round(v, 1) for k, v in rows[name].items()}, flush=True)
    print("\n| stage (s, one process) | synthetic (v1: 64 px, 16 fr @ 8 fps) | synthetic_v2 (128 px, 72 fr @ 24 fps; "
          "train 64 px, 24 fr) |")
    print("|---|---:|---:|")
    for k, label in (("generate", "generate 3,000 train + 256 test clips"), ("finetune", "fine-tune CLIP4Clip"),
                     ("render", "render the quickstart's 7 cells x 256 clips"), ("video_MB", "videos on disk (MB)"),
                     ("clean_R1", "clean v2t R@1 (%)")):
        print(f"| {label} | {rows['synthetic'][k]:.1f} | {rows['synthetic_v2'][k]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
