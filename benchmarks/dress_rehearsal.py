"""Dress rehearsal at real size (issue #33 item 5): MSRVTT's real annotation files with stand-in videos at MSRVTT's
size, through the real loaders, the render stage's Ray task pool (every perturbation type x severity) and a few
ViT-B/32 trials, each measured figure beside the cost model's prediction.

    python -m benchmarks.dress_rehearsal [--videos 20] [--types all] [--severities 1,2,3,4,5] [--trials 3]
        [--queries N] [--frames 12] [--model ViT-B-32] [--methods tent] [--device cpu|cuda] [--alone N]
        [--out FILE.md] [--smoke]

What it does:
1. **Data**: under `--dir`, an MSRVTT root the MSRVTT loader reads (workloads/datasets/msrvtt.py): the real 1k-A test
   file (`MSRVTT_JSFUSION_test.csv`, its header and first `--videos` rows, verbatim), the real 9k train list
   (`MSRVTT_train.9k.csv`, whole) with stand-in train captions (`MSRVTT_data.json`, not public: 20 per train video,
   as MSRVTT has), and one generated stand-in video per test row, `videos/<video_id>.mp4`, at MSRVTT's size: 320x240,
   30 fps, 10-30 s (uniform, seeded), H.264 (PyAV's libx264, veryfast, crf 23, High profile, B-frames, a keyframe every
   5 s) of a camera panning over a texture with a moving disc, a frame counter and film grain. Generated once and
   reused while the settings are the same.
2. **Render**: the plan of a grid on that root (every type x severity asked for, v2t, ViT-B/32's 224 px) rendered
   by the render stage as `submit` runs it (orchestrator/stages/render.py `RenderStream`: Ray tasks, one row a video x
   type with its severities, each task reserving `render_task_memory`), on `--actors` tasks at once. Each task also
   records its process's peak RSS (VmHWM) and its wall and CPU seconds; a type's clips per second are its clips over
   its tasks' wall seconds (one actor, one core), the cost model's (orchestrator/planning/cost_model.py, as `plan`
   uses it: one rendering of a type costs `rendering_seconds` of that type at the dataset's source clip size) is 1
   over that; the whole stream's clips per second on all actors is set beside the plan's CPU seconds over the actors.
   With `--alone N`, each (type, severity) of the first N stand-ins is then also rendered alone in this process, as
   benchmarks/render_bench.py (c) measures the cost model's points (`ours_alone`), and each type's CPU seconds per
   clip in the Ray tasks are set beside its CPU seconds per rendering alone on the same videos, in the same run.
3. **Trials**: `--trials` of the plan's trials (spread over its types and severities), each through the trial
   function the Ray Tune trainable runs (workloads/trial.py `run`, in the context `submit` gives it) with
   random-initialised weights (open_clip's ViT-B-32 architecture, nothing downloaded; timing does not depend on the
   weights) on `--device`, `--queries` queries each (the first rows of the test file). The gallery is encoded by the
   first trial and cached for the rest, as in `submit`; the cost model prices the stream (`trial_gpu_seconds`) and the
   gallery (`gallery_gpu_seconds`) apart. Its figures are an NVIDIA H200's (its fp32 trial: 18.0 ms per query), so on
   a CPU the ratio says how far this CPU is from that GPU.

The figures go to the console and, with `--out`, to a markdown file: one table per part, a measured and a predicted
figure and their ratio (measured / predicted) on every row.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import multiprocessing
import os
import platform
import shlex
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Ray's workers import the project from the same checkout (a run given only PYTHONPATH, nothing installed)
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                          if p])
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from benchmarks import provenance  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

WIDTH, HEIGHT, FPS = 320, 240, 30
TRAIN_CAPTIONS = 20        # MSRVTT: 20 captions per video
ANNOTATIONS = [Path("/work/shared/reference/annotations/MSRVTT"), REPO.parent / "shared" / "reference" / "annotations"
               / "MSRVTT", REPO / "tests" / "data" / "annotations" / "MSRVTT"]
MIB = 1 << 20
STAND_IN_WORKERS = 16   # processes writing stand-ins at most
EXAMPLE = """example (about 10 minutes on 2 cores; a GPU machine: --device cuda):
  python -m benchmarks.dress_rehearsal --videos 20 --trials 3 --out /tmp/dress.md
  python -m benchmarks.dress_rehearsal --videos 2 --types gaussian_noise,fog --severities 1 --trials 1 --frames 4
  python -m benchmarks.dress_rehearsal --smoke    # seconds: SMOKE's sizes, on the CPU"""
