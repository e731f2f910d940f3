"""Render speed of the MLVP video perturbations on ONE core.

    python benchmarks/render_bench.py [--frames 64] [--size 224] [--repeats 5] [--out benchmarks/render_results.md]

(a) seconds per 12-frame clip for the five frame-level types (gaussian, impulse, fog, snow, elastic), each severity,
    next to an ImageNet-C-style per-frame reference written below (independent noise/fields per frame, per-frame
    float64 computation, as ImageNet-C does). Goal: >= 3x the reference.
(b) all (type, severity) renderings of one source clip from a single decode (render_many: decode, flow and
    per-clip work shared through ClipContext.memo). Goal: <= 1 s for the 60 renderings.
The source clip is generated here (textured panning background + moving objects, `--frames` x size x size),
written to an H.264 mp4 with workloads.video_io.write_mp4 and decoded back with read_video, like a dataset video.
Every (type, severity) registered is measured; types missing from the registry are listed.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from scipy.ndimage import gaussian_filter, map_coordinates
from scipy.ndimage import zoom as scizoom

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

cv2.setNumThreads(1)
try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # torch is a project dependency, but the benchmark does not need it
    torch = None

from workloads.perturbations.video import NAMES, render, render_many  # noqa: E402
from workloads.perturbations.video._registry import _REGISTRY, ClipContext, get  # noqa: E402
from workloads.video_io import read_video, write_mp4  # noqa: E402

FRAME_LEVEL = ("gaussian_noise", "impulse_noise", "fog", "snow", "elastic_distortion")
LEAD_REFERENCE_S = {"gaussian_noise": 0.044, "impulse_noise": 0.022, "fog": 0.025, "snow": 0.081,
                    "elastic_distortion": 0.155}


# ----------------------------------------------------------------------------------------------------------------
# source clip
def make_clip(n_frames: int, size: int, seed: int = 0) -> np.ndarray:
    """A camera panning over a smooth colour texture with three objects moving at different speeds."""
    rng = np.random.default_rng(seed)
    big = size * 3
    tex = rng.random((big // 4, big // 4, 3)).astype(np.float32)
    tex = cv2.resize(tex, (big, big), interpolation=cv2.INTER_CUBIC)
    tex = cv2.GaussianBlur(tex, (0, 0), 2.0)
    tex += 0.15 * rng.random((big, big, 3)).astype(np.float32)  # fine grain
    tex = (255 * (tex - tex.min()) / (tex.max() - tex.min())).astype(np.uint8)
    yy, xx = np.mgrid[0:size, 0:size]
    frames = []
    for t in range(n_frames):
        oy, ox = int(40 + 1.5 * t), int(30 + 2.5 * t + 10 * math.sin(t / 7))
        f = tex[oy:oy + size, ox:ox + size].copy()
        for cx, cy, r, col, vx, vy in ((0.2, 0.5, 0.12, (230, 40, 40), 3.0, 0.5),
                                       (0.8, 0.3, 0.08, (40, 220, 60), -2.0, 1.5),
                                       (0.5, 0.8, 0.10, (250, 240, 60), 1.0, -2.5)):
            px = (cx * size + vx * t) % size
            py = (cy * size + vy * t) % size
            cv2.circle(f, (int(px), int(py)), int(r * size), col, -1, lineType=cv2.LINE_AA)
        cv2.rectangle(f, (int((5 * t) % size), size // 10), (int((5 * t) % size) + size // 8, size // 4),
                      (20, 20, 200), -1)
        frames.append(f)
    return np.stack(frames)


# ----------------------------------------------------------------------------------------------------------------
# ImageNet-C-style per-frame references: fresh randomness for every frame, float64 maths, one frame at a time
def ref_gaussian(frames, severity, rng):
    c = (0.08, 0.12, 0.18, 0.26, 0.38)[severity - 1]
    out = []
    for f in frames:
        x = np.array(f) / 255.0
        out.append((np.clip(x + rng.normal(size=x.shape, scale=c), 0, 1) * 255).astype(np.uint8))
    return np.stack(out)


def ref_impulse(frames, severity, rng):
    c = (0.03, 0.06, 0.09, 0.17, 0.27)[severity - 1]
    out = []
    for f in frames:
        x = np.array(f) / 255.0
        u = rng.random(x.shape)  # skimage-style salt & pepper, per array element
        x[u < c / 2] = 0.0
        x[u >= 1 - c / 2] = 1.0
        out.append((np.clip(x, 0, 1) * 255).astype(np.uint8))
    return np.stack(out)


def _plasma(mapsize, wibbledecay, rng):
    a = np.empty((mapsize, mapsize), np.float64)
    a[0, 0] = 0
    step, wibble = mapsize, 100.0

    def wm(x):
        return x / 4 + wibble * rng.uniform(-wibble, wibble, x.shape)

    while step >= 2:
        h = step // 2
        c = a[0:mapsize:step, 0:mapsize:step]
        s = c + np.roll(c, -1, axis=0)
        s += np.roll(s, -1, axis=1)
        a[h:mapsize:step, h:mapsize:step] = wm(s)
        dr, ul = a[h:mapsize:step, h:mapsize:step], a[0:mapsize:step, 0:mapsize:step]
        a[0:mapsize:step, h:mapsize:step] = wm(dr + np.roll(dr, 1, axis=0) + ul + np.roll(ul, -1, axis=1))
        a[h:mapsize:step, 0:mapsize:step] = wm(dr + np.roll(dr, 1, axis=1) + ul + np.roll(ul, -1, axis=0))
        step //= 2
        wibble /= wibbledecay
    a -= a.min()
    return a / a.max()


def ref_fog(frames, severity, rng):
    intensity, decay = ((1.5, 2), (2, 2), (2.5, 1.7), (2.5, 1.5), (3, 1.4))[severity - 1]
    h, w = frames.shape[1:3]
    mapsize = 1 << (max(h, w) - 1).bit_length()
    out = []
    for f in frames:
        x = np.array(f) / 255.0
        m = x.max()
        x = x + intensity * _plasma(mapsize, decay, rng)[:h, :w][..., None]
        out.append((np.clip(x * m / (m + intensity), 0, 1) * 255).astype(np.uint8))
    return np.stack(out)


def _clipped_zoom(img, z):
    h, w = img.shape[:2]
    ch, cw = int(np.ceil(h / z)), int(np.ceil(w / z))
    t, l_ = (h - ch) // 2, (w - cw) // 2
    img = scizoom(img[t:t + ch, l_:l_ + cw], (z, z, 1), order=1)
    t2, l2 = (img.shape[0] - h) // 2, (img.shape[1] - w) // 2
    return img[t2:t2 + h, l2:l2 + w]


def _ic_motion_blur(x, radius, sigma, angle):
    # imagecorruptions' shift-and-add (np.roll + edge fill), float64
    width = 2 * radius + 1
    k = np.exp(-(np.arange(width) ** 2) / (2 * sigma**2))
    k /= k.sum()
    py, px = width * np.sin(np.deg2rad(angle)), width * np.cos(np.deg2rad(angle))
    hyp = math.hypot(py, px)
    out = np.zeros_like(x, dtype=np.float64)
    for i in range(width):
        dy, dx = -math.ceil(i * py / hyp - 0.5), -math.ceil(i * px / hyp - 0.5)
        if abs(dy) >= x.shape[0] or abs(dx) >= x.shape[1]:
            break
        s = x
        if dx < 0:
            s = np.roll(s, x.shape[1] + dx, axis=1)
            s[:, dx:] = s[:, dx - 1:dx]
        elif dx > 0:
            s = np.roll(s, dx, axis=1)
            s[:, :dx] = s[:, dx:dx + 1]
        if dy < 0:
            s = np.roll(s, x.shape[0] + dy, axis=0)
            s[dy:, :] = s[dy - 1:dy, :]
        elif dy > 0:
            s = np.roll(s, dy, axis=0)
            s[:dy, :] = s[dy:dy + 1, :]
        out += k[i] * s
    return out


def ref_snow(frames, severity, rng):
    loc, scale, z, thr, br, bs, blend = ((0.1, 0.3, 3, 0.5, 10, 4, 0.8), (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
                                         (0.55, 0.3, 4, 0.9, 12, 8, 0.7), (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
                                         (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55))[severity - 1]
    h, w = frames.shape[1:3]
    out = []
    for f in frames:
        x = np.array(f, dtype=np.float32) / 255.0
        snow = _clipped_zoom(rng.normal(size=(h, w), loc=loc, scale=scale)[..., None], z)
        snow[snow < thr] = 0
        snow = _ic_motion_blur(np.clip(snow.squeeze(), 0, 1), br, bs, rng.uniform(-135, -45))
        snow = (np.round(snow * 255).astype(np.uint8) / 255.0)[..., None]
        x = blend * x + (1 - blend) * np.maximum(x, cv2.cvtColor(x, cv2.COLOR_RGB2GRAY).reshape(h, w, 1) * 1.5 + 0.5)
        out.append((np.clip(x + snow + np.rot90(snow, k=2), 0, 1) * 255).astype(np.uint8))
    return np.stack(out)


def ref_elastic(frames, severity, rng):
    alpha, sigma, mag = ((488, 170.8, 24.4), (488, 19.52, 48.8), (12.2, 2.44, 4.88), (17.08, 2.44, 4.88),
                         (29.28, 2.44, 4.88))[severity - 1]
    h, w, c = frames.shape[1:]
    out = []
    for f in frames:
        image = np.array(f, dtype=np.float32) / 255.0
        centre = np.float32((h, w)) // 2
        s = min(h, w) // 3
        p1 = np.float32([centre + s, [centre[0] + s, centre[1] - s], centre - s])
        p2 = p1 + rng.uniform(-mag, mag, size=p1.shape).astype(np.float32)
        image = cv2.warpAffine(image, cv2.getAffineTransform(p1, p2), (w, h), borderMode=cv2.BORDER_REFLECT_101)
        dx = (gaussian_filter(rng.uniform(-1, 1, size=(h, w)), sigma, mode="reflect", truncate=3) * alpha)
        dy = (gaussian_filter(rng.uniform(-1, 1, size=(h, w)), sigma, mode="reflect", truncate=3) * alpha)
        dx, dy = dx.astype(np.float32)[..., None], dy.astype(np.float32)[..., None]
        x, y, z = np.meshgrid(np.arange(w), np.arange(h), np.arange(c))
        ind = np.reshape(y + dy, (-1, 1)), np.reshape(x + dx, (-1, 1)), np.reshape(z, (-1, 1))
        res = map_coordinates(image, ind, order=1, mode="reflect").reshape(h, w, c)
        out.append((np.clip(res, 0, 1) * 255).astype(np.uint8))
    return np.stack(out)


REFERENCES = {"gaussian_noise": ref_gaussian, "impulse_noise": ref_impulse, "fog": ref_fog, "snow": ref_snow,
              "elastic_distortion": ref_elastic}


# ----------------------------------------------------------------------------------------------------------------
def _time(fn, repeats: int) -> tuple[float, float]:
    """(median wall seconds, median process-CPU seconds) of `fn()`. Everything runs on one thread, so CPU time is
    what the work costs on one idle core; wall time also counts waiting for a core on a busy machine."""
    fn()  # warm-up (imports, per-process caches of kernels/operators)
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def bench_frame_level(video: np.ndarray, repeats: int) -> list[dict]:
    rows = []
    sampled = ClipContext(video).sampled
    for name in FRAME_LEVEL:
        if name not in _REGISTRY:
            continue
        ours, ref = [], []
        for sev in range(1, 6):
            ours.append(_time(lambda: render(name, video, sev, seed=1), repeats))
            rrng = np.random.default_rng(1)
            ref.append(_time(lambda: REFERENCES[name](sampled, sev, rrng), max(1, repeats // 2)))
        rows.append({"name": name, "ours": ours, "ref": ref})
    return rows


def bench_all(path: Path, repeats: int):
    """(b): decode + render_many of every registered (type, severity), and a per-type breakdown with the same
    sharing (one ClipContext, severities in order). Medians over `repeats` of (wall, cpu) seconds."""
    names = [n for n in NAMES if n in _REGISTRY]
    requests = [(n, s, 1) for n in names for s in range(1, 6)]
    total, decode, per_type = [], [], {n: [] for n in names}
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        video = read_video(path)
        t1, c1 = time.perf_counter(), time.process_time()
        out = render_many(video, requests, fps=30.0)
        t2, c2 = time.perf_counter(), time.process_time()
        assert len(out) == len(requests)
        decode.append((t1 - t0, c1 - c0))
        total.append((t2 - t0, c2 - c0))
    for _ in range(repeats):
        ctx = ClipContext(read_video(path), assets={"fps": 30.0})
        for name in names:
            info = get(name)
            t0, c0 = time.perf_counter(), time.process_time()
            for sev in range(1, 6):
                info.fn(ctx, sev, np.random.default_rng(1))
            per_type[name].append((time.perf_counter() - t0, time.process_time() - c0))

    def med(pairs):
        return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)

    return med(total), med(decode), {n: med(v) for n, v in per_type.items()}, len(requests), len(total)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=64, help="frames in the source clip (default 64)")
    ap.add_argument("--size", type=int, default=224, help="frame height = width (default 224)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (median)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("render_results.md"))
    ap.add_argument("--no-save", action="store_true", help="print only")
    args = ap.parse_args(argv)

    command = "python benchmarks/render_bench.py " + " ".join(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clip.mp4"
        write_mp4(path, make_clip(args.frames, args.size), fps=30.0, crf=18)
        video = read_video(path)
        rows = bench_frame_level(video, args.repeats)
        (total_w, total_c), (dec_w, dec_c), per_type, n_req, runs = bench_all(path, max(3, args.repeats // 2 + 1))

    missing = [n for n in NAMES if n not in _REGISTRY]
    lines = [f"Command: `{command.strip()}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} logical CPUs shared with other jobs, Python "
             f"{platform.python_version()}, numpy {np.__version__}, OpenCV {cv2.__version__}. One thread everywhere "
             f"(cv2.setNumThreads(1), OMP/MKL/OpenBLAS = 1{', torch = 1' if torch is not None else ''}, libx264 and "
             "the H.264 decoder with 1 thread). Times are medians of repeats. **cpu** = process CPU time, i.e. the "
             "cost on one idle core (goals are judged on it); wall = elapsed time, which also counts waiting for a "
             "core on this busy shared machine.",
             "",
             f"Source clip: {video.shape[0]} frames {video.shape[1]}x{video.shape[2]} (synthetic panning texture with "
             "grain + moving objects, H.264 crf 18 at 30 fps, decoded with decord); renderings are 12 frames.",
             "",
             "### (a) Frame-level types, seconds per 12-frame clip (mean over severities 1-5)",
             "",
             "| type | ours cpu s/clip | ours clips/s | ref cpu s/clip | ref clips/s | speed-up | goal >= 3x "
             "| ours / ref wall s/clip | lead's ref s/clip | per severity ours / ref cpu (ms) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ow, oc = (statistics.mean(x[i] for x in r["ours"]) for i in (0, 1))
        rw, rc = (statistics.mean(x[i] for x in r["ref"]) for i in (0, 1))
        sev = ", ".join(f"{a[1] * 1e3:.1f}/{b[1] * 1e3:.1f}" for a, b in zip(r["ours"], r["ref"]))
        lines.append(f"| {r['name']} | {oc:.4f} | {1 / oc:.0f} | {rc:.4f} | {1 / rc:.1f} | {rc / oc:.1f}x | "
                     f"{'met' if rc / oc >= 3 else 'MISSED'} | {ow:.4f} / {rw:.4f} | "
                     f"{LEAD_REFERENCE_S[r['name']]:.3f} | {sev} |")
    lines += ["", "ref = the ImageNet-C-style per-frame implementation in this script (fresh noise/field per frame, "
              "float64, frame by frame).",
              "", "### (b) All registered (type, severity) renderings of one clip from one decode", "",
              f"{n_req} renderings ({n_req // 5} types x 5 severities) including the decode: **{total_c:.3f} s cpu** "
              f"({total_w:.3f} s wall), median of {runs} runs; "
              f"{'goal <= 1 s met' if total_c <= 1.0 else 'goal <= 1 s MISSED'} for what is registered. "
              f"Decode alone: {dec_c:.3f} s cpu.",
              "",
              "| type | 5 severities, cpu s (shared work included) | wall s | full video |",
              "|---|---|---|---|"]
    for name, (w_s, c_s) in per_type.items():
        lines.append(f"| {name} | {c_s:.3f} | {w_s:.3f} | {'yes' if get(name).full_video else 'no'} |")
    lines.append(f"| **sum** | {sum(v[1] for v in per_type.values()):.3f} | "
                 f"{sum(v[0] for v in per_type.values()):.3f} | |")
    lines += ["", f"Missing from the registry: {', '.join(missing) if missing else 'none (all 12 registered)'}."]
    ranked = sorted(per_type.items(), key=lambda kv: -kv[1][1])
    lines += ["", "Where the time goes (cpu): " + ", ".join(f"{n} {v[1]:.3f} s" for n, v in ranked[:3]) + "; "
              f"all the others together {sum(v[1] for _, v in ranked[3:]):.3f} s."]
    if "h264_compression" in per_type:
        per_frame = per_type["h264_compression"][1] / 5 / video.shape[0]
        lines.append(f"h264_compression is 5 full libx264 encodes (preset fast, as the reference) + decodes of the "
                     f"whole clip: {per_frame * 1e3:.2f} ms cpu per source frame per severity, so it grows linearly "
                     "with clip length and alone takes about half of the 1 s budget at 64 frames.")
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_save:
        args.out.write_text("# Render benchmark\n\n" + text)
        print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
