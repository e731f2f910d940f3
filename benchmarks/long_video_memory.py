"""Peak memory and time of rendering a long HD video, per perturbation type (issue #33 item 1).

    python -m benchmarks.long_video_memory                       # a 3-minute 1280x720 30 fps clip, every type
    python -m benchmarks.long_video_memory --seconds 60 --types h264_compression,video_defocus
    python -m benchmarks.long_video_memory --calibrate            # the figures of workloads/render_memory.py
    python -m benchmarks.long_video_memory --smoke                # seconds: 2 s at 160x120, clean and noise

Generates the clip once (cached in --dir, default $TMPDIR/mlvp-long-video; benchmarks/real_video.py's generator:
x264 veryfast crf 23, High profile, 3 B-frames, a keyframe every 5 s, a camera panning over a textured scene with a
moving disc, a frame counter and film grain), then renders each type's five severities with render_video in a fresh
process (workloads/render_memory.py `measure`: the process imports cv2 and torch first, as a render actor does) and
prints its peak RSS (VmHWM), its RSS after the imports, CPU and wall seconds, and the memory model's figure
(`render_bytes`) beside it. Goal: every type <= 2 GB on the 3-minute 720p clip. `--together` also renders every
type in one process (the bench's whole-clip path). `--adain` adds style transfer with random-initialised AdaIN
weights (the faithful path's networks on the CPU).

--calibrate measures every type on 10 s clips at 640x360 and 1280x720 and prints, per type, the fit of its working
set (peak - base, H.264's encoders subtracted) as fixed + per-pixel: workloads/render_memory.py's WORKING_SET.

--ray measures where the figure is declared: the render stage's task function (orchestrator/stages/render.py
`render_rows`) in a Ray Data task pool of one worker on a local Ray of one CPU (as the stage calls it: batch_size=1,
TaskPoolStrategy, `memory=` what `render_task_memory` would reserve), one row per type with its five severities, one
fresh Ray per clip size (default 320x240, MSRVTT's, and 640x360; 10 s). It prints the worker's RSS before and after
what render_rows imports and its peak (VmHWM) after each row: workloads/render_memory.py's RAY_WORKER_BASE_BYTES and
WORKER_GROWTH_BYTES.
"""
# ruff: noqa: E402  (the thread-count variables must be set before numpy/OpenCV are imported)
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.real_video import generate
from workloads.perturbations.video import NAMES
from workloads.render_memory import measure, render_bytes, worker_bytes

GIB = 1 << 30
LIMIT = 2 * GIB


def clip(folder: Path, seconds: int, width: int, height: int) -> Path:
    path = folder / f"{seconds}s_{width}x{height}_gop150.mp4"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        print(f"generating {path} ...", file=sys.stderr, flush=True)
        generate(path, seconds, width, height, 150)
        print(f"  {time.time() - t0:.0f} s, {path.stat().st_size / 1e6:.1f} MB", file=sys.stderr, flush=True)
    return path


def row(name: str, path: Path, width: int, height: int, frames: int, severities, adain: bool = False) -> dict:
    t0 = time.time()
    r = measure(path, name.split(","), severities, adain_weights=adain)
    model = render_bytes(width, height, frames, None if "," in name else name, adain_weights=adain)
    bad = {p: s for p, s in r["status"].items() if set(s) != {"ok"}}
    print(f"  {name}{' (AdaIN)' if adain else ''}: peak {r['peak_bytes'] / GIB:.2f} GiB, {r['cpu_s']:.1f} s cpu, "
          f"{time.time() - t0:.0f} s wall{'; FAILED ' + str(bad) + ' ' + str(r['errors'][:1]) if bad else ''}",
          file=sys.stderr, flush=True)
    return {**r, "name": name + (" (AdaIN weights)" if adain else ""), "model": model, "failed": bad}


def calibrate(folder: Path, names: list[str]) -> None:
    """Measure every type on 10 s clips at two sizes and print the (fixed, per-pixel) fit of each working set
    (workloads/render_memory.py WORKING_SET, ADAIN)."""
    from workloads.perturbations.video.h264_compression import ENCODER_BYTES_PER_PIXEL, encoders_per_pass

    sizes = ((640, 360), (1280, 720))
    work = {n: [] for n in names + ["style_transfer (AdaIN)"]}
    bases = []
    for w, h in sizes:
        path = clip(folder, 10, w, h)
        for n in work:
            adain = n.endswith("(AdaIN)")
            r = measure(path, ["style_transfer" if adain else n], (1,) if adain else (1, 2, 3, 4, 5),
                        adain_weights=adain)
            extra = r["peak_bytes"] - r["base_bytes"]
            if n == "h264_compression":
                extra -= encoders_per_pass(w, h) * ENCODER_BYTES_PER_PIXEL * w * h
            work[n].append(extra)
            bases.append(r["base_bytes"])
            print(f"  {w}x{h} {n}: peak {r['peak_bytes'] / 2**20:.0f} MiB, base {r['base_bytes'] / 2**20:.0f} MiB, "
                  f"{r['cpu_s']:.1f} s cpu", file=sys.stderr, flush=True)
    (w1, h1), (w2, h2) = sizes
    p1, p2 = w1 * h1, w2 * h2
    print(f"base RSS after imports: {min(bases) / 2**20:.0f} - {max(bases) / 2**20:.0f} MiB")
    print("| type | above base at " + " | at ".join(f"{w}x{h}" for w, h in sizes) + " (MiB) | fixed MiB | B/px |")
    print("|---|---|---|---|---|")
    for n, (a, b) in work.items():
        per = (b - a) / (p2 - p1)
        print(f"| {n} | {a / 2**20:.0f} | {b / 2**20:.0f} | {max(a - per * p1, 0.0) / 2**20:.0f} | {per:.0f} |")


