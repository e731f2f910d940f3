"""Render stage: perturbed query clips into the render cache with Ray Data tasks on CPUs.

One input row per source video lists every (perturbation, severity) the plan needs from it, so each video is decoded
once and shared work (the uniform sample, optical flow) is done once across severities. Only small rows (paths,
keys, statuses) travel through the object store: the tasks decode, perturb, resize and write to the cache
themselves (`render_rows`). Where the grid has an OCR backbone (TCD), the same decode also writes each clip's OCR
entries, one per engine its backbones read (`Plan.ocr_engines`), read on the frames at their native resolution; a
clip whose entries are missing is a request like a missing clip, so trials never run OCR themselves.

`render` fills the cache and returns when every clip is there (the `render` command, `check`'s clean clips).
`RenderStream` is what `submit` uses to overlap rendering with trials (docs/architecture.md, "Overlap"): a *render
set* is one (dataset, perturbation, severity), every test clip of a dataset at one cell, the unit a trial reads.
Sets are ordered by the first trial (in plan order) that needs them and rendered in groups, one group per
(dataset, perturbation) so a video is still decoded once for its severities (and the optical flows shared); a row is
one video x one group. A background thread streams the Ray Data output, counts each set's clips and calls
`on_ready("render:<dataset>/<perturbation>/<severity>")` the moment its last clip is written (or failed: a trial runs
on the clips that exist, as before), so the trials of the first sets run while later sets are still rendering.
Groups whose assets need a checkpoint (event insertion's distractors) are added with `add` once it exists.

Each Ray Data dataset is named by the render sets it renders (`dataset_name`: "render synthetic fog 1,5; ..."), the
name the Ray dashboard's Ray Data view lists it by, with its progress (docs/results.md, step 4).
"""
from __future__ import annotations

import contextlib
import json
import logging
import queue
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.config.assets import asset_paths
from orchestrator.planning.cost_model import clip_size
from orchestrator.planning.keys import RenderSet
from orchestrator.planning.plan import Plan
from orchestrator.planning.render_sets import plan_render_rows, plan_set_rows
from workloads.ocr import get_engine
from workloads.render_cache import RenderCache, RenderKey
from workloads.render_memory import worker_bytes


@dataclass
class RenderSummary:
    rendered: int = 0
    reused: int = 0
    failed: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)   # {dataset, video_id, video_path, key, error}
    nonfaithful: Counter = field(default_factory=Counter)          # perturbation -> clips rendered with fallbacks
    seconds: float = 0.0

    def line(self) -> str:
        return (f"render cache: {self.rendered} rendered, {self.reused} reused, {self.failed} failed "
                f"({self.seconds:.1f}s)")

    def count(self, row: dict[str, Any], n: int = 1) -> None:
        """One output row of a render actor (n clips of one set)."""
        if row["status"] == "ok":
            self.rendered += n
            if not row["faithful"]:
                self.nonfaithful[row["perturbation"]] += n
        else:
            self.failed += n
            self.failures.append({k: row[k] for k in ("dataset", "video_id", "video_path", "perturbation",
                                                      "severity", "error")})


def render_rows(batch: dict[str, Any], cache_root: str, seed: int, num_frames: int, resolution: int,
                assets: dict[str, dict[str, Any]] | None = None) -> dict[str, list]:
    """The Ray Data task function of the render stage: renders every request of each input row (one source video)
    into the cache and returns one output row per clip. A task, not an actor: nothing is worth keeping between rows
    (the cache is a folder), and Ray restarts a failed task where an actor pool's restart needs its constructor
    arguments kept in the object store."""
    import cv2   # OpenCV and torch: only in the render workers
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    cache, assets = RenderCache(cache_root), assets or {}
    out: dict[str, list] = {k: [] for k in ("dataset", "video_id", "video_path", "perturbation", "severity",
                                            "status", "error", "faithful", "fallback", "seconds")}
    for i in range(len(batch["video_id"])):
        ds, vid, path = str(batch["dataset"][i]), str(batch["video_id"][i]), str(batch["video_path"][i])
        reqs = json.loads(batch["requests"][i])
        # a request is [perturbation, severity, assets version, seed] (the seed defaults to the grid's), then
        # optionally [OCR engines, clip needed] (orchestrator/planning/render_sets.py `render_request`)
        keys = [RenderKey(ds, str(batch["data_version"][i]), vid, r[0], int(r[1]), int(r[3]) if len(r) > 3 else seed,
                          num_frames, resolution, r[2]) for r in reqs]
        extra = {**assets.get(ds, {}), **json.loads(batch["extra_assets"][i]), "video_id": vid, "video_path": path}
        for key, st in zip(keys, render_requests(path, keys, reqs, cache, extra)):
            out["dataset"].append(ds)
            out["video_id"].append(vid)
            out["video_path"].append(path)
            out["perturbation"].append(key.perturbation)
            out["severity"].append(key.severity)
            out["status"].append(st["status"])
            out["error"].append(st["error"] or "")
            out["faithful"].append(bool(st["faithful"]))
            out["fallback"].append(st.get("fallback") or "")
            out["seconds"].append(float(st["seconds"]))
    return out


