"""Render sets (orchestrator/planning/keys.py `RenderSet`): one (dataset, perturbation, severity), every test clip of
a dataset at one cell (at every seed of the grid: `Plan.seeds`), the unit a trial reads from the render cache. Which
sets a trial reads, the order they are rendered in (by the first trial that needs them, or Johnson's rule under the
cost model), and the actor rows that render them (one row per video x group of a dataset's severities, so a video is
decoded once). Pure functions of the plan and the cache's contents."""
from __future__ import annotations

import json
from typing import Any, Iterator

from orchestrator.planning.cost_model import PlanCosts
from orchestrator.planning.keys import RenderSet
from orchestrator.planning.plan import Plan
from workloads.mixing import Mix
from workloads.ocr import engine_version
from workloads.render_cache import CacheCorrupt, CacheMiss, RenderCache, RenderKey
from workloads.spec import CLEAN, TrialSpec


def trial_render_sets(spec: TrialSpec) -> list[RenderSet]:
    """The render sets a trial reads (as orchestrator/planning/plan.py decides the renders): v2t queries at their cell
    (a mix: every cell it draws and the clean clips), t2v galleries and clean cells the clean clips."""
    if spec.direction != "v2t":
        return [RenderSet(spec.dataset, CLEAN, 0)]
    if spec.segments:   # a multi-segment protocol's stream (docs/protocols.md): every segment's set
        return [RenderSet(spec.dataset, p, s) for p, s in spec.segment_cells]
    if spec.mix:
        return [RenderSet(spec.dataset, CLEAN, 0),
                *(RenderSet(spec.dataset, p, s) for p, s in Mix.from_json(spec.mix).cells())]
    return [RenderSet(spec.dataset, spec.perturbation, spec.severity)]


def ordered_sets(plan: Plan, trials: list[TrialSpec] | None = None) -> list[RenderSet]:
    """Every render set of the plan, ordered by the first of `trials` (plan order) that reads it; sets no trial to run
    reads come last (the render stage still fills them, as before)."""
    planned = [RenderSet(d, p, s) for d, cells in plan.renders.items() for p, s in cells]
    known = set(planned)
    order: dict[RenderSet, None] = {}
    for t in trials if trials is not None else plan.trials:
        for rs in trial_render_sets(t):
            if rs in known:
                order.setdefault(rs, None)
    for rs in planned:
        order.setdefault(rs, None)
    return list(order)


def render_keys(plan: Plan, dataset: str, video_id: str) -> list[RenderKey]:
    ds = plan.datasets[dataset]
    return [RenderKey(dataset, ds.version, video_id, pert, sev, seed, plan.grid.runtime.num_frames,
                      plan.resolution, plan.render_assets.get((dataset, pert), ""))
            for pert, sev in plan.renders[dataset] for seed in plan.seeds]


def render_keys_of_set(plan: Plan, rs: RenderSet) -> Iterator[RenderKey]:
    """The cache keys of every clip of one render set (one per test video and seed of the grid), made as they are
    read: a check whether a set is rendered stops at its first missing clip (`plan` of the full matrix before any
    render: one key per set, not 524,051)."""
    ds = plan.datasets[rs.dataset]
    assets = plan.render_assets.get((rs.dataset, rs.perturbation), "")
    return (RenderKey(rs.dataset, ds.version, vid, rs.perturbation, rs.severity, seed,
                      plan.grid.runtime.num_frames, plan.resolution, assets)
            for seed in plan.seeds for vid in dict.fromkeys(p.video_id for p in ds.test.pairs))


def ocr_versions(plan: Plan, dataset: str) -> dict[str, str]:
    """Engine -> version of the OCR engines whose entries the dataset's render sets need (`Plan.ocr_engines`), those
    that can run here (the plan notes the others)."""
    return {e: v for e in plan.ocr_engines.get(dataset, ()) if (v := engine_version(e)) is not None}


def render_request(cache: RenderCache, key: RenderKey, ocr: dict[str, str]) -> list | None:
    """What one clip of a render set still needs, as a request of a render row: [perturbation, severity, assets
    version, seed] when its clip is not in the cache, followed by [engines, clip needed] when OCR entries of the
    `ocr` engines (name -> version) are missing; None when the cache has everything."""
    try:
        cache.probe(key)
        clip = False
    except (CacheMiss, CacheCorrupt):
        clip = True
    engines = [e for e, version in ocr.items() if not cache.ocr_path(key, version).is_file()]
    if not clip and not engines:
        return None
    request = [key.perturbation, key.severity, key.assets, key.seed]
    return request + [engines, clip] if engines else request


