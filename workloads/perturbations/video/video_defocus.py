"""Video defocus, motion-adaptive (docs/faithfulness.md: Motion blur and video defocus).

Same flow machinery as motion_blur (shared per clip): a disk kernel of radius r = [3,4,6,8,10] (normalised, then
Gaussian-smoothed with sigma 0.1) blurs the frame, and a disk of radius 2r replaces it where the flow magnitude is
>= its 75th percentile. Frame 0 has zero flow, so the large disk is used everywhere. The disks are filtered by
_blur.FrameFilter.disk: cv2.filter2D's result, summed by strips of box filters from radius 6 on.
"""
from __future__ import annotations

import numpy as np

from workloads.perturbations.video._flow import frame_filter, motion_stats
from workloads.perturbations.video._registry import ClipContext, flow_frames, register

RADII = (3, 4, 6, 8, 10)


@register("video_defocus", order=7, level="mid", full_video=True, frames=flow_frames)
def video_defocus(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """Motion-adaptive disk defocus (radius r, 2r in high-motion pixels) from Farneback flow
    (docs/faithfulness.md: Motion blur and video defocus)."""
    radius = RADII[severity - 1]
    masks, _ = motion_stats(ctx)
    filt = frame_filter(ctx)
    # keyed by radius: radii recur across severities (6 and 8 px)
    small = filt.disk(radius, key=("video_defocus.disk", radius))
    large = filt.disk(2 * radius, key=("video_defocus.disk", 2 * radius))
    frames = np.where(masks[..., None], large, small)
    meta = {
        "faithful": True,
        "radius": radius,
        "large_radius": 2 * radius,
        "filter_paths": [filt.paths[("video_defocus.disk", r)] for r in (radius, 2 * radius)],
        "high_motion_fraction": round(float(masks.mean()), 4),
        "frame_indices": [int(k) for k in ctx.indices],
    }
    return frames, meta
