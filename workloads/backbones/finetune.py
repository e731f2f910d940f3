"""Source fine-tuning: train a retrieval model on a dataset's clean train split (symmetric InfoNCE, as the X-Pool
trainer; docs/faithfulness.md: Backbones and checkpoints), evaluate clean test retrieval, and cache the checkpoint by a
content hash of everything that
determines it (config, data fingerprint, init weights, code version).

This is how the embedded default gets a model without downloading one: `mlvp-tiny` trained for a few minutes on the
synthetic train split (recipe "quick"). The same code fine-tunes any open_clip model on any registered dataset with
the published trainers' schedules (recipes "xpool" and "clip4clip": finetune_config.RECIPES, docs/finetuning.md):
separate learning rates for CLIP and for the layers added on it, warm-up then cosine decay, every (video, caption)
pair once per epoch, X-Pool's crop-and-flip augmentation.

Batches are assembled (gathered from the decoded clips, augmented) in DataLoader worker processes when
`config.workers` > 0, so a GPU step does not wait for them; what goes into each batch (rows, frames, crops) is drawn
in the main process from the run's one random stream, so the batches are the same for any number of workers.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from workloads import CODE_VERSION, FINETUNE_VERSION
from workloads.atomic import atomic_path, atomic_write_text
from workloads.backbones import create_backbone, load_checkpoint, save_backbone
from workloads.backbones.finetune_config import FinetuneConfig, checkpoint_path  # noqa: F401 (re-exported)
from workloads.backbones.model import Features, PoolingHead, VideoTextModel, cosine_similarity
from workloads.datasets.base import Split
from workloads.seeding import digest
from workloads.video_io import VideoDecodeError, read_frames, resize_center_crop


# Below this many parameters a CPU fine-tunes faster in fp32 than in native bf16 autocast: the casts around each small
# matmul cost more than the bf16 kernels save. Measured with benchmarks/finetune_precision.py on a 2-core Xeon with
# AMX (benchmarks/RESULTS.md, "Fine-tuning precision on a CPU"): mlvp-tiny (8M) 1.45x faster in fp32, ViT-B/32
# (151M) 1.67x faster in bf16; the threshold lies between the two measured sizes.
CPU_BF16_MIN_PARAMS = 50_000_000


def resolve_precision(precision: str, device: torch.device, params: int | None = None) -> str:
    """"auto" -> "bf16" on a GPU with bf16; on a CPU, "bf16" only where oneDNN has native bf16 (AVX-512 BF16, AMX,
    Arm bf16) and the model has at least CPU_BF16_MIN_PARAMS parameters (`params`; None counts as large), else
    "fp32". Without native bf16 the autocast is emulated, ~10x slower than fp32 (measured: 6.5 s vs 0.6 s per
    mlvp-tiny step on an AVX2-only machine); with it, a small model still runs faster in fp32. The key keeps "auto";
    the record keeps what it resolved to."""
    if precision not in ("fp32", "bf16", "auto"):
        raise ValueError(f"precision must be 'fp32', 'bf16' or 'auto', got {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    large = params is None or params >= CPU_BF16_MIN_PARAMS
    return "bf16" if device.type == "cpu" and large and cpu_has_native_bf16() else "fp32"


def _auto_reason(precision: str, device: torch.device, params: int) -> str:
    """Why "auto" resolved as it did, for the fine-tune's log line."""
    if device.type != "cpu" or precision == "bf16":
        return "native bf16" if precision == "bf16" else "no bf16 on this device"
    if params < CPU_BF16_MIN_PARAMS:
        return f"fp32 is faster on a CPU below {CPU_BF16_MIN_PARAMS / 1e6:.0f}M parameters"
    return "no native bf16 here"


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes bf16 natively (x86: AVX-512 BF16 or AMX-BF16; Arm: the bf16 feature), read from
    the kernel's CPU flags; False where they cannot be read (macOS, Windows), so "auto" falls back to fp32."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def decode_split(split: Split, num_frames: int, size: int, cache_dir: str | Path | None = None,
                 log: Callable[[str], None] | None = None, workers: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, list[int], list[str]]:
    """Decode each distinct clip of a split once: `num_frames` frames by the uniform rule, resized and centre-cropped
    to `size`. Returns (clips uint8 [V, num_frames, size, size, 3], clip row of each kept pair, the kept pair
    indices, the video ids that could not be decoded). A video that cannot be decoded drops its pairs instead of
    stopping the fine-tune.

    With `cache_dir`, the clips go to an .npy file there and come back memory-mapped: a real train split does not fit
    in memory (MSRVTT-9k, 16 frames at 224 px: 22 GB), and the X-Pool fine-tune and later runs reuse the decode.
    The .json beside it, written last, marks the entry complete. `workers` > 0 decodes in that many processes (the
    same clips, in order)."""
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    ids = list(dict.fromkeys(p.video_id for p in split.pairs))
    paths = {p.video_id: p.video_path for p in split.pairs}
    npy = meta_path = None
    if cache_dir is not None:
        key = digest({"split": split.fingerprint, "dataset": split.dataset, "name": split.name, "frames": num_frames,
                      "size": size, "code": FINETUNE_VERSION})
        base = Path(cache_dir) / f"{split.dataset}-{split.name}-{num_frames}x{size}-{key}"
        npy, meta_path = base.with_suffix(".npy"), base.with_suffix(".json")
        if meta_path.is_file() and npy.is_file():
            try:
                meta = json.loads(meta_path.read_text())
                clips = np.load(npy, mmap_mode="r")
                if clips.shape == (len(ids), num_frames, size, size, 3):
                    return clips, np.asarray(meta["index"], dtype=np.int64), meta["kept"], meta["bad"]
            except (OSError, ValueError, KeyError):
                pass  # unreadable or stale: decode again
    shape = (len(ids), num_frames, size, size, 3)
    row = {vid: r for r, vid in enumerate(ids)}
    bad: set[str] = set()
    t0, step = time.time(), max(1, len(ids) // 10)
    # the .npy is written under a temporary name and renamed when complete (an error leaves nothing behind)
    with atomic_path(npy) if npy is not None else contextlib.nullcontext() as tmp:
        clips = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=shape) if tmp is not None \
            else np.zeros(shape, dtype=np.uint8)
        with _pool(workers) as pool:
            decoded = pool.map(_decode_clip, [(paths[vid], num_frames, size) for vid in ids], chunksize=4)
            for r, (vid, clip) in enumerate(zip(ids, decoded)):
                if clip is None:
                    bad.add(vid)  # its row stays unused
                else:
                    clips[r] = clip
                if log is not None and len(ids) >= 1000 and (r + 1) % step == 0:
                    log(f"decoding {split.dataset} {split.name}: {r + 1}/{len(ids)} videos "
                        f"({time.time() - t0:.0f}s)")
        if len(bad) == len(ids):
            raise ValueError(f"no video of the {split.dataset} {split.name} split could be decoded "
                             f"(first: {paths[ids[0]]})")
        if tmp is not None:
            clips.flush()
            del clips
    kept = [i for i, p in enumerate(split.pairs) if p.video_id not in bad]
    index = np.asarray([row[split.pairs[i].video_id] for i in kept], dtype=np.int64)
    if npy is not None:
        atomic_write_text(meta_path, json.dumps({"index": index.tolist(), "kept": kept, "bad": sorted(bad)}))
        clips = np.load(npy, mmap_mode="r")
    return clips, index, kept, sorted(bad)


