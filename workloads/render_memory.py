"""Peak memory of rendering one video, as a function of its size: what a render actor declares to Ray (`memory=`).

    render_bytes(width, height, frames, perturbation=None, adain_weights=False) -> int   (bytes, one fresh process)
    worker_bytes(width, height, frames, perturbation=None, adain_weights=False) -> int   (bytes, a Ray Data worker)
    measure(path, perturbations, severities=(1, 2, 3, 4, 5)) -> dict                     (one child process)

A render actor renders each row, one video x one type x its severities, with `render_cache.render_video`. Its peak
resident memory is the process's own (`BASE_BYTES`: Python with what RenderActor imports, cv2 and torch) plus the
type's working set, which scales with the frame's pixels and not with the clip's length: every type decodes only
the frames it reads (the uniform sample and their neighbours; H.264 streams the file one frame at a time and keeps
compressed packets), works on a few frames at a time at HD (registry.frame_chunks) and drops its shared work after
its last severity (docs/faithfulness.md: Common pipeline). So

    render_bytes = BASE_BYTES + MARGIN * (fixed + per_pixel * width * height) + PER_FRAME * frames

with (fixed, per_pixel) = WORKING_SET[type], and for H.264 `encoders_per_pass(width, height)` libx264 encoders of
ENCODER_BYTES_PER_PIXEL each added to the per-pixel part (h264_compression). `perturbation=None` gives the largest
of all types ("clean" is the clean clips' row): an actor may get any row.

How the constants were measured (benchmarks/long_video_memory.py --calibrate; figures, command and machine in
docs/notes/2026-11-27-long-video-memory.md): `measure` runs render_video of one type's five severities in a fresh
child process that first imports cv2 and torch (as RenderActor does) and reports its peak RSS (VmHWM, its own
address space's); BASE_BYTES is the RSS after those imports; a type's PER_PIXEL is the largest (peak - base) / pixels
over a 640x360 and a 1280x720 H.264 clip of 10 s, fitted as fixed + per_pixel x pixels through the two (H.264's
encoders subtracted first); the working set does not grow with length (the 60 s and 3-minute clips of the benchmark
and tests/test_render_memory.py check it). MARGIN covers allocator slack and content. PER_FRAME bounds what does grow
with length: H.264's packets at its highest rate (500 kbit/s at 30 fps: 2.1 KB per frame and severity, kept until
that severity is rendered) and the seeking reader's packet index. Style transfer with AdaIN weights
(`adain_weights=True`) was measured with random-initialised weights of the same networks on the CPU.

Where it is declared (`worker_bytes`, what orchestrator/stages/render.py `render_task_memory` reserves), a render row
runs in a Ray Data task worker, which holds more than a fresh process and keeps what its earlier rows grew:

    worker_bytes = RAY_WORKER_BASE_BYTES + WORKER_GROWTH * (render_bytes - BASE_BYTES)

RAY_WORKER_BASE_BYTES is that worker's RSS after render_rows' imports (Ray, Ray Data and pyarrow are in it before
them). WORKER_GROWTH covers a worker that renders type after type: its RSS does not fall back after a row (after
H.264 it stays at H.264's peak: the allocator keeps what was freed), so the next type's working set partly comes on
top of the last one's. Measured with `python -m benchmarks.long_video_memory --ray [--videos N] --sizes WxH` (the
render stage's task function `render_rows` in a Ray Data task pool of one worker, one row per type with its five
severities, every type in turn; 10 s clips) at commit 8993c7a, 2026-11-28, on a 2-core AMD EPYC (Python 3.11.7,
torch 2.14.1+cu130, Ray 2.60.0), status_bytes readings:

    worker RSS before render_rows' imports 194-195 MiB, after them 685 MiB (a fresh process: BASE_BYTES, 560)
    peak (VmHWM) after every type, one row each:   320x240  903 MiB;  640x360 1,129 MiB
    the same, 4 and 12 rows per type at 320x240: 936 and 967 MiB;  3 rows per type at 640x360: 1,132 MiB
    30 H.264 rows then 30 style transfer rows (--trace, commit 69f98b8): flat from the 11th H.264 row (880 MiB),
    then 916 MiB for every style transfer row: the growth levels off; 40 style transfer rows alone: 816-817 MiB
    (the worker's RSS after the H.264 row stays at H.264's peak: 900 MiB at 320x240, 1,125 MiB at 640x360)
    benchmarks/dress_rehearsal_results.md (2026-11-27, 2 workers of 114-126 rows, 320x240 10-30 s): 962-965 MiB

Above its base a worker peaked at 0.84-1.09x of what `render_bytes` gives above BASE_BYTES for the largest type
(1.08-1.09: many rows of every type a worker); with WORKER_GROWTH = 1.25 these peaks are 0.89-0.96 of
`worker_bytes` (1,008 MiB at 320x240 10 s, 1,227 MiB at 640x360 10 s; 1,010 MiB at the dress rehearsal's 19.2 s
mean), where `render_bytes` had them at 1.10-1.18. tests/test_render_memory.py checks a real worker against it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable

MIB = 1 << 20
MARGIN = 1.15  # on the measured working sets: allocator slack, content-dependent x264 buffers
# RSS of a render actor before any work: Python + numpy + OpenCV + PyAV + torch (CPU build 2.14), measured
BASE_BYTES = 560 * MIB
# (fixed bytes, bytes per frame pixel) above BASE_BYTES per type: the two-size fit of the module docstring, measured
# 2026-11-27 (docs/notes/2026-11-27-long-video-memory.md)
WORKING_SET: dict[str, tuple[float, float]] = {
    "clean": (32 * MIB, 70),
    "gaussian_noise": (27 * MIB, 177),
    "impulse_noise": (24 * MIB, 172),
    "fog": (44 * MIB, 234),
    "snow": (126 * MIB, 210),
    "elastic_distortion": (140 * MIB, 255),
    "h264_compression": (100 * MIB, 7),  # the stream and the packets' decoders; encoders_per_pass adds the rest
    "motion_blur": (95 * MIB, 466),
    "video_defocus": (176 * MIB, 402),
    "main_object_occlusion": (38 * MIB, 219),
    "style_transfer": (199 * MIB, 340),  # the model-free proxy (no AdaIN weights)
    "event_insertion": (29 * MIB, 207),
    "temporal_scrambling": (26 * MIB, 282),
}
ADAIN = (1186 * MIB, 410)  # style transfer with AdaIN weights on the CPU (VGG-19, 1 Mpx a chunk: adain.CHUNK_PIXELS)
PER_FRAME = 4096  # H.264 packets of every severity at 500 kbit/s and 30 fps, and the packet index
# A Ray Data render worker (module docstring, "Where it is declared"): its RSS after render_rows' imports, measured,
# and a long-lived worker's working set over a fresh process's
RAY_WORKER_BASE_BYTES = 685 * MIB
WORKER_GROWTH = 1.25


def render_bytes(width: int, height: int, frames: int, perturbation: str | None = None,
                 adain_weights: bool = False) -> int:
    """Peak resident bytes of a render actor rendering every severity of `perturbation` (None: the largest over
    all types) on a `width` x `height` video of `frames` frames (module docstring: how it was measured).
    `adain_weights`: style transfer runs AdaIN (weights given) instead of its model-free proxy."""
    if width <= 0 or height <= 0 or frames <= 0:
        raise ValueError(f"width, height and frames must be positive, got {width}, {height}, {frames}")
    if perturbation is not None and perturbation not in WORKING_SET:
        raise KeyError(f"no memory figure for perturbation {perturbation!r}; known: {sorted(WORKING_SET)}")
    names = [perturbation] if perturbation is not None else list(WORKING_SET)
    return max(_bytes(n, width, height, frames, adain_weights) for n in names)


def worker_bytes(width: int, height: int, frames: int, perturbation: str | None = None,
                 adain_weights: bool = False) -> int:
    """Peak resident bytes of a Ray Data render worker (orchestrator/stages/render.py `render_rows`) that renders
    this row after any others: `render_bytes` above a fresh process's base, grown by WORKER_GROWTH, on the worker's
    own base (module docstring: where it is declared). What a render task reserves in Ray."""
    above = render_bytes(width, height, frames, perturbation, adain_weights) - BASE_BYTES
    return int(RAY_WORKER_BASE_BYTES + WORKER_GROWTH * above)


def _bytes(name: str, width: int, height: int, frames: int, adain_weights: bool) -> int:
    pixels = width * height
    fixed, per_pixel = ADAIN if name == "style_transfer" and adain_weights else WORKING_SET[name]
    if name == "h264_compression":
        from workloads.perturbations.video.h264_compression import ENCODER_BYTES_PER_PIXEL, encoders_per_pass

        per_pixel += encoders_per_pass(width, height) * ENCODER_BYTES_PER_PIXEL
    return int(BASE_BYTES + MARGIN * (fixed + per_pixel * pixels) + PER_FRAME * frames)


# ------------------------------------------------------------------------------------------------ measurement

def measure(path: str | os.PathLike, perturbations: Iterable[str], severities: Iterable[int] = (1, 2, 3, 4, 5),
            adain_weights: bool = False, timeout: float | None = None) -> dict:
    """Render every (perturbation, severity) of the video at `path` with render_video, as one render actor row
    does (all of them from one decode when several types are given), in a fresh child process that imports what
    RenderActor imports first. Returns {"peak_bytes": the child's peak RSS, "base_bytes": its RSS after the
    imports, "cpu_s", "wall_s", "status": {perturbation: [status per severity]}, "errors": [...]}.
    `adain_weights`: style transfer gets random-initialised AdaIN weights (the faithful path's networks)."""
    args = [sys.executable, "-m", "workloads.render_memory", "--child", str(path), ",".join(perturbations),
            ",".join(str(int(s)) for s in severities)] + (["--adain"] if adain_weights else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    if done.returncode != 0:
        raise RuntimeError(f"measuring {list(perturbations)} on {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def status_bytes(field: str, pid: int | str = "self") -> int:
    """A memory field of /proc/<pid>/status in bytes (Linux): "VmRSS" now, "VmHWM" the peak. VmHWM is the process's
    own address space's high-water mark; getrusage's ru_maxrss is not: Linux carries the parent's across fork and
    exec, so a child of a 2 GB test worker "peaked" at 2 GB before it ran."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def _child(path: str, perturbations: list[str], severities: list[int], adain_weights: bool) -> dict:
    import time

    import cv2
    import torch

    cv2.setNumThreads(1)  # as RenderActor
    torch.set_num_threads(1)

    from workloads.render_cache import RenderCache, RenderKey, render_video

    base = status_bytes("VmRSS")
    with tempfile.TemporaryDirectory() as tmp:
        assets = {}
        if adain_weights:
            from workloads.perturbations.video import adain

            vgg, dec = Path(tmp) / "vgg.pth", Path(tmp) / "decoder.pth"
            torch.save(adain.make_vgg().state_dict(), vgg)
            torch.save(adain.make_decoder().state_dict(), dec)
            assets = {"adain_vgg": str(vgg), "adain_decoder": str(dec)}
        keys = [RenderKey("memory", "v", Path(path).stem, p, s, 0, 12, 224) for p in perturbations
                for s in severities]
        t0, c0 = time.perf_counter(), time.process_time()
        out = render_video(str(path), keys, RenderCache(Path(tmp) / "cache"), assets)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    status: dict[str, list[str]] = {}
    for key, o in zip(keys, out):
        status.setdefault(key.perturbation, []).append(o["status"])
    peak = status_bytes("VmHWM")
    return {"peak_bytes": peak, "base_bytes": base, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
            "status": status, "errors": sorted({o["error"] for o in out if o["error"]})}


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "--child":
        result = _child(sys.argv[2], sys.argv[3].split(","), [int(s) for s in sys.argv[4].split(",")],
                        "--adain" in sys.argv[5:])
        print(json.dumps(result))
    else:
        raise SystemExit("usage: python -m workloads.render_memory --child VIDEO TYPE[,TYPE] SEV[,SEV] [--adain]")
