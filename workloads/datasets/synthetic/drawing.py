"""Drawing a sampled clip: textured backgrounds, anti-aliased shapes with their motion trail, grain and vignette."""
from __future__ import annotations

import numpy as np

from workloads.datasets.synthetic.config import DOMAINS, MAX_LAG, TRAIL, DomainStyle, SyntheticConfig


def _smooth(x: np.ndarray, k: float) -> np.ndarray:
    """A soft 0/1 step of x around 0 (k = sharpness)."""
    return np.clip(0.5 + k * x, 0.0, 1.0)


def _pattern(bg: dict, dom: DomainStyle, xx: np.ndarray, yy: np.ndarray, S: int) -> np.ndarray:
    """Pattern intensity in [0, 1], [S, S]."""
    P = bg["period"]
    px, py = bg["phase"]
    tau = 2 * np.pi
    name = bg["pattern"]
    if dom.key == "a":
        if name == "striped":  # vertical stripes
            return _smooth(np.sin(tau * (xx / P + px)), 2.0)
        if name == "checkered":  # square checks
            return _smooth(np.sin(tau * (xx / P + px)) * np.sin(tau * (yy / P + py)), 3.0)
        if name == "dotted":  # dot grid
            fx = (xx / P + px) % 1.0 - 0.5
            fy = (yy / P + py) % 1.0 - 0.5
            return _smooth(0.22 * P - np.hypot(fx, fy) * P, 1.0)
        # wavy: horizontal wavy bands
        return _smooth(np.sin(tau * (yy / P + 0.3 * np.sin(tau * (xx / (1.7 * P) + px)) + py)), 1.5)
    if dom.key == "c":
        if name == "striped":  # horizontal stripes
            return _smooth(np.sin(tau * (yy / P + py)), 2.0)
        if name == "checkered":  # a grid of thin lines
            fx, fy = (xx / P + px) % 1.0, (yy / P + py) % 1.0
            return np.clip(1.0 - np.minimum(np.minimum(fx, 1 - fx), np.minimum(fy, 1 - fy)) * P / 1.5, 0.0, 1.0)
        if name == "dotted":  # large sparse polka dots
            fx = (xx / (1.5 * P) + px) % 1.0 - 0.5
            fy = (yy / (1.5 * P) + py) % 1.0 - 0.5
            return _smooth(0.3 * P - np.hypot(fx, fy) * 1.5 * P, 1.0)
        # wavy: diagonal zigzag bands
        return _smooth(np.sin(tau * ((xx + 2 * np.abs(((yy / P + py) % 1.0) - 0.5) * P) / P + px)), 2.0)
    if name == "striped":  # thin diagonal stripes
        return _smooth(np.sin(tau * ((xx + yy) / (1.06 * P) + px)) - 0.55, 3.0)
    if name == "checkered":  # diamond checks
        u, v = (xx + yy) / 1.414, (xx - yy) / 1.414
        return _smooth(np.sin(tau * (u / (1.4 * P) + px)) * np.sin(tau * (v / (1.4 * P) + py)), 3.0)
    if name == "dotted":  # ring lattice, odd rows offset
        row = np.floor(yy / P + py)
        fx = (xx / P + px + 0.5 * (row % 2)) % 1.0 - 0.5
        fy = (yy / P + py) % 1.0 - 0.5
        return np.clip(1.2 - np.abs(np.hypot(fx, fy) * P - 0.28 * P) * 1.2, 0.0, 1.0)
    # wavy: concentric ripples around a point given by the phase
    r = np.hypot(xx - px * S, yy - py * S)
    return 0.5 + 0.5 * np.sin(tau * r / P)


def _background(bg: dict, dom: DomainStyle, xx, yy, S: int) -> np.ndarray:
    lo, hi = dom.contrast
    m = _pattern(bg, dom, xx, yy, S)
    return np.asarray(bg["rgb"], np.float32) * (lo + (hi - lo) * m)[..., None].astype(np.float32)


def _sdf(shape: str, u: np.ndarray, w: np.ndarray, r: float) -> np.ndarray:
    """Signed distance (pixels, negative inside) of a shape of nominal radius r centred at the origin."""
    if shape == "circle":
        return np.hypot(u, w) - r
    if shape == "square":
        return _box(u, w, 0.85 * r, 0.85 * r)
    if shape == "triangle":  # pointing up (image y grows downwards); inradius 0.6 r
        d = w  # bottom edge normal (0, 1)
        d = np.maximum(d, -0.866 * u - 0.5 * w)
        d = np.maximum(d, 0.866 * u - 0.5 * w)
        return d - 0.6 * r
    # cross: union of two bars
    return np.minimum(_box(u, w, r, 0.34 * r), _box(u, w, 0.34 * r, r))


