"""Peak host memory (CPU RAM) of one fine-tuning task, from what drives it: what the task declares to Ray (`memory=`).

    finetune_bytes(config, device="cpu", train_pairs=0) -> int     (bytes, an upper bound)
    measure(config, dataset, root, options, device="cpu") -> dict   (one child process)

A fine-tuning task (orchestrator/stages/finetune.py `_finetune_task`) builds the model, decodes the train and test
splits into memory-mapped clip files (workloads/backbones/finetune.py `decode_split`), trains, evaluates the clean
test split 64 clips at a time and saves the checkpoint. Its peak resident memory is

    finetune_bytes = MARGIN x (BASE_BYTES + FIXED_BYTES + (STATE_BYTES [+ INIT_BYTES]) x params
                               + max(train, evaluation) + workers x (WORKER_BYTES + PREFETCH x batch)
                               + TOKEN_BYTES x train pairs x context)

- BASE_BYTES: a Ray worker process with what the task imports (torch, open_clip, cv2, PyAV); FIXED_BYTES: what any
  fine-tune adds (allocator arenas, the splits, the first step's buffers);
- STATE_BYTES per parameter (CLIP's and its pooling head's): on the CPU the weights, gradients and AdamW's two
  moments (16 B) and the clipping's temporaries; INIT_BYTES more when the fine-tune starts from weights (the state
  dict as read stays cached: workloads/backbones `load_checkpoint`);
- train, on the CPU: ACTIVATION_BYTES per (token x width x layer) of the step's images and captions (the autograd
  graph keeps a few (tokens x width) tensors per transformer layer) + PIXEL_BYTES per value of the step's uint8
  clips (images x S x S x 3: the batch, its float copies, the patch embedding's input);
- evaluation, on the CPU: EVAL_PIXEL_BYTES per value of one chunk of 64 clips x eval_frames (the float copies of
  the chunk and one layer's activations at a time, no graph): it is the peak when a training step is small;
- DataLoader workers (FinetuneConfig.workers): each its private pages and the PREFETCH batches it assembles ahead;
- every train caption's int64 token ids, held for the whole run.

`images` = FinetuneConfig.images_per_step(), `captions` the step's batch, tokens = (S / patch)^2 + 1 and (width,
layers) of the vision tower, (context, width, layers) of the text tower, and `params`, are read from the open_clip
config (`model_dims`), without importing torch, so the driver that launches the task computes it.

On a GPU the weights, the moments, the activations and the evaluation live on the device; the host keeps the CUDA
runtime's host side (CUDA_BYTES), the weights as built before they move and the checkpoint's copy when it is saved
(STATE_BYTES["cuda"]), and a few copies of the batch and of the evaluation chunk as uint8 (pinned, in flight).
These GPU figures are estimates from those terms, not measured: no GPU was at hand when the CPU figures were.

Not counted: the decoded clips themselves. They are memory-mapped files (a real train split, MSRVTT-9k at 12 frames
of 224 px, is 16 GB), read a batch at a time: page cache the kernel drops under pressure, not anonymous memory the
task must keep. A measurement's VmHWM includes whatever of them was resident (at the sizes below, a few MB).

How the constants were measured: `python -m workloads.finetune_memory --calibrate` (2026-11-27, the 2-core AMD EPYC
dev machine, AVX2 only, Python 3.11.7, torch 2.14.1 CPU build, open_clip 3.3.0, shared with other work: load average
10-30, so the seconds are not figures; the bytes are). `measure` runs the task's body (create_dataset, then
ensure_finetuned) in a fresh child process that first imports what the task imports, and reports its peak RSS from
/proc/self/status VmHWM (its own address space's high-water mark: getrusage's ru_maxrss carries the parent's across
fork and exec) and, sampled every 20 ms, the summed Private_Dirty of its children (DataLoader and decode workers: the
pages they share with the parent are the parent's). Quick recipe, fp32, 2 steps, random init, the synthetic dataset
at 32 px (CALIBRATION, CALIBRATION_DATA: train 64 videos and test 16 for the small models; for ViT-B/32 train 16, test
8 at 2 evaluation frames, and test 64 at 12 frames for its evaluation row). Peak minus the child's RSS after the
imports (784 MiB), against the model's terms above without BASE_BYTES and MARGIN:

| model | images x captions per step | evaluation images | peak - base MiB | model MiB | ratio |
|---|---|---:|---:|---:|---:|
| mlvp-micro (3.4M params) | 16 x 8 | 192 | 138 | 149 | 0.92 |
| mlvp-micro | 128 x 32 | 192 | 167 | 173 | 0.97 |
| mlvp-tiny (8.0M) | 16 x 8 | 192 | 257 | 260 | 0.99 |
| mlvp-tiny | 128 x 32 | 192 | 352 | 361 | 0.98 |
| ViT-B-32 (151M) | 4 x 2 | 16 | 2,874 | 2,924 | 0.98 |
| ViT-B-32 | 32 x 8 | 16 | 3,869 | 3,934 | 0.98 |
| ViT-B-32, from a checkpoint | 4 x 2 | 16 | 3,432 | 3,501 | 0.98 |
| ViT-B-32 | 4 x 2 | 768 | 4,497 | 4,623 | 0.97 |

FIXED_BYTES, STATE_BYTES, ACTIVATION_BYTES and PIXEL_BYTES solve the four rows whose training step is the peak
(mlvp-micro and mlvp-tiny at 128 x 32, ViT-B/32 at 4 x 2 and 32 x 8: 76 MiB, 18.2, 58.2, 30.3), EVAL_PIXEL_BYTES the
evaluation row (16.3), INIT_BYTES the checkpoint row's growth (3.9), each rounded up. A first series of the same runs
that day came within 0.91-1.10 of the model (allocator noise at the small sizes): MARGIN covers it. BASE_BYTES is a
Ray worker's RSS after the same imports, read inside a Ray task (830 MiB against the plain child's 784). DataLoader
workers: at 128 images with 2 workers the children held 22-24 MiB of private pages in all (WORKER_BYTES allows 48
each, beside their prefetched batches). The whole declaration (`finetune_bytes`) was 0.75-0.85 of every run's peak.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from workloads.render_memory import status_bytes

MIB = 1 << 20
MARGIN = 1.15                  # allocator slack and what the calibration did not vary
BASE_BYTES = 830 * MIB         # a Ray worker after importing torch, open_clip, cv2 and PyAV (CPU build of torch)
FIXED_BYTES = 80 * MIB         # what any fine-tune adds: allocator arenas, the splits, the first step's buffers
STATE_BYTES = {"cpu": 18.5, "cuda": 8}   # host bytes per parameter (cuda: estimated, see the docstring)
ACTIVATION_BYTES = 59          # per (token x width x layer) of one image or caption in the autograd graph (CPU)
PIXEL_BYTES = 31               # per uint8 value of the step's clips (CPU)
EVAL_PIXEL_BYTES = 17          # per uint8 value of one evaluation chunk (CPU)
EVAL_CHUNK = 64                # clips per evaluation chunk (finetune.py `evaluate`)
CUDA_BYTES = 2048 * MIB        # the CUDA runtime, cuBLAS and cuDNN on the host (estimated)
CUDA_COPIES = 4                # uint8 copies of a batch or an evaluation chunk on the host of a GPU task (estimated)
WORKER_BYTES = 48 * MIB        # one DataLoader worker's private pages
PREFETCH = 4                   # batches each worker assembles ahead (finetune.py: prefetch_factor)
TOKEN_BYTES = 8                # int64 token ids
INIT_BYTES = 4                 # per parameter: the starting weights as read, kept (load_checkpoint caches them)


def model_dims(clip_model: str, backbone: str = "clip4clip") -> dict:
    """The open_clip config's sizes that the memory depends on: parameters (CLIP's, plus X-Pool's pooling head),
    image size, and (tokens, width, layers) of each tower. Read from the config alone (no torch); the parameter
    count is open_clip's CLIP (a ViT image tower and its own text tower) counted exactly."""
    from workloads.backbones.configs import model_config

    cfg = model_config(clip_model)
    if cfg is None:
        raise KeyError(f"no open_clip config for {clip_model!r}")
    e, v, t = cfg["embed_dim"], cfg["vision_cfg"], cfg["text_cfg"]
    size = v["image_size"][0] if isinstance(v["image_size"], (list, tuple)) else v["image_size"]
    grid = size // v["patch_size"]
    w, tw = v["width"], t.get("width", 512)
    vocab, ctx = t.get("vocab_size", 49408), t.get("context_length", 77)

    def layer(width: int, ratio: float) -> int:  # attention (q, k, v, out with biases), two LayerNorms, the MLP
        hidden = int(width * ratio)
        return 4 * width * width + 4 * width + 4 * width + 2 * width * hidden + hidden + width

    vision = (3 * v["patch_size"] ** 2 * w + w + (grid * grid + 1) * w + 4 * w
              + v["layers"] * layer(w, v.get("mlp_ratio", 4.0)) + w * e)
    text = vocab * tw + ctx * tw + t["layers"] * layer(tw, t.get("mlp_ratio", 4.0)) + 2 * tw + tw * e + 1
    head = 5 * e * e + 11 * e if backbone == "xpool" else 0   # X-Pool's pooling head (workloads/backbones/xpool.py)
    return {"params": vision + text + head, "image_size": int(size),
            "vision": (grid * grid + 1, w, v["layers"]), "text": (ctx, tw, t["layers"])}


