"""Blur kernels and a batched 2-D correlation shared by motion_blur, video_defocus and snow.

`FrameFilter.apply` reproduces `cv2.filter2D(frame, -1, kernel)` (correlation, BORDER_REFLECT_101, anchor at the
kernel centre, result rounded and saturated to uint8) for a batch of frames, choosing per kernel the cheaper of:

- "cv2": cv2.filter2D itself, frame by frame, byte-identical to the reference's call: every kernel under
  `DFT_MIN_AREA` taps, and every other dense kernel (OpenCV 5.0's own correlation measured 1.05-2.0x faster than
  the shared-spectrum FFT this module used before at 240x320; and it is exact; the disks of defocus have their own
  path, `disk` below);
- "banded": sparse kernels at or above that area (the rotated line kernels of motion blur, at most `SPARSE` of their
  taps non-zero), for which OpenCV's DFT path does the work of a dense kernel. We crop the kernel to its non-zero
  support, split it into bands of rows each below OpenCV's DFT threshold (so OpenCV's direct path runs), correlate
  them with a reflect-101-padded float32 copy of the frames and sum the bands in float32: the same exact sum, which
  can differ from cv2's by one grey level at the rare pixels whose value sits on a rounding boundary (tests bound
  this against cv2.filter2D; 24 of 2.8 million values on a 12-frame 240x320 clip).
`FrameFilter.disk` reproduces `cv2.filter2D(frame, -1, disk_kernel(r))` for the disks of defocus, bit for bit in
every case measured, without a dense filter: from r = 6 on (the sizes where cv2.filter2D takes its DFT path) it sums
the disk as horizontal strips of equal half-width, each an unnormalised box filter of the uint8 frame (OpenCV's
running sums; exact integers), and rounds the integer sum S to S/N with N the disk's tap count. That is cv2's
result because `disk_kernel` is 1/N on the disk (its Gaussian smoothing, sigma 0.1, leaves weights of exp(-50) ~ 2e-22
outside it, below a float32 ulp of any sum), and N is odd (2r+1 rows of odd width) so S/N is never within 1/(2N) of a
rounding tie, farther than cv2's own float error. Measured 1.6-3x faster than cv2.filter2D per disk at 240x320
(docs/notes/2026-12-02-render-speed.md); tests compare it with cv2.filter2D.
Filtered results can be memoised per kernel (`key=`), because severities share kernels (e.g. the 13 px line is the
short kernel of severity 5 and the long one of severity 2). What a FrameFilter keeps (the padded float32 frames,
memoised results) is bounded by `cache_bytes` (first come, first kept): at 224-320 px everything fits, at 720p the
padded copy is made frame by frame instead (the same numbers), so a 12-frame 720p clip does not hold ~0.3 GB of float
copies (workloads/render_memory.py).

`numpy_motion_blur` is the dependency-light stand-in for ImageMagick's MotionBlurImage used by snow
(docs/faithfulness.md: Snow): a one-sided Gaussian-weighted shift-and-add along the blur direction with edge
replication, as `imagecorruptions` (>= 1.1) does. It is close to ImageMagick's but not bit-exact.
"""
from __future__ import annotations

import math
import platform
from typing import Any, Sequence

import cv2
import numpy as np

# OpenCV's filter2D uses its DFT path from this kernel area on (x86 with SSE3: 130 for 8U->8U and 32F->32F; 50
# elsewhere). Below it we call cv2.filter2D directly. Our band split uses the same limit; if it is wrong for a CPU
# the bands are still correct, only slower.
DFT_MIN_AREA = 130
_BAND_AREA = 130 if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86") else 50
# the largest share of non-zero taps for which the banded direct path beats cv2.filter2D (lines: ~2/L; disks ~0.8)
SPARSE = 0.25
# frames are padded once by this many pixels (reflect-101); kernels up to (2*PAD+1)^2 share each padded copy
DEFAULT_PAD = 12


