"""The 12 MLVP video perturbations x 5 severities (docs/faithfulness.md: Video perturbations).

    apply(name, video, severity, seed=0, num_frames=12, **assets) -> uint8 [num_frames, H, W, 3]
    render(...)      -> Rendered(frames, meta)      (meta["faithful"] says whether real assets were used)
    render_many(video, requests, num_frames=12, **assets) -> list[Rendered]   (shares decode/flow across requests)
    iter_render(video, requests, ...) -> Rendered, one at a time     (what render_many collects; the render stage
                                                                       writes each as it comes)

`video` is every decoded frame of the source clip, uint8 RGB [N, H, W, 3], or a SparseVideo holding the frames the
requests read (`read_for(path, requests)` decodes just those; each type declares them at registration).
Frame-level types perturb the frames the uniform rule picks; motion blur and defocus read each sampled frame and the
one before it, occlusion its neighbours, event insertion and scrambling their own draws, and H.264 streams every
frame once from the file (docs/faithfulness.md: Common pipeline). So rendering a clip holds a few frames, not the
clip: iter_render drops each type's shared work (ClipContext.memo) once its last request is rendered.
The same (video, name, severity, seed) always gives identical bytes.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from workloads.perturbations.video._registry import (  # noqa: F401
    LEVELS,
    VIDEO_PERTURBATIONS,
    AssetNeeds,
    ClipContext,
    PerturbationInfo,
    all_frames,
    check_severity,
    frames_needed,
    get,
    stream_frames,
)


@dataclass
class Rendered:
    name: str
    severity: int
    frames: np.ndarray | None          # None only when render_many(errors="return") caught an error
    meta: dict[str, Any]
    error: str | None = None


def __getattr__(name: str):
    if name == "NAMES":  # the registry's ordered view (the columns of the paper's tables)
        return VIDEO_PERTURBATIONS.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_for(path, requests: Iterable[tuple[str, int, int]], num_frames: int = 12, stats: dict | None = None,
             sample: bool = True):
    """Decode from the video file at `path` only the frames the (name, severity, seed) requests read (and the
    uniform sample): a SparseVideo with read_video's pixels at those indices (workloads/video_io.py), which also
    streams every frame from the file when a request streams (H.264), or the whole array when a request reads
    every frame at once (`all_frames`; no registered type does) or decord cannot open the file. A motion blur of a
    300-frame clip then decodes 24 frames' worth (skipping non-reference frames it does not read) instead of
    converting all 300. `sample`: also decode the uniform sample (clean clips need it; requests that only stream,
    as an H.264 render alone, then decode nothing up front). `stats` as read_video_frames fills it."""
    from workloads.video_io import read_video, read_video_frames

    requests = [(n, check_severity(s), int(seed)) for n, s, seed in requests]
    if any(get(n).frames is all_frames for n, _, _ in requests):
        if stats is not None:
            stats.update(sparse=False, fps=None)
        return read_video(path)
    return read_video_frames(path, lambda n: frames_needed(requests, n, num_frames, sample=sample), stats,
                             stream=any(get(n).streams for n, _, _ in requests))


def render(name: str, video: np.ndarray, severity: int, seed: int = 0, num_frames: int = 12,
           **assets: Any) -> Rendered:
    return render_many(video, [(name, severity, seed)], num_frames=num_frames, **assets)[0]


def apply(name: str, video: np.ndarray, severity: int, seed: int = 0, num_frames: int = 12,
          **assets: Any) -> np.ndarray:
    return render(name, video, severity, seed=seed, num_frames=num_frames, **assets).frames


def render_many(video: np.ndarray, requests: Iterable[tuple[str, int, int]], num_frames: int = 12,
                errors: str = "raise", clip_seed: int | None = None, **assets: Any) -> list[Rendered]:
    """Render several (name, severity, seed) requests of one video, sharing the per-video work: iter_render's
    renderings as a list."""
    return list(iter_render(video, requests, num_frames=num_frames, errors=errors, clip_seed=clip_seed, **assets))


def iter_render(video: np.ndarray, requests: Iterable[tuple[str, int, int]], num_frames: int = 12,
                errors: str = "raise", clip_seed: int | None = None, context: ClipContext | None = None,
                **assets: Any):
    """Yield the Rendered of each (name, severity, seed) request in order, from one ClipContext (the per-video work
    is shared); each type's memo entries are dropped after its last request, before that rendering is yielded.
    errors="return": a request that fails comes back with `error` set and no frames, the others still render
    (the render cache uses this so one bad perturbation fails one clip, not its siblings).
    clip_seed: seeds choices made once per clip and type (the style image), shared across severities.
    context: render in this ClipContext (of `video`; the caller sees its memo) instead of a new one."""
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
    requests = [(n, check_severity(s), int(seed)) for n, s, seed in requests]
    infos = [get(n) for n, _, _ in requests]  # validate every name before any work
    if context is None:
        ctx = ClipContext(video, num_frames=num_frames, assets=assets, clip_seed=clip_seed, requests=requests)
    else:
        ctx, ctx.requests = context, requests
    left = Counter(n for n, _, _ in requests)
    for info, (name, severity, seed) in zip(infos, requests):
        ctx.current = name
        try:
            out = _render_one(ctx, info, name, severity, seed)
        except Exception as err:
            if errors == "raise":
                raise
            out = Rendered(name, severity, None, {}, error=f"{type(err).__name__}: {err}")
        finally:
            ctx.current = None
            left[name] -= 1
            if left[name] == 0:
                ctx.release(n for n, c in left.items() if c > 0)
        yield out
        del out  # not held while the next one renders


def _render_one(ctx: ClipContext, info, name: str, severity: int, seed: int) -> Rendered:
    frames, meta = info.fn(ctx, severity, np.random.default_rng(seed))
    frames = np.ascontiguousarray(frames)
    expected = (ctx.num_frames, *ctx.video.shape[1:])
    if frames.dtype != np.uint8 or frames.shape != expected:
        raise AssertionError(f"{name} returned {frames.dtype} {frames.shape}, expected uint8 {expected}")
    if "faithful" not in meta:
        raise AssertionError(f"{name} did not say whether it is faithful")
    return Rendered(name, severity, frames, dict(meta))


__all__ = ["NAMES", "VIDEO_PERTURBATIONS", "LEVELS", "Rendered", "apply", "render", "render_many", "iter_render",
           "read_for", "ClipContext"]