def ray_worker_rows(batch, **kwargs):
    """orchestrator/stages/render.py `render_rows` in its Ray Data worker, with the worker's memory around it (each
    output row gets it): RSS before and after what render_rows imports (cv2, torch, the render cache; only the first
    row of a process pays them), the peak (VmHWM) then and after the row."""
    from workloads.render_memory import status_bytes

    rss_pre = status_bytes("VmRSS")
    import cv2  # noqa: F401  (what render_rows and render_requests import)
    import torch  # noqa: F401

    import workloads.render_cache  # noqa: F401
    from orchestrator.stages.render import render_rows

    rss_base, hwm_base = status_bytes("VmRSS"), status_bytes("VmHWM")
    out = render_rows(batch, **kwargs)
    n, hwm, rss_end = len(out["status"]), status_bytes("VmHWM"), status_bytes("VmRSS")
    return {**out, "pid": [os.getpid()] * n, "rss_pre": [rss_pre] * n, "rss_base": [rss_base] * n,
            "hwm_base": [hwm_base] * n, "hwm": [hwm] * n, "rss_end": [rss_end] * n}


def ray_worker(folder: Path, names: list[str], sizes: list[tuple[int, int]], seconds: int, videos: int = 1,
               trace: bool = False) -> list[dict]:
    """Every type's row (five severities) through one Ray Data worker per clip size (module docstring, --ray);
    `videos` rows per type (the same clip under as many video ids), type after type as RenderStream orders them."""
    import json

    import ray

    from orchestrator.run.ray_env import start_ray

    results = []
    for w, h in sizes:
        path, frames = clip(folder, seconds, w, h), seconds * 30
        declared = worker_bytes(w, h, frames)   # what orchestrator/stages/render.py `render_task_memory` reserves
        rows = [{"dataset": "memory", "data_version": "v", "video_id": f"{n}-{v}", "video_path": str(path),
                 "requests": json.dumps([[n, s, "", 0] for s in (1, 2, 3, 4, 5)]), "extra_assets": "{}"}
                for n in names for v in range(videos)]
        start_ray(None, 1, dashboard=False)
        try:
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            with tempfile.TemporaryDirectory() as tmp:
                ds = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
                    ray_worker_rows, batch_size=1, compute=ray.data.TaskPoolStrategy(size=1), num_cpus=1,
                    memory=declared, fn_kwargs={"cache_root": tmp, "seed": 0, "num_frames": 12, "resolution": 224})
                out = list(ds.iter_rows())
        finally:
            ray.shutdown()
        by_type: dict[str, dict] = {}
        for r in out:   # rows come out in order (one worker, one row at a time)
            t = by_type.setdefault(r["perturbation"], {**{k: r[k] for k in ("pid", "rss_pre", "rss_base",
                                                                             "hwm_base")}, "status": []})
            t.update(hwm=r["hwm"], rss_end=r["rss_end"])   # after the type's last row
            t["status"].append(r["status"])
        if trace:   # the worker's peak and RSS after each row, in order
            seen = [r for i, r in enumerate(out) if i == len(out) - 1 or out[i + 1]["video_id"] != r["video_id"]]
            print("    rows (peak/RSS MiB after each): " + ", ".join(
                f"{r['perturbation']} {r['hwm'] / 2**20:.0f}/{r['rss_end'] / 2**20:.0f}" for r in seen),
                file=sys.stderr, flush=True)
        pids = {t["pid"] for t in by_type.values()}
        first = min(by_type.values(), key=lambda t: t["hwm"])
        print(f"  {w}x{h}: {len(out)} clips, worker(s) {sorted(pids)}, RSS before imports "
              f"{first['rss_pre'] / 2**20:.0f} MiB, after {first['rss_base'] / 2**20:.0f} MiB, declared "
              f"{declared / 2**20:.0f} MiB", file=sys.stderr, flush=True)
        for n in names:
            t = by_type[n]
            print(f"    after {n}: peak {t['hwm'] / 2**20:.0f} MiB (before it {t['hwm_base'] / 2**20:.0f}), RSS "
                  f"{t['rss_end'] / 2**20:.0f} MiB, "
                  f"a fresh process's model for the type {render_bytes(w, h, frames, n) / 2**20:.0f} MiB, "
                  f"{'ok' if set(t['status']) == {'ok'} else t['status']}", file=sys.stderr, flush=True)
        results.append({"size": (w, h), "declared": declared, "pids": sorted(pids), "types": by_type,
                        "rss_pre": first["rss_pre"], "rss_base": first["rss_base"], "hwm_base": first["hwm_base"]})
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--size", default="1280x720", help="width x height (default 1280x720)")
    ap.add_argument("--types", default="all", help="comma-separated types (default all registered, and clean)")
    ap.add_argument("--together", action="store_true", help="also every type in one process")
    ap.add_argument("--adain", action="store_true", help="also style transfer with random-init AdaIN weights")
    ap.add_argument("--calibrate", action="store_true", help="measure PER_PIXEL on 10 s clips (module docstring)")
    ap.add_argument("--ray", action="store_true", help="in a Ray Data render worker (module docstring)")
    ap.add_argument("--videos", type=int, default=1, help="--ray: rows per type (default 1)")
    ap.add_argument("--trace", action="store_true", help="--ray: the worker's peak and RSS after every row")
    ap.add_argument("--sizes", default="320x240,640x360", help="--ray: clip sizes (default 320x240,640x360)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "mlvp-long-video")
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: a 2 s 160x120 clip, clean and gaussian_noise, in a new folder")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seconds, args.size, args.types = 2, "160x120", "clean,gaussian_noise"
        args.dir = Path(tempfile.mkdtemp(prefix="mlvp-long-video-smoke-"))
    names = ["clean", *NAMES] if args.types == "all" else args.types.split(",")
    if args.calibrate:
        calibrate(args.dir, names)
        return 0
    if args.ray:
        sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes.split(",")]
        seconds = 10 if args.seconds == 180 else args.seconds
        results = ray_worker(args.dir, names, sizes, seconds, args.videos, args.trace)
        print(f"Command: `python -m benchmarks.long_video_memory {' '.join(sys.argv[1:] if argv is None else argv)}`"
              f"; {seconds} s clips, one Ray Data worker per size, {args.videos} row(s) per type (five severities), "
              "type after type")
        print("| size | RSS before imports MiB | after imports MiB | peak after imports MiB | " +
              " | ".join(f"peak after {n} MiB" for n in names) + " | declared MiB | peak / declared |")
        print("|---|" + "---:|" * (len(names) + 5))
        for r in results:
            peak = max(t["hwm"] for t in r["types"].values())
            print(f"| {r['size'][0]}x{r['size'][1]} | {r['rss_pre'] / 2**20:.0f} | {r['rss_base'] / 2**20:.0f} | "
                  f"{r['hwm_base'] / 2**20:.0f} | " + " | ".join(f"{r['types'][n]['hwm'] / 2**20:.0f}"
                                                             for n in names) +
                  f" | {r['declared'] / 2**20:.0f} | {peak / r['declared']:.2f} |")
        return 0
    width, height = (int(v) for v in args.size.lower().split("x"))
    path = clip(args.dir, args.seconds, width, height)
    frames = args.seconds * 30
    rows = [row(n, path, width, height, frames, (1, 2, 3, 4, 5)) for n in names]
    if args.adain:
        rows.append(row("style_transfer", path, width, height, frames, (1, 2, 3, 4, 5), adain=True))
    if args.together:
        rows.append(row(",".join(n for n in names if n != "clean"), path, width, height, frames, (1, 2, 3, 4, 5)))
    from benchmarks.provenance import commit as checkout

    commit = checkout()
    print(f"Command: `python -m benchmarks.long_video_memory {' '.join(sys.argv[1:] if argv is None else argv)}`"
          f" at commit {commit}")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} logical CPUs shared with other jobs, Python "
          f"{platform.python_version()}; one thread everywhere. Clip: {args.seconds} s {width}x{height} 30 fps "
          f"({frames} frames), five severities per type, each in a fresh process (imports cv2 and torch first).")
    print()
    print("| type | peak RSS GiB | RSS after imports GiB | model (render_bytes) GiB | <= 2 GiB | CPU s | wall s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        name = "every type in one process" if "," in r["name"] else r["name"]
        ok = "yes" if r["peak_bytes"] <= LIMIT and not r["failed"] else "NO"
        print(f"| {name} | {r['peak_bytes'] / GIB:.2f} | {r['base_bytes'] / GIB:.2f} | {r['model'] / GIB:.2f} | {ok} "
              f"| {r['cpu_s']:.1f} | {r['wall_s']:.1f} |")
    return 0 if all(r["peak_bytes"] <= LIMIT and not r["failed"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
