"""Impulse (salt-and-pepper) noise (docs/faithfulness.md: Impulse noise): ONE uniform mask u ~ U[0,1)^(H x W) per clip;
pixels with u >= 1 - c/2
become white on all 3 channels, u < c/2 black, on every sampled frame. c = [0.03, 0.06, 0.09, 0.17, 0.27].
(The reference's float round trip u/255*255 is exact for all 256 values, so the untouched pixels keep their bytes.)
"""
from __future__ import annotations

import numpy as np

from workloads.perturbations.video._registry import ClipContext, register

AMOUNTS = (0.03, 0.06, 0.09, 0.17, 0.27)


@register("impulse_noise", order=1, level="low")
def impulse_noise(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """One pixel-wise salt/pepper mask per clip, applied to every frame (docs/faithfulness.md: Impulse noise)."""
    amount = AMOUNTS[severity - 1]
    frames = ctx.sampled
    h, w = frames.shape[1:3]
    u = rng.random((h, w))
    salt = u >= 1.0 - amount / 2.0
    pepper = u < amount / 2.0
    # full [H, W, 3] masks: broadcasting only over frames keeps numpy's inner loop long and contiguous
    keep = np.repeat(np.where(salt | pepper, 0, 255).astype(np.uint8)[..., None], 3, axis=2)  # AND mask
    white = np.repeat(np.where(salt, 255, 0).astype(np.uint8)[..., None], 3, axis=2)  # OR mask
    out = np.bitwise_and(frames, keep)
    np.bitwise_or(out, white, out=out)
    meta = {"faithful": True, "amount": amount, "salt_fraction": round(float(salt.mean()), 5),
            "pepper_fraction": round(float(pepper.mean()), 5)}
    return out, meta
