"""Per-video perturbation assets: what a type's registration says it prepares once per dataset (event insertion:
each query video's distractor, chosen by embedding the pool's videos with CLIP), computed in a Ray task and cached
under the cache's `prepared/` folder. Which files a type reads is orchestrator/config/assets.py."""
from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console

from orchestrator.config.assets import asset_paths, dataset_assets
from orchestrator.planning.plan import Plan
from orchestrator.planning.resources import producer_share
from orchestrator.stages.cluster import current_cluster
from workloads.atomic import atomic_write_text
from workloads.datasets import create_dataset
from workloads.perturbations.video import get as perturbation_info
from workloads.spec import CLEAN


def prepare_video_assets(plan, dataset: str, perturbation: str, embedder_path: str | None, embedder_kind: str,
                         version: str) -> dict[str, dict]:
    """Per test video of `dataset`: the assets `perturbation` prepares once per dataset (its `prepare` hook). Runs in
    a Ray task (all local CPUs, or one GPU); the result is cached under the cache's `prepared/` folder."""
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it


    cache = plan.paths.cache / "prepared" / perturbation / f"{dataset}-{version.split(':', 1)[-1]}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    needs = perturbation_info(perturbation).assets
    ds = plan.datasets[dataset]

    # runs while Ray Tune waits on the gate for these assets: at most what one trial slot leaves (producer_share)
    cpus, gpus = producer_share(plan.grid.runtime, current_cluster())
    task = ray.remote(num_cpus=cpus, num_gpus=gpus)(_prepare_task)
    paths = asset_paths(plan.grid, dataset)
    result = ray.get(task.remote(perturbation, dataset, ds.root, ds.options, {k: paths.get(k) for k in needs.keys},
                                 (plan.grid.models.clip_model, embedder_path, embedder_kind),
                                 plan.grid.runtime.num_frames, "cuda" if gpus else "cpu"))
    atomic_write_text(cache, json.dumps(result))
    return result


def _prepare_task(perturbation, dataset, root, options, paths, embedder, num_frames, device) -> dict[str, dict]:
    ds = create_dataset(dataset, root=root, **options)
    return perturbation_info(perturbation).assets.prepare(ds, paths, embedder, num_frames=num_frames, device=device)


def prepare_assets(plan: Plan, checkpoints: dict[str, dict[str, Any]], console: Console
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, dict]]]:
    """Per-dataset perturbation assets, and per-video ones: what a perturbation's registration says it prepares
    once per dataset (event insertion: each query video's distractor, chosen by embedding pool videos with CLIP)."""

    assets = {name: dataset_assets(plan.grid, name) for name in plan.renders}
    video_assets: dict[str, dict[str, dict]] = {}
    for name, cells in plan.renders.items():
        for pert in dict.fromkeys(p for p, _ in cells):
            needs = perturbation_info(pert).assets if pert != CLEAN else None
            if needs is None or needs.prepare is None:
                continue
            embedder, _, kind = plan.embedders[name]
            weights = plan.grid.models.pretrained if embedder is None else checkpoints[embedder.name]["path"]
            t0 = time.time()
            chosen = prepare_video_assets(plan, name, pert, weights, kind, plan.render_assets[(name, pert)])
            for video_id, extra in chosen.items():
                video_assets.setdefault(name, {}).setdefault(video_id, {}).update(extra)
            console.print(f"{pert} assets for {name}: {len(chosen)} videos prepared ({time.time() - t0:.0f}s)")
    return assets, video_assets


def prepares_assets(perturbation: str) -> bool:
    """Whether a perturbation's per-video assets are chosen with a checkpoint (event insertion's distractors)."""

    if perturbation == CLEAN:
        return False
    needs = perturbation_info(perturbation).assets
    return needs is not None and needs.prepare is not None