def render_requests(path: str, keys: list[RenderKey], requests: list[list], cache: RenderCache,
                    extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Render one video's requests (`keys[i]` is `requests[i]`): its clips, and the OCR entries of the engines each
    request lists, read on the frames at their native resolution in the same decode (`render_video(ocr=...)`); a
    request whose clip is cached already gets its OCR entries only (`clips=False`). One status per key. An engine
    that cannot run in this worker writes no entries: a clip still renders; an OCR-only request fails with why (the
    trials of its backbone then fail with the same reason)."""
    from workloads.render_cache import render_video  # OpenCV, PyAV, torch: only in the render workers

    groups: dict[tuple[tuple[str, ...], bool], list[int]] = {}
    for j, r in enumerate(requests):
        engines, clip = (tuple(r[4]), bool(r[5])) if len(r) > 5 else ((), True)
        groups.setdefault((engines, clip), []).append(j)
    out: list[dict[str, Any] | None] = [None] * len(keys)
    for (names, clip), idx in groups.items():
        engines, problems = [], []
        for name in names:
            try:
                engines.append(get_engine(name))
            except RuntimeError as err:
                problems.append(str(err))
        if not clip and not engines:
            for j in idx:
                out[j] = {"digest": keys[j].digest, "status": "failed", "error": "; ".join(problems),
                          "faithful": None, "fallback": None, "seconds": 0.0}
            continue
        for j, st in zip(idx, render_video(path, [keys[j] for j in idx], cache, extra, ocr=engines or None,
                                           clips=clip)):
            out[j] = st
    return out


@contextlib.contextmanager
def quiet_ray_data():
    """Ray Data's per-run INFO/WARNING lines ("Progress bars disabled", "execution finished") off while our own
    progress bar reports the stage; errors still show."""
    logger = logging.getLogger("ray.data")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def render_task_memory(plan: Plan, datasets, sizes: dict | None = None) -> int:
    """Bytes each render task reserves in Ray (`memory=`): the measured peak of a Ray Data render worker at the largest
    perturbation type (workloads/render_memory.py `worker_bytes`: a worker holds more than a fresh process and keeps
    what earlier rows grew) at the largest of these datasets' source clips (mean size from a sample
    of their videos, else typical: orchestrator/planning/cost_model.py `clip_size`). Ray schedules by it, so a node
    runs only as many renders as its memory holds; it is a reservation, not a limit. `sizes`: dataset -> clip size
    already read (filled here), so a caller rendering in batches probes each dataset's videos once. Where the grid
    gives AdaIN's weights, style transfer runs VGG-19 and its decoder (`adain_weights`: about 1.2 GB more than its
    model-free proxy)."""
    sizes = {} if sizes is None else sizes
    datasets = set(datasets)
    for d in datasets - set(sizes):
        sizes[d] = clip_size(d, plan.datasets[d])
    return max((worker_bytes(max(1, round(c.width)), max(1, round(c.height)), max(1, round(c.fps * c.seconds)),
                             adain_weights=_runs_adain(plan, d)) for d, c in ((d, sizes[d]) for d in datasets)),
               default=worker_bytes(320, 240, 300))


def _runs_adain(plan: Plan, dataset: str) -> bool:
    """Style transfer renders `dataset`'s clips with AdaIN's weights: the grid gives both files
    (workloads/perturbations/video/style_transfer.py; else its model-free proxy). A grid gives them to render that
    type, so whether this batch holds it is not asked: the reservation is per task, not per type."""
    paths = asset_paths(plan.grid, dataset)
    return bool(paths["adain_vgg"] and paths["adain_decoder"])


# a dataset name is part of a Ray Data log file's name: no "/", and short enough for one (255 bytes with Ray's suffix)
DATASET_NAME_CHARS = 150


def dataset_name(sets) -> str:
    """The Ray Data dataset's name for these render sets: "render "
    and each (dataset, perturbation) with its severities, "render synthetic fog 1,5; synthetic gaussian_noise 5",
    shortened to `DATASET_NAME_CHARS` with how many groups it leaves out ("+2 more")."""
    groups: dict[tuple[str, str], set[int]] = {}
    for rs in sets:
        groups.setdefault((rs.dataset, rs.perturbation), set()).add(rs.severity)
    parts = [f"{d} {p} {','.join(map(str, sorted(s)))}".replace("/", "-") for (d, p), s in groups.items()]
    name = "render"
    for i, part in enumerate(parts):
        more = f" +{len(parts) - i} more"
        if len(name) + 2 + len(part) + (len(more) if i < len(parts) - 1 else 0) > DATASET_NAME_CHARS:
            return name + more
        name += ("; " if i else " ") + part
    return name


def render(plan: Plan, assets: dict[str, dict[str, Any]] | None = None,
           video_assets: dict[str, dict[str, dict]] | None = None, actors: int | None = None,
           console=None) -> RenderSummary:
    """Render everything the plan needs that is not cached yet. `assets`: per dataset; `video_assets`: per dataset
    and video (e.g. the chosen event-insertion distractor). Needs `ray.init` to have run."""
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    t0 = time.time()
    cache = RenderCache(plan.paths.render)
    rows, reused = plan_render_rows(plan, cache, video_assets)
    summary = RenderSummary(reused=reused)
    total = sum(len(json.loads(r["requests"])) for r in rows)
    if not rows:
        summary.seconds = time.time() - t0
        return summary
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # ours below counts clips, not blocks
    ctx.print_on_execution_start = False
    cpus = int(ray.available_resources().get("CPU", 1))
    size = max(1, min(actors or cpus, len(rows)))
    ds = ray.data.from_items(rows, override_num_blocks=min(len(rows), size * 8))
    ds = ds.map_batches(
        render_rows, batch_size=1, compute=ray.data.TaskPoolStrategy(size=size), num_cpus=1,
        memory=render_task_memory(plan, (r["dataset"] for r in rows)),
        fn_kwargs={"cache_root": str(plan.paths.render), "seed": plan.grid.seed,
                   "num_frames": plan.grid.runtime.num_frames, "resolution": plan.resolution,
                   "assets": assets or {}})
    ds.set_name(dataset_name({RenderSet(r["dataset"], q[0], q[1]) for r in rows for q in json.loads(r["requests"])}))
    columns = (TextColumn("rendering"), BarColumn(), MofNCompleteColumn(), TextColumn("clips"),
               TextColumn("{task.fields[rate]} clips/s"), TextColumn("{task.fields[failed]} failed"),
               TimeElapsedColumn())
    # Python's output into the display only where it is the terminal (orchestrator/run/console.py)
    with quiet_ray_data(), Progress(*columns, console=console, transient=False, redirect_stdout=sys.stdout.isatty(),
                                    redirect_stderr=sys.stderr.isatty()) as bar:
        task = bar.add_task("render", total=total, rate="-", failed=0)
        for row in ds.iter_rows():
            if row["status"] == "ok":
                summary.rendered += 1
                if not row["faithful"]:
                    summary.nonfaithful[row["perturbation"]] += 1
            else:
                summary.failed += 1
                summary.failures.append({k: row[k] for k in ("dataset", "video_id", "video_path", "perturbation",
                                                              "severity", "error")})
            done = summary.rendered + summary.failed
            bar.update(task, completed=done, failed=summary.failed,
                       rate=f"{done / max(time.time() - t0, 1e-9):.1f}")
    summary.seconds = time.time() - t0
    return summary


def actor_pool_size(actors: int | None, rows: int) -> int:
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    cpus = int(ray.available_resources().get("CPU", 1))
    return max(1, min(actors or cpus, rows))


class RenderStream:
    """Render sets in the background, announcing each as it completes (module docstring).

    `add(sets, video_assets)` queues a batch of sets (in order); one thread runs the batches one after another,
    each through Ray Data tasks, at most `actors` at once (`render_fn`, by default `render_rows`: the sim in
    benchmarks/cluster_sim.py passes its own, which sleeps its cost). `on_ready(need)` is called from that thread for
    every set: at once for sets already cached, else when its last clip comes out. `close()` says no batch follows;
    `join()` waits for the rest and returns the summary (re-raising an error of the thread)."""

    def __init__(self, plan: Plan, on_ready, *, assets: dict[str, dict[str, Any]] | None = None,
                 actors: int | None = None, progress=None, render_fn=None, render_kwargs: dict | None = None,
                 plan_rows=None, cpus_per_actor: float = 1):
        self.plan, self.on_ready = plan, on_ready
        self.assets, self.actors = assets or {}, actors
        self.progress, self.task = progress, None
        self.render_fn = render_fn or render_rows
        self.render_kwargs, self.cpus_per_actor = render_kwargs, cpus_per_actor
        self._clip_sizes: dict = {}   # dataset -> source clip size, read once (render_task_memory)
        self.plan_rows = plan_rows or (lambda sets, va: plan_set_rows(self.plan, RenderCache(self.plan.paths.render),
                                                                        sets, va))
        self.summary = RenderSummary()
        self._busy = 0.0                              # seconds spent rendering batches (not waiting for one)
        self.ready_at: dict[RenderSet, float] = {}
        self.first_output_at: float | None = None     # the first clip out of the actor pool (its start-up before)
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._t0 = time.time()
        self._total = 0
        self._thread = threading.Thread(target=self._loop, name="render-stream", daemon=True)
        if progress is not None:
            self.task = progress.add_task("rendering", total=0, unit="clips", failed=0, note="")
        self._thread.start()

    def add(self, sets: list[RenderSet], video_assets: dict[str, dict[str, dict]] | None = None) -> None:
        self._queue.put((list(sets), video_assets))

    def close(self) -> None:
        self._queue.put(None)

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)

    def join(self, timeout: float | None = None) -> RenderSummary:
        self._thread.join(timeout)
        self.summary.seconds = self._busy
        if self.error is not None:
            raise self.error
        return self.summary

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _announce(self, rs: RenderSet) -> None:
        self.ready_at[rs] = time.time()
        self.on_ready(rs.need)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                item = self._queue.get()
                if item is None:
                    return
                self._batch(*item)
        except BaseException as err:  # noqa: BLE001 - handed to join(); the driver decides
            if not self._stop.is_set():
                self.error = err
        finally:
            self.summary.seconds = self._busy

    def _batch(self, sets: list[RenderSet], video_assets) -> None:
        """One batch of sets through Ray Data; its time counts in the summary's seconds (rendering, not waiting)."""
        t0 = time.time()
        try:
            self._render(sets, video_assets)
        finally:
            self._busy += time.time() - t0

    def _render(self, sets: list[RenderSet], video_assets) -> None:
        rows, remaining, reused = self.plan_rows(sets, video_assets)
        self.summary.reused += reused
        total = sum(remaining.values())
        if self.progress is not None:
            self._total += total
            self.progress.update(self.task, total=self._total)
        for rs in sets:
            if remaining[rs] == 0:
                self._announce(rs)
        if not rows:
            return
        import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        size = actor_pool_size(self.actors, len(rows))
        # many small blocks, in order: the first sets' rows are dispatched (and finish) first
        blocks = min(len(rows), max(size * 8, min(len(rows) // 2, 10000)))
        ds = ray.data.from_items(rows, override_num_blocks=blocks)
        kwargs = self.render_kwargs if self.render_kwargs is not None else {
            "cache_root": str(self.plan.paths.render), "seed": self.plan.grid.seed,
            "num_frames": self.plan.grid.runtime.num_frames, "resolution": self.plan.resolution,
            "assets": self.assets}
        ds = ds.map_batches(self.render_fn, batch_size=1, compute=ray.data.TaskPoolStrategy(size=size),
                            num_cpus=self.cpus_per_actor, fn_kwargs=kwargs,
                            memory=render_task_memory(self.plan, [rs.dataset for rs in sets], self._clip_sizes))
        ds.set_name(dataset_name([rs for rs in sets if remaining[rs] > 0]))
        with quiet_ray_data():
            for row in ds.iter_rows():
                if self._stop.is_set():
                    return
                n = int(row.get("clips", 1))
                if self.first_output_at is None:
                    self.first_output_at = time.time()
                self.summary.count(row, n)
                rs = RenderSet(row["dataset"], row["perturbation"], row["severity"])
                remaining[rs] -= n
                if remaining[rs] == 0:
                    self._announce(rs)
                if self.progress is not None:
                    done = self.summary.rendered + self.summary.failed
                    self.progress.update(self.task, completed=done, failed=self.summary.failed,
                                         note=f"{done / max(time.time() - self._t0, 1e-9):.1f} clips/s")


