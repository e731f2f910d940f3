"""Motion blur, motion-adaptive (docs/faithfulness.md: Motion blur and video defocus).

Per sampled index k, Farneback flow between original frames k-1 and k gives a high-motion mask (magnitude >= 75th
percentile) and one global direction. Two linear kernels at that angle, short = [5,7,9,11,13] and long =
[9,13,17,21,25] px, blur the frame (cv2.filter2D semantics); the long blur is kept where motion is high, the short
one elsewhere. Frame 0 has zero flow: long kernel everywhere, angle 0. Flow is shared across severities and with
video_defocus (see _flow.py); kernels of 13 px and more use the banded direct path of _blur.FrameFilter.
"""
from __future__ import annotations

import numpy as np

from workloads.perturbations.video._blur import line_kernel
from workloads.perturbations.video._flow import frame_filter, motion_stats
from workloads.perturbations.video._registry import ClipContext, flow_frames, register

SHORT = (5, 7, 9, 11, 13)
LONG = (9, 13, 17, 21, 25)


@register("motion_blur", order=6, level="mid", full_video=True, frames=flow_frames)
def motion_blur(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """Motion-adaptive linear motion blur from Farneback flow between original frames k-1 and k
    (docs/faithfulness.md: Motion blur and video defocus)."""
    short_len, long_len = SHORT[severity - 1], LONG[severity - 1]
    masks, angles = motion_stats(ctx)
    filt = frame_filter(ctx)
    # keyed by length: the angles are fixed per clip, and lengths recur across severities (9 and 13 px)
    short = filt.apply([line_kernel(a, short_len) for a in angles], key=("motion_blur.line", short_len))
    long_ = filt.apply([line_kernel(a, long_len) for a in angles], key=("motion_blur.line", long_len))
    frames = np.where(masks[..., None], long_, short)
    meta = {
        "faithful": True,
        "short_kernel": short_len,
        "long_kernel": long_len,
        "angles_deg": [round(a, 3) for a in angles],
        "filter_paths": [filt.paths[("motion_blur.line", n)] for n in (short_len, long_len)],
        "high_motion_fraction": round(float(masks.mean()), 4),
        "frame_indices": [int(k) for k in ctx.indices],
    }
    return frames, meta
