"""Perturbation assets: which local files each (dataset, perturbation) renders with, their content versions (part of
every render key and trial key, so a changed asset never reuses stale clips), and the per-video assets some types
choose once per dataset (event insertion's distractors), computed in a Ray task and cached.

What a type reads and how it is versioned is declared on its registration (`AssetNeeds` in
`workloads.perturbations.video`); this module only resolves the grid's paths and runs the declared hooks.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads.perturbations.video import get as perturbation_info

DATASET_KEYS = ("main_objects", "distractor_pool")   # keys of `datasets.<name>.assets:` (override the grid's)


def asset_paths(grid, dataset: str) -> dict[str, str | None]:
    """Every asset path of the grid for one dataset, absolute; a dataset's own assets override the grid's."""
    import dataclasses

    out: dict[str, str | None] = {f.name: getattr(grid.assets, f.name) for f in dataclasses.fields(grid.assets)}
    for key in DATASET_KEYS:
        value = getattr(grid.datasets[dataset].assets, key)
        if value is not None or key not in out:
            out[key] = value
    return {k: str(Path(v).expanduser().resolve()) if v else None for k, v in out.items()}


def dataset_assets(grid, dataset: str) -> dict[str, Any]:
    """Assets handed to every perturbation of one dataset (absolute paths of the ones that are given). The
    distractor pool is not among them: event insertion gets its chosen distractor per video (`prepare`)."""
    return {k: v for k, v in asset_paths(grid, dataset).items() if v is not None and k != "distractor_pool"}


def asset_version(grid, dataset: str, perturbation: str, data_version: str, embedder_version: str) -> str:
    """Content version of what `perturbation` renders with on `dataset` ("" for types without assets)."""
    needs = perturbation_info(perturbation).assets
    if needs is None:
        return ""
    paths = asset_paths(grid, dataset)
    return needs.version({k: paths.get(k) for k in needs.keys}, {"data": data_version, "embedder": embedder_version})


def prepare_video_assets(plan, dataset: str, perturbation: str, embedder_path: str | None, embedder_kind: str,
                         version: str) -> dict[str, dict]:
    """Per test video of `dataset`: the assets `perturbation` prepares once per dataset (its `prepare` hook). Runs in
    a Ray task (all local CPUs, or one GPU); the result is cached under the cache's `prepared/` folder."""
    import json

    import ray

    from workloads.atomic import atomic_write_text

    cache = plan.paths.cache / "prepared" / perturbation / f"{dataset}-{version.split(':', 1)[-1]}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    needs = perturbation_info(perturbation).assets
    ds = plan.datasets[dataset]
    from orchestrator.submit import producer_share

    # runs while Ray Tune waits on the gate for these assets: at most what one trial slot leaves (producer_share)
    cpus, gpus = producer_share(plan)
    task = ray.remote(num_cpus=cpus, num_gpus=gpus)(_prepare_task)
    paths = asset_paths(plan.grid, dataset)
    result = ray.get(task.remote(perturbation, dataset, ds.root, ds.options, {k: paths.get(k) for k in needs.keys},
                                 (plan.grid.models.clip_model, embedder_path, embedder_kind),
                                 plan.grid.runtime.num_frames, "cuda" if gpus else "cpu"))
    atomic_write_text(cache, json.dumps(result))
    return result


def _prepare_task(perturbation, dataset, root, options, paths, embedder, num_frames, device) -> dict[str, dict]:
    from workloads.datasets import create_dataset

    ds = create_dataset(dataset, root=root, **options)
    return perturbation_info(perturbation).assets.prepare(ds, paths, embedder, num_frames=num_frames, device=device)
