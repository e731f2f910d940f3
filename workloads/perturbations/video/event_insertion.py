"""Event insertion (docs/faithfulness.md: Event insertion): the TAIL of the clip is replaced by frames of a distractor
video.

ratio = {1: 0.30, 2: 0.40, 3: 0.50, 4: 0.60, 5: 0.70}; k_insert = max(1, min(T-1, round(T*ratio))) with Python's
round, as the reference (4, 5, 6, 7, 8 for T = 12); keep_n = T - k_insert. Output = the first keep_n of the query's
T uniform frames, then k_insert uniform frames of the distractor (uniform rule with last-frame repetition), bilinearly
resized to the query's H x W (torch interpolate, align_corners=False, no antialias, rounded to uint8).

Distractor, first applicable source wins (meta["distractor"]["mode"]):
 (a) "given":     asset `event_distractor` = a video path or uint8 [N, H, W, 3] already chosen by the caller (the
                  orchestrator retrieves it with the run's CLIP); optional `event_distractor_source` (any string,
                  recorded) and `event_distractor_faithful` (bool, default False).
 (b) "retrieved": asset `distractor_pool` (folder searched recursively for .mp4/.avi, sorted; or a list of paths)
                  + `distractor_embeddings` ([N_pool, D] array or .npy path, rows in pool order) + `caption_embedding`
                  ([D] or [1, D] array or .npy path) -> argmax of the raw dot product (no normalisation, as the
                  reference), excluding asset `video_path` (the query itself) when given.
                  faithful = `event_distractor_faithful` (default False).
 (c) "random":    `distractor_pool` alone -> a seeded uniform pick (excluding `video_path`); never faithful.
 (d) "builtin":   nothing given -> a procedurally generated clip of moving shapes (deterministic from the rng);
                  never faithful.

Faithfulness. The reference distractor is the argmax over a 2K-video MSRVTT-train pool of zero-shot CLIP ViT-B/32
video embeddings (mean of unnormalised frame embeddings) against the unnormalised text embedding of the Qwen2.5-VL
caption. The code cannot see which pool, caption or CLIP produced the inputs of (a) and (b), so those are flagged
faithful ONLY when the caller passes `event_distractor_faithful=True` (meaning: reference pool + VLM caption +
zero-shot CLIP); otherwise meta["fallback"] says what to check. (c) and (d) are always proxies.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import cv2
import numpy as np

from workloads.distractor_pool import choose_distractor, list_pool, pool_paths
from workloads.perturbations.video._registry import AssetNeeds, ClipContext, register, sampled_frames
from workloads.seeding import digest, file_digest, path_version
from workloads.video_io import read_frames, uniform_indices

RATIOS = {1: 0.30, 2: 0.40, 3: 0.50, 4: 0.60, 5: 0.70}


def insert_counts(num_frames: int, severity: int) -> tuple[int, int]:
    """(keep_n, k_insert) for a clip of `num_frames`."""
    k = max(1, min(num_frames - 1, int(round(num_frames * RATIOS[severity]))))
    return num_frames - k, k


def _load_array(value, asset: str) -> np.ndarray:
    if isinstance(value, (str, os.PathLike)):
        if not Path(value).is_file():
            raise FileNotFoundError(f"{asset} file not found: {value}")
        try:
            return np.load(value, allow_pickle=False)
        except Exception as err:
            raise ValueError(f"cannot load {asset} from {value}: {type(err).__name__}: {err}") from err
    return np.asarray(value)


def _exclusions(paths: list[str], video_path) -> list[int]:
    if video_path is None:
        return []
    target = os.path.realpath(str(video_path))
    return [i for i, p in enumerate(paths) if os.path.realpath(p) == target]


# ----------------------------------------------------------------------------------------------- frames

def _uniform_from_array(video: np.ndarray, k: int) -> np.ndarray:
    video = np.asarray(video)
    if video.dtype != np.uint8 or video.ndim != 4 or video.shape[-1] != 3 or len(video) == 0:
        raise ValueError(f"event_distractor array must be uint8 [N, H, W, 3], got {video.dtype} {video.shape}")
    return video[uniform_indices(len(video), k)]


def _read_distractor(path: str, k: int, asset: str) -> np.ndarray:
    if not Path(path).is_file():
        raise FileNotFoundError(f"distractor video not found ({asset}): {path}")
    return read_frames(path, k)


def resize_bilinear(frames: np.ndarray, h: int, w: int) -> np.ndarray:
    """uint8 [N, h0, w0, 3] -> uint8 [N, h, w, 3], torch bilinear (align_corners=False), rounded."""
    frames = np.asarray(frames)
    if frames.shape[1:3] == (h, w):
        return frames
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255.0
    y = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False).clamp_(0.0, 1.0)
    return np.rint(y.permute(0, 2, 3, 1).numpy() * 255.0).astype(np.uint8)


def builtin_distractor(k: int, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """A procedural k-frame clip at h x w: a two-colour gradient background and 2-4 shapes moving in straight
    lines (a different "event"), fully determined by `rng`."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0, c1 = rng.integers(0, 256, 3).astype(np.float32), rng.integers(0, 256, 3).astype(np.float32)
    ang = rng.uniform(0, 2 * np.pi)
    t = (xx * np.cos(ang) + yy * np.sin(ang))
    t = (t - t.min()) / max(1e-6, float(t.max() - t.min()))
    bg = (c0 * (1 - t[..., None]) + c1 * t[..., None]).astype(np.uint8)
    shapes = []
    for _ in range(int(rng.integers(2, 5))):
        shapes.append({
            "kind": int(rng.integers(0, 3)),
            "colour": tuple(int(v) for v in rng.integers(0, 256, 3)),
            "size": float(rng.uniform(0.08, 0.22)) * min(h, w),
            "start": rng.uniform(0.15, 0.85, 2) * (w, h),
            "velocity": rng.uniform(-0.6, 0.6, 2) * (w, h) / max(1, k),
        })
    out = np.empty((k, h, w, 3), np.uint8)
    for i in range(k):
        frame = bg.copy()
        for s in shapes:
            cx, cy = s["start"] + s["velocity"] * i
            r = max(1, int(s["size"]))
            if s["kind"] == 0:
                cv2.circle(frame, (int(cx), int(cy)), r, s["colour"], -1, cv2.LINE_AA)
            elif s["kind"] == 1:
                cv2.rectangle(frame, (int(cx - r), int(cy - r)), (int(cx + r), int(cy + r)), s["colour"], -1)
            else:
                pts = np.array([[cx, cy - r], [cx - r, cy + r], [cx + r, cy + r]], np.int32)
                cv2.fillPoly(frame, [pts], s["colour"], cv2.LINE_AA)
        out[i] = frame
    return out