def step_shape(config) -> tuple[int, int]:
    """(images, captions) of one step of `config` (a FinetuneConfig): batch x frames, and the batch."""
    recipe = config.published
    return config.images_per_step(), recipe.batch_size if recipe else config.batch_size


def finetune_bytes(config, device: str = "cpu", train_pairs: int = 0) -> int:
    """Peak resident bytes of the fine-tuning task of `config` (a FinetuneConfig) on `device` ("cpu" or "cuda"),
    `train_pairs` (video, caption) pairs in its train split (module docstring: the terms and how they were
    measured)."""
    gpu = str(device).startswith("cuda")
    dims = model_dims(config.clip_model, config.backbone)
    images, captions = step_shape(config)
    values = dims["image_size"] ** 2 * 3                   # uint8 values of one frame at the model's size
    eval_values = EVAL_CHUNK * config.eval_frames * values
    if gpu:
        work = CUDA_BYTES + CUDA_COPIES * max(images, EVAL_CHUNK * config.eval_frames) * values
    else:
        (vt, vw, vl), (tt, tw, tl) = dims["vision"], dims["text"]
        train = ACTIVATION_BYTES * (images * vt * vw * vl + captions * tt * tw * tl) + PIXEL_BYTES * images * values
        work = max(train, EVAL_PIXEL_BYTES * eval_values)
    workers = config.workers * (WORKER_BYTES + PREFETCH * images * values)
    tokens = TOKEN_BYTES * dims["text"][0] * max(0, train_pairs)
    state = STATE_BYTES["cuda" if gpu else "cpu"] + (INIT_BYTES if config.init else 0)
    total = BASE_BYTES + FIXED_BYTES + state * dims["params"] + work + workers + tokens
    return int(MARGIN * total)