def _box(u, w, a, b):
    qx, qy = np.abs(u) - a, np.abs(w) - b
    outside = np.hypot(np.maximum(qx, 0.0), np.maximum(qy, 0.0))
    return outside + np.minimum(np.maximum(qx, qy), 0.0)


def _coverage(obj: dict, ts: np.ndarray, dom: DomainStyle, xx, yy) -> np.ndarray:
    """Anti-aliased opacity [len(ts), h, w] of the object at times ts, on the pixel grid (xx, yy) [h, w]."""
    cx = obj["start"][0] + obj["velocity"][0] * ts
    cy = obj["start"][1] + obj["velocity"][1] * ts
    dx = xx[None] - cx[:, None, None].astype(np.float32)
    dy = yy[None] - cy[:, None, None].astype(np.float32)
    th = np.deg2rad(obj["rotation"])
    c, s = np.float32(np.cos(th)), np.float32(np.sin(th))
    u, w = c * dx + s * dy, -s * dx + c * dy
    d = _sdf(obj["shape"], u, w, obj["radius"])
    if not dom.outline:
        return np.clip(0.5 - d / dom.edge, 0.0, 1.0)
    width = max(1.6, 0.3 * obj["radius"])
    ring = np.clip(width / 2 + 0.5 - np.abs(d), 0.0, 1.0)
    return np.maximum(ring, 0.25 * np.clip(0.5 - d, 0.0, 1.0))


def _bbox(obj: dict, T: int, S: int) -> tuple[int, int, int, int]:
    """Pixel box (y0, y1, x0, x1) holding the object and its trail over the whole clip."""
    reach = 1.05 * obj["radius"] + 3.0  # every shape fits in 1.05 r (cross/square corners); + AA and outline
    xs = [obj["start"][0] + obj["velocity"][0] * t for t in (-MAX_LAG, T - 1)]
    ys = [obj["start"][1] + obj["velocity"][1] * t for t in (-MAX_LAG, T - 1)]
    clamp = lambda v: int(min(max(v, 0), S))  # noqa: E731
    return (clamp(np.floor(min(ys) - reach)), clamp(np.ceil(max(ys) + reach)),
            clamp(np.floor(min(xs) - reach)), clamp(np.ceil(max(xs) + reach)))


def render_clip_v1(clip: dict, config: SyntheticConfig) -> np.ndarray:
    """The frames of one version-1 clip described by `sample_clips_v1`, uint8 [num_frames, size, size, 3] RGB."""
    dom = DOMAINS[config.domain]
    S, T = config.size, config.num_frames
    yy, xx = (np.mgrid[0:S, 0:S].astype(np.float32) + 0.5)
    frames = np.repeat(_background(clip["background"], dom, xx, yy, S)[None], T, axis=0)
    ts = np.arange(-MAX_LAG, T, dtype=np.float32)
    for obj in clip["objects"]:
        y0, y1, x0, x1 = _bbox(obj, T, S)
        if y0 >= y1 or x0 >= x1:
            continue
        cov = _coverage(obj, ts, dom, xx[y0:y1, x0:x1], yy[y0:y1, x0:x1])
        # the trail copies and the object share one colour, so compositing them in turn (oldest first) equals one
        # composite with opacity 1 - prod(1 - a_k)
        keep = 1.0 - cov[MAX_LAG:]
        for lag, alpha in TRAIL:
            keep *= 1.0 - np.float32(alpha) * cov[MAX_LAG - lag:MAX_LAG - lag + T]
        region = frames[:, y0:y1, x0:x1]
        region += (np.asarray(obj["rgb"], np.float32) - region) * (1.0 - keep)[..., None]
    if dom.grain:
        frames += np.random.default_rng(clip["noise_seed"]).normal(0.0, dom.grain, (S, S, 1)).astype(np.float32)
    if dom.vignette:
        r2 = ((xx - S / 2) ** 2 + (yy - S / 2) ** 2) / (S * S / 2)
        frames *= (1.0 - dom.vignette * r2)[..., None]
    return np.clip(np.rint(frames), 0, 255).astype(np.uint8)