# ----------------------------------------------------------------------------------------------- the perturbation

def _distractor_frames(ctx: ClipContext, k: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
    a = ctx.assets
    h, w = ctx.video.shape[1:3]
    declared = bool(a.get("event_distractor_faithful", False))
    given = a.get("event_distractor")
    if given is not None:
        info: dict[str, Any] = {"mode": "given", "source": str(a.get("event_distractor_source", "caller"))}
        if isinstance(given, (str, os.PathLike)):
            frames = _read_distractor(str(given), k, "asset event_distractor")
            info["path"] = str(given)
        else:
            frames = _uniform_from_array(given, k)
        return frames, {**info, "faithful": declared}
    pool = a.get("distractor_pool")
    if pool is not None:
        paths = pool_paths(pool)
        excluded = _exclusions(paths, a.get("video_path"))
        emb, cap = a.get("distractor_embeddings"), a.get("caption_embedding")
        if (emb is None) != (cap is None):
            raise ValueError("retrieval needs both distractor_embeddings and caption_embedding "
                             f"(got distractor_embeddings={'set' if emb is not None else None}, "
                             f"caption_embedding={'set' if cap is not None else None})")
        if emb is not None:
            emb_arr = _load_array(emb, "distractor_embeddings")
            if emb_arr.ndim != 2 or len(emb_arr) != len(paths):
                raise ValueError(f"distractor_embeddings has shape {emb_arr.shape}, expected [{len(paths)}, D] "
                                 f"(one row per pool video, in sorted pool order)")
            idx = choose_distractor(_load_array(cap, "caption_embedding"), emb_arr, excluded)
            info = {"mode": "retrieved", "index": idx, "path": paths[idx], "pool_size": len(paths),
                    "faithful": declared}
        else:
            skip = set(excluded)
            allowed = [i for i in range(len(paths)) if i not in skip]
            if not allowed:
                raise ValueError("the distractor pool holds only the query video itself")
            idx = allowed[int(rng.integers(len(allowed)))]
            info = {"mode": "random", "index": idx, "path": paths[idx], "pool_size": len(paths), "faithful": False}
        if "event_distractor_source" in a:
            info["source"] = str(a["event_distractor_source"])
        return _read_distractor(paths[idx], k, "asset distractor_pool"), info
    return builtin_distractor(k, h, w, rng), {"mode": "builtin", "faithful": False}


_FALLBACKS = {
    "given": "caller-chosen distractor not declared the reference's (pass event_distractor_faithful=True only for "
             "an MSRVTT-train pool + VLM caption + zero-shot CLIP choice)",
    "retrieved": "argmax retrieval over caller-supplied pool/embeddings not declared the reference's "
                 "(MSRVTT-train pool, VLM caption, zero-shot CLIP ViT-B/32); pass event_distractor_faithful=True",
    "random": "distractor_pool without embeddings: seeded random pool video instead of caption-similar retrieval",
    "builtin": "no distractor assets: procedurally generated clip of moving shapes instead of a retrieved "
               "MSRVTT-train video",
}


def _assets_version(paths: Mapping[str, str | None], context: Mapping[str, str]) -> str:
    pool, boxes = paths.get("distractor_pool"), paths.get("main_objects")
    return "distractors:" + digest([path_version(pool) if pool else f"train:{context['data']}",
                                    file_digest(boxes) if boxes else "query-video", context["embedder"]])


def _prepare(*args, **kwargs) -> dict[str, dict[str, Any]]:
    from workloads.distractors import prepare_distractors  # torch and the backbones load only when needed

    return prepare_distractors(*args, **kwargs)


@register("event_insertion", order=10, level="high", full_video=True, frames=sampled_frames,
          assets=AssetNeeds(("distractor_pool", "main_objects"), _assets_version, prepare=_prepare))
def event_insertion(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """Replace the last 30..70% of the uniform frames with a distractor video's uniform frames."""
    t = ctx.num_frames
    h, w = ctx.video.shape[1:3]
    keep_n, k = insert_counts(t, severity)
    frames, info = _distractor_frames(ctx, k, rng)
    frames = resize_bilinear(frames[:k], h, w)
    fused = np.concatenate([ctx.sampled[:keep_n], frames], axis=0)
    if len(fused) < t:  # the reference pads with the last frame
        fused = np.concatenate([fused, np.repeat(fused[-1:], t - len(fused), axis=0)], axis=0)
    faithful = bool(info.pop("faithful"))
    meta: dict[str, Any] = {"ratio": RATIOS[severity], "keep_n": keep_n, "k_insert": k, "distractor": info,
                            "faithful": faithful}
    if not faithful:
        meta["fallback"] = _FALLBACKS[info["mode"]]
    return np.ascontiguousarray(fused[:t]), meta


__all__ = ["RATIOS", "event_insertion", "insert_counts", "choose_distractor", "list_pool", "builtin_distractor",
           "resize_bilinear"]