# ------------------------------------------------------------------------------------------------ measurement

def measure(config, dataset: str, root: str | os.PathLike, options: dict | None = None, device: str = "cpu",
            init_path: str | None = None, timeout: float | None = None) -> dict:
    """Run the fine-tuning task's body (`_finetune_task`: create_dataset, ensure_finetuned) for `config` on the
    dataset, in a fresh child process that imports what the task imports first; the checkpoint goes to a temporary
    folder. `init_path`: the starting weights (`config.init` names them). Returns {"peak_bytes": the child's VmHWM,
    "workers_bytes": its children's peak private memory (sampled), "base_bytes": its RSS after the imports,
    "cuda_bytes": what starting CUDA added to it (0 on the CPU), "wall_s", "steps", "device"}."""
    from dataclasses import asdict

    job = {"config": asdict(config), "dataset": dataset, "root": str(root), "options": options or {},
           "device": device, "init_path": init_path}
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    repo = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run([sys.executable, "-m", "workloads.finetune_memory", "--child", json.dumps(job)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=repo)
    if done.returncode != 0:
        raise RuntimeError(f"measuring a fine-tune of {config.clip_model} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _private_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Private_Dirty:"))
    except OSError:
        return 0  # gone


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


class _ChildSampler:
    """The peak over time of the summed private memory of this process's children (DataLoader and decode workers)."""

    def __init__(self, every: float = 0.02):
        self.peak, self.every, self._stop = 0, every, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    def _run(self):
        me = os.getpid()
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, sum(_private_bytes(c) for c in _children(me)))


def _child(job: dict) -> dict:
    import av  # noqa: F401 (what the task's process holds beside Ray: the decoders, torch, open_clip)
    import cv2  # noqa: F401
    import open_clip  # noqa: F401
    import torch

    from workloads.backbones.finetune import FinetuneConfig, ensure_finetuned
    from workloads.datasets import create_dataset

    base = status_bytes("VmRSS")
    if job["device"] == "cuda":
        torch.zeros(1, device="cuda")   # the CUDA context, before any work
    cuda = status_bytes("VmRSS") - base
    config = FinetuneConfig(**job["config"])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, _ChildSampler() as workers:
        # the body of orchestrator/stages/finetune.py `_finetune_task`
        ds = create_dataset(job["dataset"], root=job["root"], **job["options"])
        _, record = ensure_finetuned(config, ds.train_split(), ds.test_split(), tmp, "memory",
                                     init_path=job.get("init_path"), log=lambda s: None, device=job["device"])
    return {"peak_bytes": status_bytes("VmHWM"), "workers_bytes": workers.peak, "base_bytes": base,
            "cuda_bytes": cuda,
            "wall_s": round(time.perf_counter() - t0, 2), "steps": record["steps"], "device": record["device"]}


