"""Render stage: perturbed query clips into the render cache with a Ray Data actor pool on CPUs.

One input row per source video lists every (perturbation, severity) the plan needs from it, so each video is decoded
once and shared work (the uniform sample, optical flow) is done once across severities. Only small rows (paths,
keys, statuses) travel through the object store: actors decode, perturb, resize and write to the cache themselves.
"""
from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from orchestrator.plan import Plan
from workloads.render_cache import CacheCorrupt, CacheMiss, RenderCache, RenderKey


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


def render_keys(plan: Plan, dataset: str, video_id: str) -> list[RenderKey]:
    ds = plan.datasets[dataset]
    return [RenderKey(dataset, ds.version, video_id, pert, sev, plan.grid.seed, plan.grid.runtime.num_frames,
                      plan.resolution, plan.render_assets.get((dataset, pert), ""))
            for pert, sev in plan.renders[dataset]]


def plan_render_rows(plan: Plan, cache: RenderCache, video_assets: dict[str, dict[str, dict]] | None = None
                     ) -> tuple[list[dict[str, Any]], int]:
    """One row per source video with the clips of it that are not in the cache yet; returns (rows, reused)."""
    rows, reused = [], 0
    for ds_name in plan.renders:
        seen: set[str] = set()
        for pair in plan.datasets[ds_name].test.pairs:
            if pair.video_id in seen:   # a video with several test captions (MSVD captions: all) renders once
                continue
            seen.add(pair.video_id)
            todo = []
            for key in render_keys(plan, ds_name, pair.video_id):
                try:
                    cache.probe(key)
                    reused += 1
                except (CacheMiss, CacheCorrupt):
                    todo.append([key.perturbation, key.severity, key.assets])
            if todo:
                extra = (video_assets or {}).get(ds_name, {}).get(pair.video_id, {})
                rows.append({"dataset": ds_name, "data_version": plan.datasets[ds_name].version,
                             "video_id": pair.video_id, "video_path": pair.video_path, "requests": json.dumps(todo),
                             "extra_assets": json.dumps(extra)})
    return rows, reused


class RenderActor:
    """Ray Data callable class: one per CPU actor; renders every request of each input row."""

    def __init__(self, cache_root: str, seed: int, num_frames: int, resolution: int,
                 assets: dict[str, dict[str, Any]] | None = None):
        import cv2
        import torch

        cv2.setNumThreads(1)
        torch.set_num_threads(1)
        self.cache = RenderCache(cache_root)
        self.seed, self.num_frames, self.resolution = seed, num_frames, resolution
        self.assets = assets or {}

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        from workloads.render_cache import render_video

        out: dict[str, list] = {k: [] for k in ("dataset", "video_id", "video_path", "perturbation", "severity",
                                                "status", "error", "faithful", "fallback", "seconds")}
        for i in range(len(batch["video_id"])):
            ds, vid, path = str(batch["dataset"][i]), str(batch["video_id"][i]), str(batch["video_path"][i])
            reqs = json.loads(batch["requests"][i])
            keys = [RenderKey(ds, str(batch["data_version"][i]), vid, p, int(s), self.seed, self.num_frames,
                              self.resolution, a) for p, s, a in reqs]
            assets = {**self.assets.get(ds, {}), **json.loads(batch["extra_assets"][i]), "video_id": vid,
                      "video_path": path}
            for key, st in zip(keys, render_video(path, keys, self.cache, assets)):
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


def render(plan: Plan, assets: dict[str, dict[str, Any]] | None = None,
           video_assets: dict[str, dict[str, dict]] | None = None, actors: int | None = None,
           console=None) -> RenderSummary:
    """Render everything the plan needs that is not cached yet. `assets`: per dataset; `video_assets`: per dataset
    and video (e.g. the chosen event-insertion distractor). Needs `ray.init` to have run."""
    import ray
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
        RenderActor, batch_size=1, compute=ray.data.ActorPoolStrategy(size=size), num_cpus=1,
        fn_constructor_kwargs={"cache_root": str(plan.paths.render), "seed": plan.grid.seed,
                               "num_frames": plan.grid.runtime.num_frames, "resolution": plan.resolution,
                               "assets": assets or {}})
    columns = (TextColumn("rendering"), BarColumn(), MofNCompleteColumn(), TextColumn("clips"),
               TextColumn("{task.fields[rate]} clips/s"), TextColumn("{task.fields[failed]} failed"),
               TimeElapsedColumn())
    with quiet_ray_data(), Progress(*columns, console=console, transient=False) as bar:
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
