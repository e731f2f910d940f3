"""Snow (docs/faithfulness.md: Snow), temporally consistent: ONE tall snow curtain per clip that falls 3 px per sampled
frame.

Per severity (loc, scale, zoom, threshold, blur radius, blur sigma, blend) =
1 (0.1,0.3,3,0.5,10,4,0.8); 2 (0.2,0.3,2,0.5,12,4,0.7); 3 (0.55,0.3,4,0.9,12,8,0.7); 4 (0.55,0.3,4.5,0.85,12,8,0.65);
5 (0.55,0.3,2.5,0.85,12,12,0.55).
Curtain [H + (T-1)*3, W]: N(loc, scale) -> centre clipped zoom (scipy order 1) -> values < threshold set to 0 ->
clip to [0, 1] and quantise to 8 bits -> motion blur (radius, sigma, ONE angle U(-135, -45) per clip) -> 8 bits.
Frame i uses rows [3i, 3i + H): x' = blend*x + (1-blend)*max(x, gray(x)*1.5 + 0.5); out = clip(x' + s + rot180(s)).

Not bit-exact: the reference blurs the curtain with ImageMagick's MotionBlurImage through Wand; we use the numpy
shift-and-add equivalent of `imagecorruptions` (see _blur.numpy_motion_blur), hence faithful = False.
"""
from __future__ import annotations

import cv2
import numpy as np
from scipy.ndimage import zoom as scizoom

from workloads.perturbations.video._blur import numpy_motion_blur
from workloads.perturbations.video._registry import ClipContext, frame_chunks, register

PARAMS = (
    (0.1, 0.3, 3.0, 0.5, 10, 4.0, 0.8),
    (0.2, 0.3, 2.0, 0.5, 12, 4.0, 0.7),
    (0.55, 0.3, 4.0, 0.9, 12, 8.0, 0.7),
    (0.55, 0.3, 4.5, 0.85, 12, 8.0, 0.65),
    (0.55, 0.3, 2.5, 0.85, 12, 12.0, 0.55),
)
FALL_SPEED = 3  # px per sampled frame
FALLBACK = "numpy motion blur instead of ImageMagick"


def clipped_zoom(img: np.ndarray, factor: float) -> np.ndarray:
    """Zoom the centre of a 2-D image by `factor` (scipy order-1 zoom of the ceil(h/f) x ceil(w/f) centre crop),
    trimmed back to the input size."""
    h, w = img.shape
    ch, cw = int(np.ceil(h / factor)), int(np.ceil(w / factor))
    top, left = (h - ch) // 2, (w - cw) // 2
    z = scizoom(img[top:top + ch, left:left + cw], (factor, factor), order=1)
    t2, l2 = (z.shape[0] - h) // 2, (z.shape[1] - w) // 2
    return z[t2:t2 + h, l2:l2 + w]


def snow_curtain(height: int, width: int, severity: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """The blurred curtain on the 0-255 scale (float32 holding integers) and the blur angle."""
    loc, scale, zoom_f, threshold, radius, sigma, _ = PARAMS[severity - 1]
    canvas = rng.normal(loc, scale, (height, width))
    canvas = clipped_zoom(canvas, zoom_f)
    canvas[canvas < threshold] = 0
    angle = float(rng.uniform(-135, -45))
    quant = (np.clip(canvas, 0, 1) * 255).astype(np.uint8).astype(np.float32)  # the reference's 8-bit PNG
    blurred = numpy_motion_blur(quant, radius, sigma, angle)
    return np.clip(np.rint(blurred), 0, 255), angle  # ImageMagick writes the blurred curtain back as 8 bits


@register("snow", order=3, level="low")
def snow(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """One falling snow curtain per clip (3 px per sampled frame), one blur angle per clip."""
    blend = PARAMS[severity - 1][6]
    frames = ctx.sampled
    t, h, w, _ = frames.shape
    curtain, angle = snow_curtain(h + (t - 1) * FALL_SPEED, w, severity, rng)
    rows = np.arange(t)[:, None] * FALL_SPEED + np.arange(h)[None, :]

    # 0-255 scale, the frames of a chunk stacked as one [k*H, W, 3] image so OpenCV's per-pixel kernels run once per
    # chunk (every frame of a 224-320 px clip at once; a few at HD: frame_chunks)
    frames_out = np.empty_like(frames)
    for part in frame_chunks(t, h, w):
        k = part.stop - part.start
        x = frames[part].astype(np.float32).reshape(k * h, w, 3)
        gray = cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)  # == the reference's BGR2GRAY on BGR
        gray *= 1.5
        gray += 127.5
        bright = cv2.max(x, cv2.cvtColor(gray, cv2.COLOR_GRAY2RGB))
        y = cv2.addWeighted(x, blend, bright, 1.0 - blend, 0.0)
        del x, bright
        layer = curtain[rows[part]]  # [k, H, W]
        layer = layer + layer[:, ::-1, ::-1]  # + rot180 of each frame's slice
        y += cv2.cvtColor(layer.reshape(k * h, w), cv2.COLOR_GRAY2RGB)
        np.minimum(y, 255.0, out=y)  # every term is >= 0
        frames_out[part] = y.reshape(k, h, w, 3)  # truncation to uint8
    meta = {"faithful": False, "fallback": FALLBACK, "blur_angle_deg": round(angle, 4),
            "curtain_height": int(curtain.shape[0]), "fall_speed_px": FALL_SPEED}
    return frames_out, meta