def _decode_clip(job: tuple[str, int, int]) -> np.ndarray | None:
    """One video's `num_frames` uniform frames at `size` px, or None when it cannot be decoded."""
    path, num_frames, size = job
    try:
        return resize_center_crop(read_frames(path, num_frames), size)
    except VideoDecodeError:
        return None


class _InProcess:
    """The `map` of a process pool, in this process (workers = 0)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items, chunksize: int = 1):
        return map(fn, items)


def _pool(workers: int):
    if workers <= 0:
        return _InProcess()
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(workers)


def clip_loss(model: VideoTextModel, text: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE with CLIP's learnable logit scale (clamped at ln 100). Mean pooling averages L2-normalised
    frames as the X-Pool trainer does for the baseline; X-Pool pools raw features."""
    if not model.pooling.text_conditioned:
        frames = F.normalize(frames, dim=-1)
    sims = cosine_similarity(text, model.pool(text, frames))          # [Nt, Nv]
    scale = model.clip.logit_scale.clamp(max=math.log(100)).exp()
    logits = sims * scale
    target = torch.arange(len(text), device=logits.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2


def optimizer(model: VideoTextModel, config: FinetuneConfig, total_steps: int | None = None, dataset: str = ""):
    """AdamW and its per-step schedule. Quick recipe: one learning rate, no weight decay on gains, biases and the
    logit scale, linear warm-up over `config.warmup` of `config.steps` then cosine decay. Published recipes
    (finetune_config.RECIPES): CLIP's parameters at `clip_lr`, the rest (the pooling head) at the dataset's
    `head_lr`, weight decay except on parameters whose name holds a `no_decay` substring, and the recipe's schedule
    over `total_steps`."""
    recipe = config.published
    if recipe is None:
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            (no_decay if p.ndim < 2 or "ln" in name or "norm" in name or "logit_scale" in name else decay).append(p)
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
        warm = max(1, int(config.warmup * config.steps))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / config.steps))))
        return opt, sched
    groups: dict[tuple[str, bool], list] = {}
    for name, p in model.named_parameters():
        part = "clip" if name.startswith("clip.") else "head"
        groups.setdefault((part, not any(s in name for s in recipe.no_decay)), []).append(p)
    lrs = {"clip": recipe.clip_lr, "head": recipe.head_lr_for(dataset)}
    opt = torch.optim.AdamW([{"params": ps, "lr": lrs[part], "weight_decay": recipe.weight_decay if decay else 0.0}
                             for (part, decay), ps in sorted(groups.items())], betas=recipe.betas, eps=recipe.eps)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, schedule(recipe, int(total_steps or 1)))


