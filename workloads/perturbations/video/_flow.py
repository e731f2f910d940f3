"""Motion statistics shared by motion_blur and video_defocus, memoised per clip (docs/faithfulness.md: Motion blur
and video defocus).

For every uniformly sampled index k: dense Farneback flow between the ORIGINAL frames k-1 and k on full-resolution
grayscale (pyr_scale 0.5, levels 3, winsize 15, iterations 3, poly_n 5, poly_sigma 1.2; zero flow for k = 0), then
- the high-motion mask: flow magnitude >= its 75th percentile (all True for zero flow, since thr = 0);
- the global direction: degrees(atan2(mean flow_y, mean flow_x + 1e-8)) (0 for zero flow).
Flow is computed once per clip and shared by both types and all severities through ctx.memo.
"""
from __future__ import annotations

import math

import cv2
import numpy as np

from workloads.perturbations.video._blur import FrameFilter
from workloads.perturbations.video._registry import ClipContext

# the types reading this module's memo entries: they stay until the last request of either is rendered
USERS = ("motion_blur", "video_defocus")
FARNEBACK = dict(pyr_scale=0.5, levels=3, winsize=15, iterations=3, poly_n=5, poly_sigma=1.2, flags=0)


def _gray(ctx: ClipContext, k: int) -> np.ndarray:
    # RGB2GRAY on RGB == the reference's BGR2GRAY on BGR (same weights on the same channels)
    return ctx.memo(("_flow.gray", k), lambda: cv2.cvtColor(ctx.video[k], cv2.COLOR_RGB2GRAY), users=USERS)


def _motion(ctx: ClipContext, k: int) -> tuple[np.ndarray, float]:
    h, w = ctx.video.shape[1:3]
    if k == 0:
        flow = np.zeros((h, w, 2), np.float32)
    else:
        flow = cv2.calcOpticalFlowFarneback(_gray(ctx, k - 1), _gray(ctx, k), None, **FARNEBACK)
    fx, fy = flow[..., 0], flow[..., 1]
    # np.linalg.norm(flow, axis=-1) to the bit (the same float32 products, one addition, sqrt) at a third of
    # its cost: its reduction over a last axis of 2 is slow
    mag = np.sqrt(fx * fx + fy * fy)
    thr = np.percentile(mag, 75)
    mean = flow.reshape(-1, 2).mean(axis=0)  # float32, as the reference
    angle = math.degrees(math.atan2(float(mean[1]), float(mean[0] + np.float32(1e-8))))
    return mag >= thr, angle


def motion_stats(ctx: ClipContext) -> tuple[np.ndarray, list[float]]:
    """(high-motion masks bool [T, H, W], global angles in degrees [T]) for the sampled indices."""

    def compute():
        per_index = {int(k): _motion(ctx, int(k)) for k in np.unique(ctx.indices)}
        masks = np.stack([per_index[int(k)][0] for k in ctx.indices])
        return masks, [per_index[int(k)][1] for k in ctx.indices]

    return ctx.memo("_flow.motion_stats", compute, users=USERS)


def frame_filter(ctx: ClipContext) -> FrameFilter:
    """A FrameFilter over the sampled frames, shared (with its padded copy and results) by both blur types."""
    return ctx.memo("_flow.frame_filter", lambda: FrameFilter(ctx.sampled), users=USERS)
