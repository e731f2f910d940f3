"""Fog (docs/faithfulness.md: Fog): ONE diamond-square plasma fractal per clip (map size = next power of two >= max(H,
W), initial wibble
100 divided by `wibbledecay` each octave, normalised to [0, 1]), cropped to H x W, scaled by the intensity and added
to every sampled frame; then per frame x' = (x + fog) * m / (m + intensity) with m = max(x) over the frame (1.0 for an
all-black frame), clipped to [0, 1]. (intensity, wibbledecay) = [(1.5,2), (2,2), (2.5,1.7), (2.5,1.5), (3,1.4)].
Computed on the 0-255 scale in float32, vectorised over the frames of a chunk (registry.frame_chunks).
"""
from __future__ import annotations

import numpy as np

from workloads.perturbations.video._registry import ClipContext, frame_chunks, register

PARAMS = ((1.5, 2.0), (2.0, 2.0), (2.5, 1.7), (2.5, 1.5), (3.0, 1.4))


def plasma_fractal(mapsize: int, wibbledecay: float, rng: np.random.Generator) -> np.ndarray:
    """Diamond-square height map [mapsize, mapsize] in [0, 1] (ImageNet-C's algorithm, including its
    `wibble * U(-wibble, wibble)` perturbation). `mapsize` must be a power of two."""
    if mapsize < 2 or mapsize & (mapsize - 1):
        raise ValueError(f"mapsize must be a power of two >= 2, got {mapsize}")
    a = np.empty((mapsize, mapsize), np.float64)
    a[0, 0] = 0.0
    step = mapsize
    wibble = 100.0

    def wibbled_mean(x):
        return x / 4 + wibble * rng.uniform(-wibble, wibble, x.shape)

    while step >= 2:
        half = step // 2
        # squares: centre of each square = mean of its corners + wibble
        corners = a[0:mapsize:step, 0:mapsize:step]
        acc = corners + np.roll(corners, -1, axis=0)
        acc += np.roll(acc, -1, axis=1)
        a[half:mapsize:step, half:mapsize:step] = wibbled_mean(acc)
        # diamonds
        dr = a[half:mapsize:step, half:mapsize:step]
        ul = a[0:mapsize:step, 0:mapsize:step]
        lt = dr + np.roll(dr, 1, axis=0) + (ul + np.roll(ul, -1, axis=1))
        a[0:mapsize:step, half:mapsize:step] = wibbled_mean(lt)
        tt = dr + np.roll(dr, 1, axis=1) + (ul + np.roll(ul, -1, axis=0))
        a[half:mapsize:step, 0:mapsize:step] = wibbled_mean(tt)
        step //= 2
        wibble /= wibbledecay
    a -= a.min()
    return a / a.max()


@register("fog", order=2, level="low")
def fog(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """One plasma-fractal fog map per clip added to every frame, then per-frame max rescale."""
    intensity, decay = PARAMS[severity - 1]
    frames = ctx.sampled
    h, w = frames.shape[1:3]
    mapsize = max(2, 1 << (max(h, w) - 1).bit_length())
    layer = (plasma_fractal(mapsize, decay, rng)[:h, :w] * (255.0 * intensity)).astype(np.float32)
    layer = np.repeat(layer[..., None], 3, axis=2)  # [H, W, 3]: broadcast over frames only (fast inner loop)
    m = frames.reshape(len(frames), -1).max(axis=1).astype(np.float32) / np.float32(255.0)
    m[m == 0] = 1.0
    scale = m / (m + np.float32(intensity))
    out = np.empty_like(frames)
    for part in frame_chunks(*frames.shape[:3]):  # a few frames in float at a time at HD
        x = frames[part].astype(np.float32)
        x += layer
        x *= scale[part, None, None, None]
        np.minimum(x, 255.0, out=x)  # never negative; (x + fog) * m / (m + I) <= 255 m up to rounding
        out[part] = x  # truncation to uint8
    meta = {"faithful": True, "intensity": intensity, "wibbledecay": decay, "mapsize": mapsize}
    return out, meta