# `--smoke`: two 2 s stand-ins, one type at one severity, one Source trial of mlvp-micro on the CPU, in a new folder
SMOKE = ["--videos", "2", "--types", "gaussian_noise", "--severities", "1", "--trials", "1", "--frames", "4",
         "--seconds", "2-3", "--actors", "2", "--methods", "source", "--model", "mlvp-micro", "--device", "cpu",
         "--annotations", str(REPO / "tests" / "data" / "annotations" / "MSRVTT")]


# ----------------------------------------------------------------------------------------------------- stand-ins

def stand_in_scene(n: int, w: int, h: int, seed: int):
    """`n` RGB frames: a camera panning over a blurred-noise texture, a disc moving across it, a frame counter and
    film grain (content every perturbation type has something to work on: edges, motion, texture)."""
    import cv2

    rng = np.random.default_rng(seed)
    tex = cv2.GaussianBlur(rng.integers(0, 256, (2 * h, 2 * w, 3), dtype=np.uint8), (0, 0), 2)
    tex = cv2.normalize(tex, None, 0, 255, cv2.NORM_MINMAX)
    grain = [rng.integers(-6, 7, (h, w, 3), dtype=np.int16) for _ in range(7)]
    colour = tuple(int(c) for c in rng.integers(40, 240, 3))
    for i in range(n):
        x, y = int(w / 2 * (1 + np.sin(i / 90 + seed))), int(h / 2 * (1 + np.cos(i / 130 + seed)))
        f = tex[y:y + h, x:x + w].copy()
        cv2.circle(f, (int(w * (0.5 + 0.4 * np.sin(i / 25))), int(h * (0.5 + 0.3 * np.cos(i / 40)))), h // 8,
                   colour, -1)
        cv2.putText(f, f"{i:05d}", (10, h - 10), cv2.FONT_HERSHEY_SIMPLEX, h / 300, (255, 255, 255), 2)
        yield np.clip(f.astype(np.int16) + grain[i % 7], 0, 255).astype(np.uint8)


def write_video(path: Path, seconds: float, seed: int) -> None:
    """One stand-in video (module docstring), written atomically."""
    import av

    from workloads.atomic import atomic_path

    with atomic_path(path, suffix=".mp4") as tmp, av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "23", "profile": "high", "bf": "3", "g": str(5 * FPS)}
        for rgb in stand_in_scene(int(round(seconds * FPS)), WIDTH, HEIGHT, seed):
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def find_annotations(given: str | None) -> Path:
    for folder in ([Path(given)] if given else ANNOTATIONS):
        if (folder / "MSRVTT_JSFUSION_test.csv").is_file() and (folder / "MSRVTT_train.9k.csv").is_file():
            return folder
    raise SystemExit(f"MSRVTT annotations not found (looked in {given or ', '.join(map(str, ANNOTATIONS))}): "
                     "pass --annotations DIR holding MSRVTT_JSFUSION_test.csv and MSRVTT_train.9k.csv")


