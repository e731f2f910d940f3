"""Source fine-tuning: train a retrieval model on a dataset's clean train split (symmetric InfoNCE, as the X-Pool
trainer; docs/faithfulness.md: Backbones and checkpoints), evaluate clean test retrieval, and cache the checkpoint by a
content hash of everything that
determines it (config, data fingerprint, init weights, code version).

This is how the embedded default gets a model without downloading one: `mlvp-tiny` trained for a few minutes on the
synthetic train split. The same code fine-tunes any open_clip model on any registered dataset.
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


def resolve_precision(precision: str, device: torch.device) -> str:
    """"auto" -> "bf16" on a GPU with bf16 and on CPUs whose oneDNN has native bf16 (AVX-512 BF16, AMX, Arm bf16),
    else "fp32": on a CPU without it, bf16 autocast is emulated and ran ~10x slower than fp32 (measured: 6.5 s vs 0.6 s
    per mlvp-tiny step on an AVX2-only machine). The key keeps "auto"; the record keeps what it resolved to."""
    if precision not in ("fp32", "bf16", "auto"):
        raise ValueError(f"precision must be 'fp32', 'bf16' or 'auto', got {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"


def decode_split(split: Split, num_frames: int, size: int, cache_dir: str | Path | None = None,
                 log: Callable[[str], None] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, list[int], list[str]]:
    """Decode each distinct clip of a split once: `num_frames` frames by the uniform rule, resized and centre-cropped
    to `size`. Returns (clips uint8 [V, num_frames, size, size, 3], clip row of each kept pair, the kept pair
    indices, the video ids that could not be decoded). A video that cannot be decoded drops its pairs instead of
    stopping the fine-tune.

    With `cache_dir`, the clips go to an .npy file there and come back memory-mapped: a real train split does not fit
    in memory (MSRVTT-9k, 16 frames at 224 px: 22 GB), and the X-Pool fine-tune and later runs reuse the decode.
    The .json beside it, written last, marks the entry complete."""
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
        for r, vid in enumerate(ids):
            try:
                clips[r] = resize_center_crop(read_frames(paths[vid], num_frames), size)
            except VideoDecodeError:
                bad.add(vid)  # its row stays unused
            if log is not None and len(ids) >= 1000 and (r + 1) % step == 0:
                log(f"decoding {split.dataset} {split.name}: {r + 1}/{len(ids)} videos ({time.time() - t0:.0f}s)")
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


def optimizer(model: VideoTextModel, config: FinetuneConfig):
    """AdamW (no weight decay on gains, biases and the logit scale) and its schedule: linear warm-up over
    `config.warmup` of the steps, then cosine decay."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "ln" in name or "norm" in name or "logit_scale" in name else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
    warm = max(1, int(config.warmup * config.steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / config.steps))))
    return opt, sched


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
    with autocast:
        text = model.encode_text(tokens)
        frames = model.encode_frames(model.preprocess_frames(clips))
        loss = clip_loss(model, text.float(), frames.float())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss


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
    reads some (its OCR windows: workloads/ocr.py), else None."""
    if not model.video_inputs:
        return None
    if model.video_inputs != ("ocr",):
        raise ValueError(f"fine-tuning knows the side input 'ocr', not {model.video_inputs}")
    from workloads.ocr import get_engine, split_windows

    windows = split_windows(split, num_frames, get_engine(model.pooling.ocr_engine), cache_dir)
    return {"ocr": [windows[p.video_id] for p in split.pairs]}


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
    if not 1 <= config.frames_per_clip <= config.train_frames:
        raise ValueError(f"frames_per_clip must be between 1 and train_frames ({config.train_frames}), got "
                         f"{config.frames_per_clip}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model = create_backbone(config.backbone, config.clip_model, pretrained=init_path, clip_only=True,
                            device=device, **config.pooling_kwargs)
    size = model.image_size
    t0 = time.time()
    train_clips, clip_of_pair, train_kept, train_bad = decode_split(train, config.train_frames, size, frames_cache,
                                                                    log)   # [V, F, S, S, 3] uint8
    tokens = model.tokenize([train.pairs[i].caption for i in train_kept])
    test_frames, test_index, test_kept, test_bad = decode_split(test, config.eval_frames, size, frames_cache, log)
    if len(set(test_index.tolist())) != len(test_index):
        raise ValueError(f"test split {test.dataset} repeats videos; evaluation expects one caption per video")
    train_side = side_inputs(model, train, config.eval_frames, frames_cache)   # OCR windows of an OCR backbone
    test_side = side_inputs(model, test, config.eval_frames, frames_cache)
    if train_side is not None:
        train_side = {k: [v[i] for i in train_kept] for k, v in train_side.items()}
        test_side = {k: [v[i] for i in test_kept] for k, v in test_side.items()}
    log(f"decoded {len(train_clips)} train / {len(test_frames)} test clips at {size}px in {time.time() - t0:.1f}s"
        + (f" (cached in {frames_cache})" if frames_cache else "")
        + (f"; skipped undecodable videos: {len(train_bad)} train, {len(test_bad)} test "
           f"(first: {(train_bad + test_bad)[0]})" if train_bad or test_bad else ""))

    # videos may carry several captions: sample one caption per distinct video per batch (no false negatives)
    by_video: dict[str, list[int]] = {}
    for row, i in enumerate(train_kept):  # rows index the kept pairs (tokens, clip_of_pair)
        by_video.setdefault(train.pairs[i].video_id, []).append(row)
    groups = list(by_video.values())
    bs = min(config.batch_size, len(groups))

    opt, sched = optimizer(model, config)
    precision = resolve_precision(config.precision, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    log(f"training {config.backbone} on {device} in {precision}"
        + (f" (precision auto: {'native bf16' if precision == 'bf16' else 'no native bf16 here'})"
           if config.precision == "auto" else ""))
    n_frames_total = train_clips.shape[1]
    model.train()
    t0, order, pos = time.time(), rng.permutation(len(groups)), 0
    for step in range(config.steps):
        if pos + bs > len(order):
            order, pos = rng.permutation(len(groups)), 0
        chosen = order[pos:pos + bs]
        pos += bs
        rows = np.array([groups[g][rng.integers(len(groups[g]))] for g in chosen])
        # random frames per clip, kept in temporal order (the trail cue encodes direction, order keeps it honest)
        fidx = np.sort(np.stack([rng.choice(n_frames_total, config.frames_per_clip, replace=False)
                                 for _ in rows]), axis=1)
        clips = torch.from_numpy(train_clips[clip_of_pair[rows][:, None], fidx])   # [B, f, S, S, 3]
        loss = train_step(model, opt, sched, autocast, tokens[rows], clips,
                          None if train_side is None else {k: [v[r] for r in rows] for k, v in train_side.items()})
        if step % max(1, config.steps // 10) == 0 or step == config.steps - 1:
            log(f"step {step + 1}/{config.steps} loss {loss.item():.3f} ({time.time() - t0:.0f}s)")
    train_seconds = time.time() - t0
    metrics = evaluate(model, test_frames, [test.pairs[i].caption for i in test_kept], test_index, side=test_side)
    record = {"config": asdict(config), "train_fingerprint": train.fingerprint, "test_fingerprint":
              test.fingerprint, "train_seconds": train_seconds, "metrics": metrics, "code_version": CODE_VERSION,
              "device": str(device), "precision": precision, "skipped_videos": {"train": train_bad, "test": test_bad}}
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