def schedule(recipe, total: int) -> Callable[[int], float]:
    """The learning-rate factor at scheduler step s (0 for the first update) of a `total`-step run:
    "cosine" as transformers' get_cosine_schedule_with_warmup (X-Pool's modules/optimization.py): s / w during the
    w = int(warmup * total) warm-up steps, then 0.5 (1 + cos(pi (s - w) / (total - w)));
    "cosine_progress" as BertAdam's warmup_cosine (CLIP4Clip's modules/optimization.py), of the progress
    x = (s + 1) / total: x / warmup during warm-up, then 0.5 (1 + cos(pi x))."""
    if recipe.schedule == "cosine":
        warm = int(recipe.warmup * total)

        def factor(s: int) -> float:
            if s < warm:
                return s / max(1, warm)
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * (s - warm) / max(1, total - warm))))
    elif recipe.schedule == "cosine_progress":
        def factor(s: int) -> float:
            x = (s + 1) / total
            return x / recipe.warmup if x < recipe.warmup else 0.5 * (1.0 + math.cos(math.pi * x))
    else:
        raise ValueError(f"unknown schedule {recipe.schedule!r}")
    return factor


def crop_flip_params(rng: np.random.Generator, size: int, n: int, scale=(0.5, 1.0), ratio=(3 / 4, 4 / 3)
                     ) -> np.ndarray:
    """[n, 5] (top, left, height, width, flip) per clip: torchvision's RandomResizedCrop.get_params (10 tries of an
    area in `scale` and a log-uniform aspect ratio in `ratio`, else the centre crop) on a size x size frame, and a
    horizontal flip with probability 1/2, drawn from `rng` (X-Pool's clip_train transform, one draw per clip)."""
    out = np.empty((n, 5), np.int64)
    area = size * size
    log_ratio = np.log(ratio)
    for k in range(n):
        for _ in range(10):
            target = area * rng.uniform(*scale)
            aspect = math.exp(rng.uniform(*log_ratio))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= size and 0 < h <= size:
                top, left = int(rng.integers(0, size - h + 1)), int(rng.integers(0, size - w + 1))
                break
        else:
            h = w = size
            top = left = 0
        out[k] = (top, left, h, w, int(rng.random() < 0.5))
    return out