def prepare_data(root: Path, annotations: Path, videos: int, seconds: tuple[float, float], progress) -> list[dict]:
    """The MSRVTT root (module docstring, step 1); returns the stand-in videos [{video_id, seconds, path}]."""
    with open(annotations / "MSRVTT_JSFUSION_test.csv", newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if videos > len(body):
        raise SystemExit(f"--videos {videos}: the test file has {len(body)} rows")
    root.mkdir(parents=True, exist_ok=True)
    test = root / "MSRVTT_JSFUSION_test.csv"
    with open(test, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, *body[:videos]])
    shutil.copyfile(annotations / "MSRVTT_train.9k.csv", root / "MSRVTT_train.9k.csv")
    data_json = root / "MSRVTT_data.json"
    if not data_json.is_file():
        with open(annotations / "MSRVTT_train.9k.csv", newline="") as f:
            train_ids = [r[0] for r in list(csv.reader(f))[1:] if r]
        sentences = [{"video_id": vid, "caption": f"stand-in caption {k} of {vid}", "sen_id": i * TRAIN_CAPTIONS + k}
                     for i, vid in enumerate(train_ids) for k in range(TRAIN_CAPTIONS)]
        data_json.write_text(json.dumps({"sentences": sentences}))
    i_vid = [h.strip().lower() for h in header].index("video_id")
    rng = np.random.default_rng(0)
    lengths = rng.uniform(seconds[0], seconds[1], len(body))[:videos]
    out = [{"video_id": r[i_vid], "seconds": round(float(s), 2), "path": root / "videos" / f"{r[i_vid]}.mp4"}
           for r, s in zip(body[:videos], lengths)]
    (root / "videos").mkdir(exist_ok=True)
    manifest = root / "videos" / "stand_ins.json"
    made = json.loads(manifest.read_text()) if manifest.is_file() else {}
    task = progress.add_task("stand-ins", total=len(out), unit="videos", failed=0, note="320x240 30 fps H.264")
    todo = [(k, v) for k, v in enumerate(out) if made.get(v["video_id"]) != v["seconds"] or not v["path"].is_file()]
    progress.update(task, advance=len(out) - len(todo))
    workers = min(len(todo), os.cpu_count() or 1, STAND_IN_WORKERS)
    # a process per core where there are many to write (a 10 s stand-in: 1.3 s on one core of a 2-core EPYC, so
    # 1,000 of them ~21 minutes on one core, ~80 s on 16); spawned, not forked, since this process runs the
    # progress bar's thread
    pool = (concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
            if workers > 1 and len(todo) > 4 else None)
    writes = (map if pool is None else pool.map)(write_video, [v["path"] for _, v in todo],
                                                 [v["seconds"] for _, v in todo], [k for k, _ in todo])
    try:
        for (_, v), _ in zip(todo, writes):   # recorded as each is written: a stopped run keeps what it made
            made[v["video_id"]] = v["seconds"]
            manifest.write_text(json.dumps(made))
            progress.update(task, advance=1)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return out


