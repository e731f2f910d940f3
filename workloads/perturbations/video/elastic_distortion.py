"""Elastic distortion (docs/faithfulness.md: Elastic distortion): ONE affine warp and ONE displacement field per clip,
applied to every sampled frame.

(alpha, sigma, affine magnitude), base 244 (ImageNet-C's constant):
1 (488, 170.8, 24.4); 2 (488, 19.52, 48.8); 3 (12.2, 2.44, 4.88); 4 (17.08, 2.44, 4.88); 5 (29.28, 2.44, 4.88)
(non-monotone at 1-2 vs 3-5 by design).
Affine: 3 points around the centre (centre +- min(H, W)//3, built like the reference, including its (row, col) order)
jittered by U(-mag, mag) -> cv2.getAffineTransform -> cv2.warpAffine (bilinear, BORDER_REFLECT_101) on x/255.
Field: dx, dy = gaussian_filter(U(-1, 1)^(H x W), sigma, mode reflect, truncate 3) * alpha; each frame is then
resampled at (y + dy, x + dx) with bilinear interpolation and `reflect` boundaries (= scipy map_coordinates order 1,
mode "reflect"); out = trunc(255 * clip(v, 0, 1)).

Speed-ups with the same maths: the Gaussian filter is applied as two dense 1-D operator matrices (exactly scipy's
reflect-mode kernel, but O(n^2) instead of O(n * 6 sigma) per line for the sigma = 170.8 case), and the bilinear
resampling weights/indices are computed once and gathered for all frames and channels of a chunk at once (a few
frames at a time at HD: registry.frame_chunks).
"""
from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from workloads.perturbations.video._registry import ClipContext, frame_chunks, register

PARAMS = (
    (244 * 2, 244 * 0.7, 244 * 0.1),
    (244 * 2, 244 * 0.08, 244 * 0.2),
    (244 * 0.05, 244 * 0.01, 244 * 0.02),
    (244 * 0.07, 244 * 0.01, 244 * 0.02),
    (244 * 0.12, 244 * 0.01, 244 * 0.02),
)
TRUNCATE = 3.0


@lru_cache(maxsize=32)
def gaussian_operator(n: int, sigma: float, truncate: float = TRUNCATE) -> np.ndarray:
    """[n, n] matrix A with A @ v == scipy.ndimage.gaussian_filter1d(v, sigma, mode="reflect", truncate=truncate)."""
    radius = int(truncate * float(sigma) + 0.5)
    offs = np.arange(-radius, radius + 1)
    weights = np.exp(-0.5 / sigma**2 * offs.astype(np.float64) ** 2)
    weights /= weights.sum()
    rows = np.arange(n)[:, None]
    cols = np.mod(rows + offs[None, :], 2 * n)  # "reflect" = half-sample symmetric, period 2n
    cols = np.where(cols >= n, 2 * n - 1 - cols, cols)
    flat = (rows * n + cols).ravel()
    a = np.bincount(flat, weights=np.broadcast_to(weights, cols.shape).ravel(), minlength=n * n)
    a = a.reshape(n, n)
    a.flags.writeable = False
    return a


def smooth_field(u: np.ndarray, sigma: float) -> np.ndarray:
    h, w = u.shape
    return gaussian_operator(h, float(sigma)) @ u @ gaussian_operator(w, float(sigma)).T


def _reflect(c: np.ndarray, n: int) -> np.ndarray:
    """Continuous half-sample-symmetric reflection of coordinates into [-0.5, n - 0.5] (scipy's "reflect")."""
    p = 2 * n
    c = np.mod(c + 0.5, p) - 0.5
    return np.where(c > n - 0.5, p - 1 - c, c)


def bilinear_plan(dy: np.ndarray, dx: np.ndarray):
    """Flat gather indices [4, H*W] and weights [4, H*W] (float32) for sampling at (y + dy, x + dx)."""
    h, w = dy.shape
    ys = _reflect(np.arange(h, dtype=np.float64)[:, None] + dy, h).ravel()
    xs = _reflect(np.arange(w, dtype=np.float64)[None, :] + dx, w).ravel()
    y0, x0 = np.floor(ys), np.floor(xs)
    fy, fx = ys - y0, xs - x0
    y0 = y0.astype(np.intp)
    x0 = x0.astype(np.intp)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    y0, x0 = np.maximum(y0, 0), np.maximum(x0, 0)
    idx = np.stack([y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1])
    wts = np.stack([(1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx]).astype(np.float32)
    return idx, wts


@register("elastic_distortion", order=4, level="low")
def elastic_distortion(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """One affine warp + one smooth displacement field per clip, applied to every frame."""
    alpha, sigma, mag = PARAMS[severity - 1]
    frames = ctx.sampled
    t, h, w, c = frames.shape

    centre = np.float32((h, w)) // 2
    size = min(h, w) // 3
    pts1 = np.float32([centre + size, [centre[0] + size, centre[1] - size], centre - size])
    pts2 = pts1 + rng.uniform(-mag, mag, size=pts1.shape).astype(np.float32)
    affine = cv2.getAffineTransform(pts1, pts2)
    dx = (smooth_field(rng.uniform(-1, 1, size=(h, w)), sigma) * alpha).astype(np.float32)
    dy = (smooth_field(rng.uniform(-1, 1, size=(h, w)), sigma) * alpha).astype(np.float32)
    idx, wts = bilinear_plan(dy.astype(np.float64), dx.astype(np.float64))

    # warp each frame (x/255, float32) into a pixel-major buffer [H*W, T*C] so one row gather serves all frames of a
    # chunk (frame_chunks: a few frames at a time at HD, all at 224-320 px)
    out = np.empty_like(frames)
    for part in frame_chunks(t, h, w):
        sub = frames[part]
        k = len(sub)
        warped = np.empty((h, w, k, c), np.float32)
        scaled = sub.astype(np.float32)
        scaled /= np.float32(255.0)
        for i in range(k):
            warped[:, :, i, :] = cv2.warpAffine(scaled[i], affine, (w, h), borderMode=cv2.BORDER_REFLECT_101)
        del scaled
        flat = warped.reshape(h * w, k * c)
        acc = np.take(flat, idx[0], axis=0)
        acc *= wts[0][:, None]
        for j in range(1, 4):
            tap = np.take(flat, idx[j], axis=0)
            tap *= wts[j][:, None]
            acc += tap
        del flat, warped, tap
        np.clip(acc, 0.0, 1.0, out=acc)
        acc *= np.float32(255.0)
        np.copyto(out[part], acc.reshape(h, w, k, c).transpose(2, 0, 1, 3), casting="unsafe")  # truncation
    meta = {"faithful": True, "alpha": round(alpha, 4), "sigma": round(sigma, 4), "affine_mag": round(mag, 4),
            "max_displacement_px": round(float(np.hypot(dx, dy).max()), 3)}
    return out, meta