# ------------------------------------------------------------------------------------------------ calibration

# (model, batch, frames per clip, workers, dataset options, evaluation frames, from a checkpoint): the calibration runs
CALIBRATION = (
    ("mlvp-micro", 8, 2, 0, "small", 12, False),
    ("mlvp-micro", 32, 4, 0, "small", 12, False),
    ("mlvp-micro", 32, 4, 2, "small", 12, False),
    ("mlvp-tiny", 8, 2, 0, "small", 12, False),
    ("mlvp-tiny", 32, 4, 0, "small", 12, False),
    ("mlvp-tiny", 32, 4, 2, "small", 12, False),
    ("ViT-B-32", 2, 2, 0, "vit", 2, False),
    ("ViT-B-32", 8, 4, 0, "vit", 2, False),
    ("ViT-B-32", 2, 2, 0, "vit", 2, True),
    ("ViT-B-32", 2, 2, 0, "vit_eval", 12, False),
)
CALIBRATION_DATA = {"small": {"n_train": 64, "n_test": 16, "size": 32}, "vit": {"n_train": 16, "n_test": 8, "size": 32},
                    "vit_eval": {"n_train": 16, "n_test": 64, "size": 32}}


def calibrate(root: str | os.PathLike, vit: bool = True, device: str = "cpu", log=print) -> list[dict]:
    """Measure the configurations the constants were fitted to (CALIBRATION; module docstring) on synthetic data
    generated under `root`; returns one row per run with the declared figure beside the measured one. `vit`: also
    the ViT-B/32 rows (minutes on 2 cores)."""
    import torch

    from workloads.backbones import create_backbone, save_backbone
    from workloads.backbones.finetune import FinetuneConfig
    from workloads.datasets import create_dataset

    runs = []
    for clip_model, bs, frames, workers, data, eval_frames, from_checkpoint in CALIBRATION:
        if clip_model == "ViT-B-32" and not vit:
            continue
        options = CALIBRATION_DATA[data]
        where = Path(root) / data
        pairs = len(create_dataset("synthetic", root=str(where), **options).train_split().pairs)
        init_path = None
        if from_checkpoint:   # random weights saved as a checkpoint, the starting point of the fine-tune
            init_path = str(Path(root) / f"{clip_model}-init.pt")
            if not Path(init_path).is_file():
                torch.manual_seed(0)
                save_backbone(create_backbone("clip4clip", clip_model), init_path)
        cfg = FinetuneConfig(clip_model=clip_model, steps=2, batch_size=bs, frames_per_clip=frames,
                             train_frames=max(4, frames), eval_frames=eval_frames, precision="fp32", workers=workers,
                             init="calibration" if init_path else "")
        r = measure(cfg, "synthetic", where, options, device=device, init_path=init_path)
        images, captions = step_shape(cfg)
        r.update(clip_model=clip_model, images=images, captions=captions, workers=workers,
                 eval_images=min(options["n_test"], EVAL_CHUNK) * eval_frames, from_checkpoint=from_checkpoint,
                 declared_bytes=finetune_bytes(cfg, r["device"], pairs))
        log(json.dumps(r))
        runs.append(r)
    return runs


def _table(runs: list[dict]) -> str:
    lines = ["| model | images x captions | workers | from checkpoint | evaluation images | peak MiB | base MiB | "
             "workers MiB | declared MiB | peak / declared |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        peak = r["peak_bytes"] + r["workers_bytes"]
        lines.append(f"| {r['clip_model']} | {r['images']} x {r['captions']} | {r['workers']} | "
                     f"{'yes' if r['from_checkpoint'] else 'no'} | {r['eval_images']} | {r['peak_bytes'] / MIB:,.0f} | "
                     f"{r['base_bytes'] / MIB:,.0f} | {r['workers_bytes'] / MIB:,.0f} | "
                     f"{r['declared_bytes'] / MIB:,.0f} | {peak / r['declared_bytes']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(_child(json.loads(sys.argv[2]))))
    elif len(sys.argv) >= 2 and sys.argv[1] == "--calibrate":
        with tempfile.TemporaryDirectory() as d:
            device = "cuda" if "--cuda" in sys.argv else "cpu"
            print(_table(calibrate(Path(d) / "data", vit="--no-vit" not in sys.argv, device=device)))
    else:
        raise SystemExit("usage: python -m workloads.finetune_memory --calibrate [--no-vit] [--cuda]")