def write_grid(path: Path, root: Path, args) -> Path:
    lines = [
        "name: dress_rehearsal",
        "description: MSRVTT's real annotations with stand-in videos at its size (benchmarks/dress_rehearsal.py)",
        "seed: 0",
        "datasets:",
        f"  msrvtt: {{root: {json.dumps(str(root))}}}",
        "models:",
        f"  clip_model: {args.model}",
        "  pretrained: null",
        "backbones: [clip4clip]",
        f"methods: [{', '.join(args.methods)}]",
        "query_shift:",
        "  datasets: [msrvtt]",
        "  directions: [v2t]",
        f"  perturbations: [{', '.join(args.types)}]",
        f"  severities: [{', '.join(map(str, args.severities))}]",
        "  clean: false",
        "runtime:",
        "  batch_size: 16",
        f"  num_frames: {args.frames}",
        f"  precision: {args.precision}",
        f"  hub_k: {min(10, args.queries)}",   # hubness at k = 10, or the whole gallery when it is smaller
        f"  gpus_per_trial: {1 if args.device == 'cuda' else 0}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------------------------------- rendering

def measured_render_rows(batch, log_dir: str, **kwargs):
    """The render stage's task function (orchestrator/stages/render.py `render_rows`), plus one log line per row:
    its process, type, clips, wall and CPU seconds, and the process's peak RSS so far (VmHWM)."""
    import cv2  # noqa: F401 (imported before the clock starts: a task's first row would pay for them)
    import torch  # noqa: F401

    import workloads.render_cache  # noqa: F401
    from orchestrator.stages.render import render_rows
    from workloads.render_memory import status_bytes

    t0, c0 = time.perf_counter(), time.process_time()
    out = render_rows(batch, **kwargs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    record = {"pid": os.getpid(), "perturbation": out["perturbation"][0] if out["perturbation"] else "",
              "clips": len(out["status"]), "failed": sum(s != "ok" for s in out["status"]),
              "video_id": str(batch["video_id"][0]), "wall_s": wall, "cpu_s": cpu, "hwm": status_bytes("VmHWM")}
    with open(Path(log_dir) / f"{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    return out


def render_part(plan, actors: int, work: Path, progress) -> dict:
    from orchestrator.planning.keys import RenderSet
    from orchestrator.stages.render import RenderStream, render_task_memory

    log_dir = work / "render_log"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    kwargs = {"cache_root": str(plan.paths.render), "seed": plan.grid.seed,
              "num_frames": plan.grid.runtime.num_frames, "resolution": plan.resolution, "assets": {},
              "log_dir": str(log_dir)}
    sets = [RenderSet(d, p, s) for d, needs in plan.renders.items() for p, s in needs]
    stream = RenderStream(plan, lambda need: None, actors=actors, progress=progress,
                          render_fn=measured_render_rows, render_kwargs=kwargs)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    stream.add(sets)
    stream.close()
    summary = stream.join()
    wall = time.perf_counter() - t0
    records = [json.loads(line) for p in sorted(log_dir.glob("*.jsonl")) for line in p.read_text().splitlines()]
    return {"summary": summary, "wall_s": wall, "records": records, "sets": sets, "load": (load, os.getloadavg()[0]),
            "declared": render_task_memory(plan, [rs.dataset for rs in sets])}


def alone_part(stand_ins: list[dict], types: list[str], severities: list[int], progress) -> dict:
    """Each (type, severity) of these videos rendered alone in this process (benchmarks/render_bench.py (c)
    `ours_alone`: decode what the type reads, render; one warm-up call per type first, as there): {type: [CPU s,
    renderings]}, and the 1-minute load average before and after."""
    from render_bench import ours_alone   # benchmarks/render_bench.py, this script's folder

    out: dict[str, list] = {}
    load = os.getloadavg()[0]
    task = progress.add_task("alone", total=len(types) * len(stand_ins) * len(severities), unit="renderings",
                             failed=0, note="in this process")
    for p in types:
        ours_alone(stand_ins[0]["path"], p, severities[0])
        t = out.setdefault(p, [0.0, 0])
        for v in stand_ins:
            for sev in severities:
                c0 = time.process_time()
                ours_alone(v["path"], p, sev)
                t[0] += time.process_time() - c0
                t[1] += 1
                progress.update(task, advance=1)
    return {"types": out, "load": (load, os.getloadavg()[0])}


# ----------------------------------------------------------------------------------------------------- trials

def pick_trials(trials: list, n: int) -> list:
    """`n` of the plan's trials spread evenly over it (its order: type, severity, method)."""
    if n >= len(trials):
        return list(trials)
    return [trials[round(i * (len(trials) - 1) / max(1, n - 1))] for i in range(n)] if n > 1 else [trials[0]]


def trial_part(plan, specs: list, args, root: Path, queries: int, progress) -> list[dict]:
    import dataclasses

    from orchestrator.planning.environment import trial_environment
    from orchestrator.planning.keys import CheckpointKey
    from workloads.trial import run

    checkpoints = {CheckpointKey("clip4clip", d).name: {"path": None, "clip_only": False}   # random init
                   for d in plan.datasets}
    env = trial_environment(plan, checkpoints)
    options = {}
    if queries < len(plan.datasets["msrvtt"].test.pairs):   # the first `queries` rows of the same test file
        with open(root / "MSRVTT_JSFUSION_test.csv", newline="") as f:
            rows = list(csv.reader(f))
        with open(root / f"MSRVTT_JSFUSION_test_{queries}.csv", "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows[:queries + 1])
        options = {"test_csv": f"MSRVTT_JSFUSION_test_{queries}.csv"}
    out = []
    task = progress.add_task("trials", total=len(specs), unit="trials", failed=0, note=args.device)
    for spec in specs:
        ctx = dataclasses.replace(env.context_for(spec), device=args.device, threads=args.threads,
                                  dataset_options={**plan.datasets[spec.dataset].options, **options})
        result = run(spec, ctx)
        if result.status != "ok":
            raise RuntimeError(f"trial {spec.label} failed: {result.error}\n{result.traceback}")
        out.append({"spec": spec, "result": result})
        progress.update(task, advance=1)
    return out


# ----------------------------------------------------------------------------------------------------- report

def ratio(measured: float, predicted: float) -> str:
    return f"{measured / predicted:.2f}" if predicted else "-"


def render_tables(plan, costs, r: dict, actors: int) -> list[str]:
    clip = costs.clips["msrvtt"]
    lines = ["### Rendering: clips per second per perturbation type (one actor, one core)", "",
             f"Cost model: one rendering of a {clip.line()} costs its type's CPU s (`rendering_seconds`, the type's "
             "line through its two measured clips: orchestrator/planning/cost_model.py RENDER_POINTS); predicted "
             "clips/s on one core is 1 over that. Measured: the "
             "type's clips over its rows' wall seconds in their tasks (one actor, one core, decode included), and over "
             "their CPU seconds (what the cost model prices: on a shared machine the wall seconds include waiting for "
             "a core).", "",
             "| type | clips | failed | wall s | CPU s | clips/s measured | clips/s predicted | measured / predicted | "
             "clips per CPU s | measured / predicted (CPU) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by_type: dict[str, dict] = {}
    for rec in r["records"]:
        t = by_type.setdefault(rec["perturbation"], {"clips": 0, "failed": 0, "wall": 0.0, "cpu": 0.0})
        t["clips"] += rec["clips"]
        t["failed"] += rec["failed"]
        t["wall"] += rec["wall_s"]
        t["cpu"] += rec["cpu_s"]
    order = list(dict.fromkeys(rs.perturbation for rs in r["sets"]))
    predicted_cpu = 0.0   # the plan's CPU seconds of every clip rendered, each priced by its type
    for p in order:
        t = by_type.get(p)
        if t is None:
            continue
        per_clip_s = costs.rendering_seconds("msrvtt", p)
        predicted_cpu += t["clips"] * per_clip_s
        rate, cpu_rate = t["clips"] / max(t["wall"], 1e-9), t["clips"] / max(t["cpu"], 1e-9)
        lines.append(f"| {p} | {t['clips']} | {t['failed']} | {t['wall']:.1f} | {t['cpu']:.1f} | {rate:.2f} | "
                     f"{1 / per_clip_s:.2f} | {ratio(rate, 1 / per_clip_s)} | {cpu_rate:.2f} | "
                     f"{ratio(cpu_rate, 1 / per_clip_s)} |")
    clips = sum(t["clips"] for t in by_type.values())
    predicted_wall = predicted_cpu / actors
    rate, predicted = clips / r["wall_s"], clips / predicted_wall
    lines += ["", f"### Rendering: the whole stream on {actors} actors", "",
              "| clips | wall s measured | wall s predicted | clips/s measured | clips/s predicted | "
              "measured / predicted (clips/s) |", "|---:|---:|---:|---:|---:|---:|",
              f"| {clips} | {r['wall_s']:.1f} | {predicted_wall:.1f} | {rate:.2f} | {predicted:.2f} | "
              f"{ratio(rate, predicted)} |",
              "", "Measured wall: from the first set added to the last clip out, Ray task start-up included; "
              f"predicted: the plan's CPU seconds ({predicted_cpu:.1f}: each clip priced by its type) over {actors} "
              "actors.",
              "", "### Rendering: peak RSS per render actor (VmHWM of its process, all its rows)", "",
              "| actor (pid) | rows | types | peak RSS MiB | declared `memory=` MiB | peak / declared |",
              "|---|---:|---:|---:|---:|---:|"]
    actors_seen: dict[int, dict] = {}
    for rec in r["records"]:
        a = actors_seen.setdefault(rec["pid"], {"rows": 0, "types": set(), "hwm": 0})
        a["rows"] += 1
        a["types"].add(rec["perturbation"])
        a["hwm"] = max(a["hwm"], rec["hwm"])
    for pid, a in sorted(actors_seen.items()):
        lines.append(f"| {pid} | {a['rows']} | {len(a['types'])} | {a['hwm'] / MIB:,.0f} | "
                     f"{r['declared'] / MIB:,.0f} | {a['hwm'] / r['declared']:.2f} |")
    lines += ["", "Declared: `render_task_memory` (workloads/render_memory.py `worker_bytes`: the largest type at the "
              "dataset's source clip size), what every render task of the stream reserved."]
    return lines


def alone_tables(r: dict, alone: dict, stand_ins: list[dict]) -> list[str]:
    ids = {v["video_id"] for v in stand_ins}
    lines = [f"### Rendering: CPU s per clip in the Ray tasks against each rendering alone ({len(ids)} stand-ins)",
             "", "| type | clips | Ray tasks, CPU s per clip | alone, CPU s per rendering | Ray / alone |",
             "|---|---:|---:|---:|---:|"]
    for p, (cpu, n) in alone["types"].items():
        recs = [rec for rec in r["records"] if rec["perturbation"] == p and rec["video_id"] in ids]
        per_clip = sum(rec["cpu_s"] for rec in recs) / max(1, sum(rec["clips"] for rec in recs))
        lines.append(f"| {p} | {n} | {per_clip:.3f} | {cpu / n:.3f} | {ratio(per_clip, cpu / n)} |")
    lines += ["", f"Ray tasks: these videos' rows of the stream above (a row decodes once, renders the type's "
              "severities, resizes and writes each clip). Alone: after the stream, each (type, severity) by itself in "
              "this process (render_bench.py (c) `ours_alone`: decode what the type reads, render). Load average (1 "
              f"min): {r['load'][0]:.1f} before the stream, {r['load'][1]:.1f} after it, {alone['load'][1]:.1f} after "
              "the alone pass."]
    return lines


def trial_tables(costs, trials: list[dict], args) -> list[str]:
    cost = costs.cost
    lines = [f"### Trials: {args.model} (random init), v2t, on {args.device}, {args.precision}", "",
             "| trial | queries | total s | stream s measured | stream s predicted | measured / predicted | "
             "stream waited for clips s | computing share of stream | "
             "gallery s measured | gallery s predicted | measured / predicted |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in trials:
        spec, res = t["spec"], t["result"]
        n = res.n_queries
        stream = cost.trial_gpu_seconds(n, spec.batch_size, spec.precision, 1.0)
        gallery = res.n_gallery * cost.gallery_s_per_clip
        g = res.timings.get("gallery_s", 0.0)
        cached = g < 0.05 * res.timings["total_s"] and t is not trials[0]
        wait = res.timings["input_wait_s"]
        lines.append(f"| {spec.method} {spec.cell} | {n} | {res.timings['total_s']:.2f} | "
                     f"{res.timings['adapt_s']:.2f} | {stream:.3f} | {ratio(res.timings['adapt_s'], stream)} | "
                     f"{wait:.2f} | {1 - wait / res.timings['adapt_s']:.1%} | "
                     f"{g:.2f}{' (cached)' if cached else ''} | {gallery:.3f} | "
                     f"{'-' if cached else ratio(g, gallery)} |")
    lines += ["", "Stream: the online adaptation and scoring of the queries (`timings.adapt_s`), priced by "
              "`trial_gpu_seconds` (NVIDIA H200, fp32 18.0 ms / bf16 5.7 ms per query); gallery: its encoding "
              "(`gallery_gpu_seconds`, 3 ms per item), done by the first trial and cached for the others. Total: the "
              "whole trial (loading the model and the clips, diagnostics). Waited for clips: the part of the stream "
              "spent waiting for its next batch from the render cache (`timings.input_wait_s`; read ahead on "
              "background threads, workloads/read_ahead.py); the rest computed, which on a GPU bounds its busy "
              "share during the stream from above."]
    return lines


def machine() -> str:
    cpu = provenance.cpu_model()
    text = f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
    try:
        import torch

        text += f", torch {torch.__version__}"
        if torch.cuda.is_available():
            text += f", {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return text


# ----------------------------------------------------------------------------------------------------- main

def parse_args(argv=None):
    from workloads.perturbations.video import NAMES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=EXAMPLE,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--videos", type=int, default=20, help="test videos to stand in (of MSRVTT's 1,000; default 20)")
    ap.add_argument("--types", default="all", help="perturbation types, comma-separated (default: all 12)")
    ap.add_argument("--severities", default="1,2,3,4,5", help="severities (default 1-5)")
    ap.add_argument("--trials", type=int, default=3, help="trials to run (spread over the plan's; default 3)")
    ap.add_argument("--queries", type=int, default=None,
                    help="queries per trial, the first rows of the test file (default: 4 on the CPU, where a ViT-B/32 "
                         "Tent query at 12 frames costs ~20 CPU s; every stand-in video on a GPU)")
    ap.add_argument("--frames", type=int, default=12, help="frames per clip (runtime.num_frames; default 12)")
    ap.add_argument("--model", default="ViT-B-32", help="open_clip config, random init (default ViT-B-32)")
    ap.add_argument("--methods", default="tent", help="methods of the trials (default tent)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--device", default=None, choices=("cpu", "cuda"),
                    help="where the trials run (default: cuda when torch sees a GPU, else cpu)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of a trial (default 1: runtime.cpus_per_trial's default, as submit runs it)")
    ap.add_argument("--actors", type=int, default=None, help="render tasks at once (default: every CPU)")
    ap.add_argument("--alone", type=int, default=0, metavar="N",
                    help="also render each (type, severity) of the first N stand-ins alone in this process and set "
                         "its CPU s beside the Ray tasks' (default 0: not)")
    ap.add_argument("--seconds", default="10-30", help="stand-in video lengths, MIN-MAX seconds (default 10-30)")
    ap.add_argument("--annotations", default=None, help="folder with MSRVTT_JSFUSION_test.csv and "
                                                         "MSRVTT_train.9k.csv (default: the reference copy)")
    ap.add_argument("--dir", default=None, help="scratch folder (default: $TMPDIR/mlvp-dress-rehearsal)")
    ap.add_argument("--out", default=None, help="write the figures as markdown here")
    ap.add_argument("--smoke", action="store_true", help="seconds: the sizes of SMOKE (the options given win), on "
                                                         "the CPU, in a new scratch folder")
    args = ap.parse_args(provenance.smoke_argv(argv, SMOKE))
    if args.smoke:
        import tempfile

        args.dir = args.dir or tempfile.mkdtemp(prefix="mlvp-dress-rehearsal-smoke-")
        provenance.smoke_skips("the GPU trials", "--smoke runs its trial on the CPU")
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    args.types = list(NAMES) if args.types == "all" else split(args.types)
    unknown = sorted(set(args.types) - set(NAMES))
    if unknown:
        ap.error(f"unknown perturbation types {unknown}; known: {', '.join(NAMES)}")
    args.severities = [int(s) for s in split(args.severities)]
    args.methods = split(args.methods)
    low, _, high = args.seconds.partition("-")
    args.seconds = (float(low), float(high or low))
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    args.queries = min(args.queries or (args.videos if args.device == "cuda" else 4), args.videos)
    args.actors = args.actors or os.cpu_count() or 1
    return args


def main(argv=None) -> str:
    args = parse_args(argv)
    console = Console()
    work = Path(args.dir or Path(os.environ.get("TMPDIR", "/tmp")) / "mlvp-dress-rehearsal")
    root = work / "MSRVTT"
    annotations = find_annotations(args.annotations)
    cmd = "python -m benchmarks.dress_rehearsal " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                   else sys.argv[1:]))
    from orchestrator.config.grid import load_grid
    from orchestrator.planning.cost_model import PlanCosts
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.run import ray_env
    from orchestrator.stages.finetune import finetune_task_memory

    columns = (TextColumn("{task.description:9s}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[failed]} failed"),
               TextColumn("{task.fields[note]}"), TimeElapsedColumn())
    t_start = time.perf_counter()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = time.perf_counter() - t_start - sum(phases.values())
        # a line when each phase ends, also where the progress bars are not drawn (output to a pipe or a file):
        # benchmarks/gpu_busy.py splits its GPU samples at these lines
        print(f"[dress rehearsal] {name} done after {time.perf_counter() - t_start:.0f} s", flush=True)

    with Progress(*columns, console=console) as progress:
        stand_ins = prepare_data(root, annotations, args.videos, args.seconds, progress)
        phase("stand-ins")
        cache = work / "cache"
        shutil.rmtree(cache / "render", ignore_errors=True)    # every run renders (and measures) afresh
        shutil.rmtree(cache / "gallery", ignore_errors=True)
        grid = load_grid(write_grid(work / "dress_rehearsal.yaml", root, args))
        plan = build_plan(grid, Paths.make(work / "results", cache))
        costs = PlanCosts(plan)
        costs.clips  # noqa: B018 (reads the stand-ins' headers once, here)
        phase("plan")
        ray_env.start_ray(None, args.actors, dashboard=False)
        phase("Ray start")
        try:
            rendered = render_part(plan, args.actors, work, progress)
        finally:
            import ray

            ray.shutdown()
        phase("rendering")
        alone = alone_part(stand_ins[:args.alone], args.types, args.severities, progress) if args.alone else None
        if alone:
            phase("alone")
        specs = pick_trials(plan.trials, args.trials)
        trials = trial_part(plan, specs, args, root, args.queries, progress)
        phase("trials")
    total = time.perf_counter() - t_start

    ds = plan.datasets["msrvtt"]
    train = ds.dataset.train_split()
    model = next(m for m in plan.models.values() if m.finetune is not None)
    lengths = [v["seconds"] for v in stand_ins]
    summary = rendered["summary"]
    lines = [f"## Dress rehearsal: MSRVTT at real size, {args.videos} stand-in videos, {len(args.types)} types x "
             f"{len(args.severities)} severities, {len(trials)} {args.model} trials", "",
             f"Command: `{cmd.strip()}` at commit {provenance.commit()}, {time.strftime('%Y-%m-%d')}.  ",
             f"Machine: {machine()}.  ",
             f"Data: the real MSRVTT_JSFUSION_test.csv (first {args.videos} rows) and MSRVTT_train.9k.csv "
             f"({len(set(p.video_id for p in train.pairs)):,} train videos, {len(train.pairs):,} pairs with stand-in "
             f"captions) read by the msrvtt loader; stand-in videos {WIDTH}x{HEIGHT} {FPS} fps H.264, "
             f"{min(lengths):.1f}-{max(lengths):.1f} s (mean {sum(lengths) / len(lengths):.1f} s).  ",
             f"Render stream: {summary.rendered} clips rendered, {summary.failed} failed, "
             f"{sum(summary.nonfaithful.values())} on a documented fallback (types without their assets); "
             f"{args.actors} actors. Whole run {total:.0f} s ("
             + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()) + ").  ",
             f"Not run, for the record: the plan's {model.backbone} fine-tune of {args.model} on this train split "
             f"would reserve {finetune_task_memory(plan, model, 'cuda') / 2**30:.1f} GiB of host memory on a GPU "
             f"({finetune_task_memory(plan, model, 'cpu') / 2**30:.1f} GiB on a CPU; workloads/finetune_memory.py) "
             f"and take {costs.checkpoint_gpu_seconds(model) / 3600:.2f} GPU-hours by the cost model.", ""]
    lines += render_tables(plan, costs, rendered, args.actors) + [""]
    if alone:
        lines += alone_tables(rendered, alone, stand_ins[:args.alone]) + [""]
    lines += trial_tables(costs, trials, args)
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text)
    return text


if __name__ == "__main__":
    main()