def line_kernel(angle_deg: float, length: int) -> np.ndarray:
    """Motion blur (docs/faithfulness.md): a horizontal line of ones in a length x length matrix, rotated by
    `angle_deg` about (L/2, L/2) with cv2.warpAffine (bilinear, zero border), normalised to sum 1. float32."""
    k = np.zeros((length, length), np.float32)
    k[length // 2, :] = 1.0
    rot = cv2.getRotationMatrix2D((length / 2, length / 2), float(angle_deg), 1.0)
    k = cv2.warpAffine(k, rot, (length, length))
    total = k.sum()
    if total <= 0:  # cannot happen for length >= 3, kept so a degenerate kernel is never NaN
        k = np.zeros((length, length), np.float32)
        k[length // 2, length // 2] = 1.0
        return k
    return k / total


def disk_kernel(radius: int, alias_blur: float = 0.1) -> np.ndarray:
    """Video defocus (docs/faithfulness.md): ones inside x^2 + y^2 <= r^2 on a (2r+1)^2 grid, normalised, then
    Gaussian-smoothed (ksize 3x3 if r <= 8 else 5x5, sigma 0.1). float32."""
    if radius <= 0:
        return np.ones((1, 1), np.float32)
    ax = np.arange(-radius, radius + 1)
    xx, yy = np.meshgrid(ax, ax)
    k = ((xx**2 + yy**2) <= radius**2).astype(np.float32)
    k /= k.sum()
    ksize = (3, 3) if radius <= 8 else (5, 5)
    return cv2.GaussianBlur(k, ksize, sigmaX=alias_blur)


def disk_strips(radius: int) -> list[tuple[int, int, int]]:
    """The disk x^2 + y^2 <= r^2 of `disk_kernel` as horizontal strips of equal half-width, top to bottom:
    [(first row dy, last row dy, half-width h)], row dy covering dx in [-h, h] (h = isqrt(r^2 - dy^2))."""
    half = [math.isqrt(radius * radius - dy * dy) for dy in range(-radius, radius + 1)]
    strips: list[tuple[int, int, int]] = []
    for dy, h in zip(range(-radius, radius + 1), half):
        if strips and strips[-1][2] == h:
            strips[-1] = (strips[-1][0], dy, h)
        else:
            strips.append((dy, dy, h))
    return strips


# from this radius on the disk's strips beat cv2.filter2D (its DFT path starts at (2r+1)^2 >= DFT_MIN_AREA)
DISK_STRIPS_FROM = 6
_U16_TAPS = 65535 // 255  # a strip of up to this many taps sums uint8 exactly in uint16


def disk_filter(frame: np.ndarray, radius: int, out: np.ndarray | None = None) -> np.ndarray:
    """cv2.filter2D(frame, -1, disk_kernel(radius)) for one uint8 frame [H, W, C] (module docstring): the integer
    sum over the disk by strips of box filters on the reflect-101 padded frame, rounded as S / N."""
    r = int(radius)
    h, w = frame.shape[:2]
    if out is None:
        out = np.empty_like(frame)
    if r <= 0:
        out[...] = frame
        return out
    padded = cv2.copyMakeBorder(frame, r, r, r, r, cv2.BORDER_REFLECT_101)
    acc = None
    taps = 0
    for top, bottom, half in disk_strips(r):
        kh, kw = bottom - top + 1, 2 * half + 1
        taps += kh * kw
        # the strip's window for output (y, x) starts at padded (y + r + top, x + r - half): anchor (0, 0) on that view
        view = padded[r + top:r + top + h + kh - 1, r - half:r - half + w + kw - 1]
        depth = cv2.CV_16U if kh * kw <= _U16_TAPS else cv2.CV_32F
        s = cv2.boxFilter(view, depth, (kw, kh), anchor=(0, 0), normalize=False,
                          borderType=cv2.BORDER_REFLECT_101)[:h, :w]
        if acc is None:
            acc = s.astype(np.float32)  # integer sums < 2^24: exact in float32
        else:
            cv2.add(acc, s, dst=acc, dtype=cv2.CV_32F)
    cv2.convertScaleAbs(acc, dst=out, alpha=1.0 / taps)  # round(S / N), N odd: never a tie
    return out


def _bands(kernel: np.ndarray) -> list[tuple[np.ndarray, int, int]]:
    """Split a kernel into row bands of non-zero support, each of area < _BAND_AREA:
    [(band, top, left)] with (top, left) the band's position inside `kernel`."""
    rows = np.flatnonzero(kernel.any(axis=1))
    if len(rows) == 0:
        return []
    bands = []
    r = rows[0]
    last = rows[-1]
    while r <= last:
        if not kernel[r].any():
            r += 1
            continue
        r1, cols = r + 1, np.flatnonzero(kernel[r])
        lo, hi = cols[0], cols[-1]
        while r1 <= last:
            c = np.flatnonzero(kernel[r1])
            nlo, nhi = (min(lo, c[0]), max(hi, c[-1])) if len(c) else (lo, hi)
            if (r1 - r + 1) * (nhi - nlo + 1) >= _BAND_AREA:
                break
            lo, hi, r1 = nlo, nhi, r1 + 1
        bands.append((np.ascontiguousarray(kernel[r:r1, lo:hi + 1]), int(r), int(lo)))
        r = r1
    return bands


CACHE_BYTES = 160 << 20  # what one FrameFilter keeps between calls (module docstring)


class FrameFilter:
    """Correlate a fixed batch of uint8 frames [T, H, W, C] with many kernels (see module doc)."""

    def __init__(self, frames: np.ndarray, cache_bytes: int | None = None):
        frames = np.asarray(frames)
        if frames.dtype != np.uint8 or frames.ndim != 4:
            raise ValueError(f"expected uint8 frames [T, H, W, C], got {frames.dtype} {frames.shape}")
        self.frames = frames
        self._padded: dict[int, np.ndarray] = {}
        self._results: dict[Any, np.ndarray] = {}
        self.paths: dict[Any, str] = {}  # key -> "cv2" | "banded", for meta and tests
        self._budget = int(CACHE_BYTES if cache_bytes is None else cache_bytes)

    def _keep(self, nbytes: int) -> bool:
        """Whether a cache entry of `nbytes` fits what is left of the budget (and take it if so)."""
        if nbytes > self._budget:
            return False
        self._budget -= nbytes
        return True

    def _padded_f32(self, pad: int, i: int) -> np.ndarray:
        """Frame i as float32, reflect-101 padded by `pad` ([H + 2 pad, W + 2 pad, C])."""
        if pad not in self._padded:
            t, h, w, c = self.frames.shape
            if not self._keep(t * (h + 2 * pad) * (w + 2 * pad) * c * 4):
                return np.pad(self.frames[i].astype(np.float32), ((pad, pad), (pad, pad), (0, 0)), mode="reflect")
            f = self.frames.astype(np.float32)
            self._padded[pad] = np.pad(f, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")  # reflect-101
        return self._padded[pad][i]

    def disk(self, radius: int, key: Any = None) -> np.ndarray:
        """uint8 [T, H, W, C] = cv2.filter2D(frame, -1, disk_kernel(radius)) for every frame: cv2.filter2D itself
        below DISK_STRIPS_FROM, the strips of `disk_filter` from there on (path "strips"). Memoised under `key` as
        `apply` does."""
        if key is not None and key in self._results:
            return self._results[key]
        out = np.empty_like(self.frames)
        if radius < DISK_STRIPS_FROM:
            path, kernel = "cv2", disk_kernel(radius)
            for i in range(len(self.frames)):
                cv2.filter2D(self.frames[i], -1, kernel, dst=out[i])
        else:
            path = "strips"
            for i in range(len(self.frames)):
                disk_filter(self.frames[i], radius, out=out[i])
        if key is not None:
            self.paths[key] = path
            if self._keep(out.nbytes):
                self._results[key] = out
        return out

    def apply(self, kernels: np.ndarray | Sequence[np.ndarray], key: Any = None) -> np.ndarray:
        """`kernels`: one 2-D kernel for every frame, or a sequence with one kernel per frame (all the same odd
        size). Returns uint8 [T, H, W, C] = cv2.filter2D(frame_i, -1, kernel_i) for every i (up to the rounding
        note in the module doc). With `key`, the result is memoised under it while the cache budget allows (the
        caller guarantees that equal keys mean equal kernels); treat the returned array as read-only."""
        if key is not None and key in self._results:
            return self._results[key]
        t, h, w, c = self.frames.shape
        per_frame = not (isinstance(kernels, np.ndarray) and kernels.ndim == 2)
        ks = [np.asarray(k, np.float32) for k in kernels] if per_frame else [np.asarray(kernels, np.float32)] * t
        if len(ks) != t:
            raise ValueError(f"got {len(ks)} kernels for {t} frames")
        kh, kw = ks[0].shape
        if any(k.shape != (kh, kw) for k in ks) or kh % 2 == 0 or kw % 2 == 0:
            raise ValueError("kernels must share one odd size")
        ry, rx = kh // 2, kw // 2
        taps = max(int(np.count_nonzero(k)) for k in ks)
        out = np.empty_like(self.frames)
        if kh * kw < DFT_MIN_AREA or taps > SPARSE * kh * kw:
            path = "cv2"
            for i in range(t):
                cv2.filter2D(self.frames[i], -1, ks[i], dst=out[i])
        else:
            path = "banded"
            pad = max(DEFAULT_PAD, ry, rx)
            acc = np.empty((h, w, c), np.float32)
            for i in range(t):
                padded = self._padded_f32(pad, i)
                acc.fill(0.0)
                for band, top, left in _bands(ks[i]):
                    bh, bw = band.shape
                    oy, ox = pad + top - ry, pad + left - rx
                    view = padded[oy:oy + h + bh - 1, ox:ox + w + bw - 1]
                    res = cv2.filter2D(view, cv2.CV_32F, band, anchor=(0, 0), borderType=cv2.BORDER_REFLECT_101)
                    acc += res[:h, :w]
                cv2.convertScaleAbs(acc, dst=out[i])  # round half to even + saturate, like filter2D's output
        if key is not None:
            self.paths[key] = path
            if self._keep(out.nbytes):
                self._results[key] = out
        return out


def numpy_motion_blur(x: np.ndarray, radius: int, sigma: float, angle_deg: float) -> np.ndarray:
    """One-sided motion blur of a 2-D float image (stand-in for ImageMagick's MotionBlurImage(radius, sigma, angle)):
    width = 2*radius + 1 taps with Gaussian weights exp(-i^2 / 2 sigma^2) (normalised), tap i sampling the pixel
    at offset round(i * (cos a, sin a)) (ImageMagick's ceil(v - 0.5) rounding), edges replicated. float32 out."""
    x = np.asarray(x, np.float32)
    h, w = x.shape
    width = 2 * int(radius) + 1
    weights = np.exp(-(np.arange(width, dtype=np.float64) ** 2) / (2.0 * sigma**2))
    weights /= weights.sum()
    py, px = width * math.sin(math.radians(angle_deg)), width * math.cos(math.radians(angle_deg))
    hyp = math.hypot(py, px)
    offsets = []
    for i in range(width):
        oy = math.ceil(i * py / hyp - 0.5)
        ox = math.ceil(i * px / hyp - 0.5)
        if abs(oy) >= h or abs(ox) >= w:  # the blur ran past the image: stop, as imagecorruptions does
            break
        offsets.append((oy, ox, weights[i]))
    m = max(max(abs(oy), abs(ox)) for oy, ox, _ in offsets)
    padded = np.pad(x, m, mode="edge") if m else x
    out = np.zeros_like(x)
    for oy, ox, wt in offsets:
        out += np.float32(wt) * padded[m + oy:m + oy + h, m + ox:m + ox + w]
    return out