def plan_render_rows(plan: Plan, cache: RenderCache, video_assets: dict[str, dict[str, dict]] | None = None
                     ) -> tuple[list[dict[str, Any]], int]:
    """One row per source video with the clips (and OCR entries) of it that are not in the cache yet; returns (rows,
    reused)."""
    rows, reused = [], 0
    for ds_name in plan.renders:
        seen: set[str] = set()
        ocr = ocr_versions(plan, ds_name)
        for pair in plan.datasets[ds_name].test.pairs:
            if pair.video_id in seen:   # a video with several test captions (MSVD captions: all) renders once
                continue
            seen.add(pair.video_id)
            todo = []
            for key in render_keys(plan, ds_name, pair.video_id):
                request = render_request(cache, key, ocr)
                if request is None:
                    reused += 1
                else:
                    todo.append(request)
            if todo:
                extra = (video_assets or {}).get(ds_name, {}).get(pair.video_id, {})
                rows.append({"dataset": ds_name, "data_version": plan.datasets[ds_name].version,
                             "video_id": pair.video_id, "video_path": pair.video_path, "requests": json.dumps(todo),
                             "extra_assets": json.dumps(extra)})
    return rows, reused


def johnson_order(sets: list[RenderSet], render_seconds, trial_seconds) -> list[RenderSet]:
    """Render sets in the order that keeps both the CPUs and the GPUs busy when costs are known (Johnson's rule for a
    two-stage flow shop, rendering then trials): first the sets whose rendering is shorter than their trials, by
    rendering time ascending (the GPUs get work early), then the rest by trial time descending (short trial tails
    last). `render_seconds(set)` and `trial_seconds(set)`: each stage's time per set on its whole pool of CPUs / GPU
    slots. `submit` and benchmarks/cluster_sim.py order through `cost_ordered_sets` (the plan's cost model)."""
    a = {rs: render_seconds(rs) for rs in sets}
    b = {rs: trial_seconds(rs) for rs in sets}
    first = sorted((rs for rs in sets if a[rs] < b[rs]), key=lambda rs: a[rs])
    last = sorted((rs for rs in sets if a[rs] >= b[rs]), key=lambda rs: -b[rs])
    return first + last


def cost_ordered_sets(plan: Plan, sets: list[RenderSet], trials: list[TrialSpec], render_cpus: float,
                      trial_slots: float, costs: PlanCosts | None = None) -> list[RenderSet]:
    """`sets` in Johnson's order under the plan's cost model (orchestrator/planning/cost_model.py `PlanCosts`): a set's
    rendering is its CPU seconds over `render_cpus`, its trials the sum of the seconds the trials that read it hold
    their slots (a trial reading several sets, a mix, counts a share in each) over `trial_slots`. The clean sets stay
    first (every checkpoint's check reads them before any trial runs), and where a dataset's clip count is unknown the
    order is left as given. On the simulated full matrix this order took the makespan from 1.28x to 1.14x the lower
    bound (docs/notes/2026-11-results-history.md §11): in plan order the cheap-to-render datasets come last and leave
    a tail of trials after rendering."""

    costs = costs or PlanCosts(plan)
    if any(costs.counts.get(rs.dataset) is None for rs in sets):
        return list(sets)
    trial_s: dict[RenderSet, float] = {}
    known = set(sets)
    for t in trials:
        reads = [rs for rs in trial_render_sets(t) if rs in known]
        if not reads:
            continue
        share = costs.trial_slot_seconds(t) / len(reads)
        for rs in reads:
            trial_s[rs] = trial_s.get(rs, 0.0) + share
    ordered = johnson_order([rs for rs in sets if rs.perturbation != CLEAN],
                            lambda rs: costs.render_set_seconds(rs) / max(render_cpus, 1e-9),
                            lambda rs: trial_s.get(rs, 0.0) / max(trial_slots, 1e-9))
    return [rs for rs in sets if rs.perturbation == CLEAN] + ordered


def plan_set_rows(plan: Plan, cache: RenderCache, sets: list[RenderSet],
                  video_assets: dict[str, dict[str, dict]] | None = None
                  ) -> tuple[list[dict[str, Any]], dict[RenderSet, int], int]:
    """Rows for `sets` in their order, grouped by (dataset, perturbation) (a group starts where its first set is):
    one row per video x group with the group's clips (or their OCR entries: `Plan.ocr_engines`) not cached yet.
    Returns (rows, clips to render per set, clips reused)."""
    groups: dict[tuple[str, str], list[RenderSet]] = {}
    for rs in sets:
        groups.setdefault((rs.dataset, rs.perturbation), []).append(rs)
    rows, todo_per_set, reused = [], {rs: 0 for rs in sets}, 0
    frames, res = plan.grid.runtime.num_frames, plan.resolution
    for (d, p), group in groups.items():
        ds = plan.datasets[d]
        assets_version = plan.render_assets.get((d, p), "")
        ocr = ocr_versions(plan, d)
        for pair in ds.test.pairs:
            todo = []
            for rs in group:
                for seed in plan.seeds:   # a set is every clip at every seed of the grid
                    key = RenderKey(d, ds.version, pair.video_id, p, rs.severity, seed, frames, res, assets_version)
                    request = render_request(cache, key, ocr)
                    if request is None:
                        reused += 1
                    else:
                        todo.append(request)
                        todo_per_set[rs] += 1
            if todo:
                extra = (video_assets or {}).get(d, {}).get(pair.video_id, {})
                rows.append({"dataset": d, "data_version": ds.version, "video_id": pair.video_id,
                             "video_path": pair.video_path, "requests": json.dumps(todo),
                             "extra_assets": json.dumps(extra)})
    return rows, todo_per_set, reused


