"""Gaussian noise (docs/faithfulness.md: Gaussian noise): ONE static noise field N(0, c^2) of shape H x W x 3 per clip,
added to every sampled frame.

c = [0.08, 0.12, 0.18, 0.26, 0.38] on the [0, 1] scale. The reference computes trunc(255 * clip(u/255 + n, 0, 1)) per
frame in float; since u is an integer that equals clip(u + floor(255 n), 0, 255) exactly, so we turn the field into
integer offsets once and apply them to all frames with saturating uint8 adds (no float pass over the frames).
"""
from __future__ import annotations

import cv2
import numpy as np

from workloads.perturbations.video._registry import ClipContext, register

STDS = (0.08, 0.12, 0.18, 0.26, 0.38)


def offsets(shape: tuple[int, int], std: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(add, subtract) uint8 fields: the positive and negative parts of floor(255 * N(0, std^2)), saturated."""
    noise = rng.standard_normal((*shape, 3), dtype=np.float32)
    d = np.floor(noise * np.float32(255.0 * std))
    add = np.clip(d, 0, 255).astype(np.uint8)
    sub = np.clip(-d, 0, 255).astype(np.uint8)
    return add, sub


@register("gaussian_noise", order=0, level="low")
def gaussian_noise(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """One static N(0, c^2) field per clip added to every frame (docs/faithfulness.md: Gaussian noise)."""
    std = STDS[severity - 1]
    frames = ctx.sampled
    add, sub = offsets(frames.shape[1:3], std, rng)
    out = np.empty_like(frames)
    for i in range(len(frames)):
        # at every pixel only one of add/sub is non-zero, so two saturating steps == one clipped sum
        cv2.add(frames[i], add, dst=out[i])
        cv2.subtract(out[i], sub, dst=out[i])
    return out, {"faithful": True, "std": std}