def apply_crop_flip(clips: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Each clip [F, S, S, 3] cropped to its (top, left, height, width), resized back to S x S (bilinear) and
    mirrored if `flip`: the same crop on every frame of a clip, as torchvision transforms a clip tensor."""
    import cv2

    size = clips.shape[2]
    out = np.empty_like(clips)
    for c, (top, left, h, w, flip) in enumerate(params):
        for f in range(clips.shape[1]):
            frame = cv2.resize(clips[c, f, top:top + h, left:left + w], (size, size), interpolation=cv2.INTER_LINEAR)
            if flip:   # OpenCV's mirror: the same pixels as frame[:, ::-1], whose copy took 3x the resize
                cv2.flip(frame, 1, dst=out[c, f])
            else:
                out[c, f] = frame
    return out


class TrainBatches(torch.utils.data.Dataset):
    """Batch assembly, indexed by a plan (rows, frame indices or None, crop/flip parameters or None) made in the main
    process: the clips of the rows' videos (at those frames), augmented, with the rows' tokens. A memory-mapped clip
    file is reopened in each worker instead of being copied into it."""

    def __init__(self, clips: np.ndarray, clip_of_pair: np.ndarray, tokens: torch.Tensor):
        self.clips, self.clip_of_pair, self.tokens = clips, clip_of_pair, tokens
        self._path = getattr(clips, "filename", None)

    def __getstate__(self):
        state = dict(self.__dict__)
        if self._path is not None:
            state["clips"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.clips is None:
            self.clips = np.load(self._path, mmap_mode="r")

    def __getitem__(self, plan) -> tuple[torch.Tensor, torch.Tensor]:
        rows, fidx, aug = plan
        idx = self.clip_of_pair[rows]
        clips = self.clips[idx] if fidx is None else self.clips[idx[:, None], fidx]   # [B, f, S, S, 3]
        if aug is not None:
            clips = apply_crop_flip(np.asarray(clips), aug)
        return self.tokens[rows], torch.from_numpy(np.ascontiguousarray(clips))


def train_loader(batches: TrainBatches, plans, workers: int, pin: bool, seed: int) -> torch.utils.data.DataLoader:
    """The batches of `plans`, in order, assembled by `workers` persistent processes (0: in this one), each up to 4
    batches ahead, into pinned memory with `pin` (for a GPU). benchmarks/finetune_feed.py measures whether they keep a
    GPU's steps fed."""
    return torch.utils.data.DataLoader(batches, batch_size=None, sampler=plans, num_workers=workers,
                                       persistent_workers=workers > 0, pin_memory=pin,
                                       prefetch_factor=4 if workers else None,
                                       generator=torch.Generator().manual_seed(seed))


def batch_plans(config: FinetuneConfig, groups: list[list[int]], n_pairs: int, n_frames: int, size: int,
                rng: np.random.Generator):
    """The plan of every step, in order (TrainBatches: what each batch holds), and the number of steps.
    Quick: `config.steps` batches of distinct videos, one random caption each, `frames_per_clip` random frames in
    order. Published recipes: every pair once per epoch in a fresh random order, batches of the recipe's size (the
    last of an epoch shorter, as a DataLoader without drop_last), all frames, crop/flip drawn per clip."""
    recipe = config.published
    if recipe is None:
        bs = min(config.batch_size, len(groups))

        def quick():
            order, pos = rng.permutation(len(groups)), 0
            for _ in range(config.steps):
                if pos + bs > len(order):
                    order, pos = rng.permutation(len(groups)), 0
                chosen = order[pos:pos + bs]
                pos += bs
                rows = np.array([groups[g][rng.integers(len(groups[g]))] for g in chosen])
                # random frames per clip, kept in temporal order (the trail cue encodes direction, order keeps it
                # honest)
                fidx = np.sort(np.stack([rng.choice(n_frames, config.frames_per_clip, replace=False)
                                         for _ in rows]), axis=1)
                yield rows, fidx, None

        return quick(), config.steps
    steps = config.step_count(n_pairs)

    def published():
        done = 0
        while done < steps:
            order = rng.permutation(n_pairs)
            for start in range(0, n_pairs, recipe.batch_size):
                rows = order[start:start + recipe.batch_size]
                aug = crop_flip_params(rng, size, len(rows)) if recipe.augment == "crop_flip" else None
                yield rows, None, aug
                done += 1
                if done == steps:
                    return

    return published(), steps


def own_loss(model: VideoTextModel) -> bool:
    """Whether the backbone brings its own features, score and loss (workloads/backbones/model.py: the backbone
    contract; HVP-Net, TCD) instead of a pooling head under the shared InfoNCE."""
    return type(model.pooling).finetune_loss is not PoolingHead.finetune_loss


def train_step(model: VideoTextModel, opt, sched, autocast, tokens: torch.Tensor, clips: torch.Tensor,
               side: dict | None = None) -> torch.Tensor:
    """One fine-tuning step on a batch of captions (tokens) and their clips ([B, f, S, S, 3] uint8); returns the
    loss. benchmarks/gpu_trial.py times this step at full size. `side`: the clips' side inputs (OCR windows) for a
    backbone that reads them."""
    if own_loss(model):
        return _step(model, opt, sched, lambda: _head_loss(model, autocast, tokens, clips, side))
    return _step(model, opt, sched, lambda: _infonce_loss(model, autocast, tokens, clips))


def _infonce_loss(model: VideoTextModel, autocast, tokens: torch.Tensor, clips: torch.Tensor) -> torch.Tensor:
    with autocast:
        text = model.encode_text(tokens)
        frames = model.encode_frames(model.preprocess_frames(clips))
        return clip_loss(model, text.float(), frames.float())


def _head_loss(model: VideoTextModel, autocast, tokens: torch.Tensor, clips: torch.Tensor,
               side: dict | None) -> torch.Tensor:
    with autocast:
        text = model.text_features(tokens)
        video = model.video_features(model.preprocess_frames(clips), side)
        return model.pooling.finetune_loss(model, text, video).float()


def _step(model: VideoTextModel, opt, sched, loss_fn) -> torch.Tensor:
    """The update of `train_step` for a loss from `loss_fn()`."""
    loss = loss_fn()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss


def side_inputs(model: VideoTextModel, split: Split, num_frames: int, cache_dir: str | Path | None
                ) -> dict[str, list] | None:
    """The side inputs of every pair of `split` (one entry per pair, in split order) for a backbone whose video side
    reads some (its OCR windows: workloads/ocr.py, one per frame of the `num_frames` the clips are decoded at by the
    uniform rule, so window i is read on the clip's frame i), else None (TCD with `ocr: false` reads none)."""
    if not model.video_inputs:
        return None
    if model.video_inputs != ("ocr",):
        raise ValueError(f"fine-tuning knows the side input 'ocr', not {model.video_inputs}")
    from workloads.ocr import get_engine, split_windows

    windows = split_windows(split, num_frames, get_engine(model.pooling.ocr_engine), cache_dir)
    return {"ocr": [windows[p.video_id] for p in split.pairs]}


def batch_side(side: dict[str, list] | None, plan) -> dict[str, list] | None:
    """The side inputs of one training batch (`plan`: its rows, frame indices or None, augmentation; `batch_plans`):
    each row's, and where the batch feeds the model a subset of each clip's frames (the quick recipe's
    `frames_per_clip` random frames, in order), the OCR windows of exactly those frames: window j of a clip in the
    batch is read on frame j the model sees (TCD's windows match the sampled frames; its cycle-consistency loss pairs
    frame j with window j)."""
    if side is None:
        return None
    rows, fidx, _ = plan
    out = {}
    for name, per_pair in side.items():
        clips = [per_pair[r] for r in rows]
        out[name] = clips if fidx is None else [[clip[f] for f in frames] for clip, frames in zip(clips, fidx)]
    return out


@torch.no_grad()
def _evaluate_scores(model: VideoTextModel, frames_uint8: np.ndarray, captions: list[str], rows: np.ndarray,
                     side: dict | None, chunk: int) -> torch.Tensor:
    """Scores [Nt, Nv] by the backbone's own score (caption i's clip is `frames_uint8[rows[i]]`, its side inputs
    side[k][i])."""
    text = Features.cat([model.text_features(model.tokenize(captions[i:i + chunk]))
                         for i in range(0, len(captions), chunk)])
    video = Features.cat([model.video_features(
        model.preprocess_frames(torch.from_numpy(np.asarray(frames_uint8[rows[i:i + chunk]]))),
        None if side is None else {k: v[i:i + chunk] for k, v in side.items()}) for i in range(0, len(rows), chunk)])
    return torch.cat([model.score(text.rows(slice(i, i + chunk)), video) for i in range(0, len(text), chunk)])


@torch.no_grad()
def evaluate(model: VideoTextModel, frames_uint8: np.ndarray, captions: list[str], rows: np.ndarray | None = None,
             chunk: int = 64, side: dict | None = None) -> dict:
    """Clean retrieval of a test split with one caption per video: R@1/5/10, MdR, MnR for v2t and t2v. Caption i
    belongs to clip `frames_uint8[rows[i]]` (rows None: to clip i); `side`: caption i's clip's side inputs at
    side[k][i], for a backbone that reads some."""
    from workloads.metrics import retrieval_metrics

    rows = np.arange(len(captions)) if rows is None else np.asarray(rows)
    model.eval()
    if own_loss(model) or model.video_inputs:
        sims = _evaluate_scores(model, frames_uint8, captions, rows, side, chunk)
        gt = np.arange(len(captions))
        out = {f"t2v_{k}": v for k, v in retrieval_metrics(sims, gt).items()}
        out.update({f"v2t_{k}": v for k, v in retrieval_metrics(sims.t(), gt).items()})
        return out
    text = torch.cat([model.encode_text(model.tokenize(captions[i:i + chunk])) for i in range(0, len(captions), chunk)])
    frames = torch.cat([model.encode_frames(model.preprocess_frames(torch.from_numpy(frames_uint8[rows[i:i + chunk]])))
                        for i in range(0, len(rows), chunk)])
    if not model.pooling.text_conditioned:
        frames = F.normalize(frames, dim=-1)
    sims = torch.cat([cosine_similarity(text[i:i + chunk], model.pool(text[i:i + chunk], frames))
                      for i in range(0, len(text), chunk)])           # [Nt, Nv]
    gt = np.arange(len(captions))
    out = {f"t2v_{k}": v for k, v in retrieval_metrics(sims, gt).items()}
    out.update({f"v2t_{k}": v for k, v in retrieval_metrics(sims.t(), gt).items()})
    return out


def finetune(config: FinetuneConfig, train: Split, test: Split, out_path: str | Path,
             init_path: str | None = None, log: Callable[[str], None] = print, device: str | None = None,
             frames_cache: str | Path | None = None) -> dict:
    """Train, evaluate on the clean test split, save the checkpoint to out_path; returns the record.
    `init_path`: open_clip weights or an mlvp checkpoint (of any pooling head: only its CLIP is taken) to start
    from; its identity must be in `config.init`. `device`: None = CUDA when this process sees a GPU (a Ray task
    given one), else the CPU; not part of the checkpoint key, recorded in the record. `frames_cache`: where the
    decoded train and test clips are kept (see decode_split); None decodes into memory."""
    if bool(init_path) != bool(config.init):
        raise ValueError("pass init_path exactly when config.init names the starting weights")
    recipe = config.published
    train_frames = recipe.frames if recipe is not None else config.train_frames
    if recipe is None and not 1 <= config.frames_per_clip <= config.train_frames:
        raise ValueError(f"frames_per_clip must be between 1 and train_frames ({config.train_frames}), got "
                         f"{config.frames_per_clip}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model = create_backbone(config.backbone, config.clip_model, pretrained=init_path, clip_only=True,
                            device=device, **config.pooling_kwargs)
    size = model.image_size
    t0 = time.time()
    train_clips, clip_of_pair, train_kept, train_bad = decode_split(train, train_frames, size, frames_cache, log,
                                                                    workers=config.workers)  # [V, F, S, S, 3]
    tokens = model.tokenize([train.pairs[i].caption for i in train_kept])
    test_frames, test_index, test_kept, test_bad = decode_split(test, config.eval_frames, size, frames_cache, log,
                                                                workers=config.workers)
    if len(set(test_index.tolist())) != len(test_index):
        raise ValueError(f"test split {test.dataset} repeats videos; evaluation expects one caption per video")
    # an OCR backbone's windows, one per decoded frame: the train clips' at their `train_frames` (each batch takes the
    # windows of the frames it feeds the model: batch_side), the test clips' at the evaluation's frames
    train_side = side_inputs(model, train, train_frames, frames_cache)
    test_side = side_inputs(model, test, config.eval_frames, frames_cache)
    if train_side is not None:
        train_side = {k: [v[i] for i in train_kept] for k, v in train_side.items()}
        test_side = {k: [v[i] for i in test_kept] for k, v in test_side.items()}
    log(f"decoded {len(train_clips)} train / {len(test_frames)} test clips at {size}px in {time.time() - t0:.1f}s"
        + (f" (cached in {frames_cache})" if frames_cache else "")
        + (f"; skipped undecodable videos: {len(train_bad)} train, {len(test_bad)} test "
           f"(first: {(train_bad + test_bad)[0]})" if train_bad or test_bad else ""))

    # videos may carry several captions: the quick recipe samples one caption per distinct video per batch (no false
    # negatives); the published trainers draw (video, caption) pairs
    by_video: dict[str, list[int]] = {}
    for row, i in enumerate(train_kept):  # rows index the kept pairs (tokens, clip_of_pair)
        by_video.setdefault(train.pairs[i].video_id, []).append(row)
    plans, steps = batch_plans(config, list(by_video.values()), len(train_kept), train_clips.shape[1], size, rng)
    if train_side is not None:  # a backbone's side inputs follow each batch's rows (the first item of its plan)
        plans = list(plans)

    opt, sched = optimizer(model, config, total_steps=steps, dataset=train.dataset)
    params = sum(p.numel() for p in model.parameters())
    precision = resolve_precision(config.precision, device, params)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    threads = f" ({torch.get_num_threads()} threads)" if device.type == "cpu" else ""
    log(f"training {config.backbone} ({config.recipe} recipe, {steps} steps) on {device}{threads} in {precision}"
        + (f" (precision auto: {_auto_reason(precision, device, params)})"
           if config.precision == "auto" else "")
        + (f", batches assembled by {config.workers} worker processes" if config.workers else ""))
    # a generator of its own: the loader's seed draw must not move torch's global stream (dropout in the X-Pool
    # head), so that a run is the same with and without workers and the quick recipe the same as before them
    loader = train_loader(TrainBatches(train_clips, clip_of_pair, tokens), plans, config.workers,
                          pin=device.type == "cuda", seed=config.seed)
    model.train()
    t0 = time.time()
    for step, (batch_tokens, clips) in enumerate(loader):
        side = None if train_side is None else batch_side(train_side, plans[step])
        loss = train_step(model, opt, sched, autocast, batch_tokens, clips, side)
        if step % max(1, steps // 10) == 0 or step == steps - 1:
            log(f"step {step + 1}/{steps} loss {loss.item():.3f} ({time.time() - t0:.0f}s)")
    train_seconds = time.time() - t0
    metrics = evaluate(model, test_frames, [test.pairs[i].caption for i in test_kept], test_index, side=test_side)
    record = {"config": asdict(config), "steps": steps, "train_fingerprint": train.fingerprint, "test_fingerprint":
              test.fingerprint, "train_seconds": train_seconds, "metrics": metrics, "code_version": CODE_VERSION,
              "device": str(device), "precision": precision, "skipped_videos": {"train": train_bad, "test": test_bad},
              # a CPU's thread count changes the rounding of its reductions, so the weights (not the checkpoint key)
              "threads": torch.get_num_threads() if device.type == "cpu" else None}
    save_backbone(model, out_path, record=json.dumps(record))
    log(f"clean test R@1 v2t {metrics['v2t_R1']:.1f} / t2v {metrics['t2v_R1']:.1f} after {train_seconds:.0f}s")
    return record


def ensure_finetuned(config: FinetuneConfig, train: Split, test: Split, cache_dir: str | Path, data_version: str,
                     init_path: str | None = None, log: Callable[[str], None] = print,
                     device: str | None = None) -> tuple[Path, dict]:
    """Return (checkpoint path, record), training only when no checkpoint with the same content key exists."""
    path = checkpoint_path(config, train.dataset, data_version, cache_dir)
    if path.is_file():
        try:
            record = json.loads(load_checkpoint(str(path))["record"])
            log(f"reusing fine-tuned {config.backbone} checkpoint {path.name}")
            return path, record
        except Exception as err:  # unreadable: retrain rather than fail
            log(f"cached checkpoint {path} unreadable ({err}); retraining")
            os.unlink(path)
    return path, finetune(config, train, test, path, init_path=init_path, log=log, device=device,
                          frames_cache=Path(cache_dir) / "frames")
