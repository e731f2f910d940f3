"""Which local asset files a grid gives each (dataset, perturbation): the video types' paths (a dataset's own assets
override the grid's) and the text types' keyword arguments, and whether a text type can run with them. Pure
functions of a validated grid; the versions that key renders on them are in orchestrator/planning/versions.py."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from workloads.perturbations.text import availability, get

DATASET_KEYS = ("main_objects", "distractor_pool")   # keys of `datasets.<name>.assets:` (override the grid's)


def asset_paths(grid, dataset: str) -> dict[str, str | None]:
    """Every asset path of the grid for one dataset, absolute; a dataset's own assets override the grid's."""
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


def text_assets(grid, dataset: str, perturbation: str) -> dict[str, Any]:
    """The assets keyword arguments of workloads.perturbations.text for one (dataset, type) of a grid (without the
    stand-in encoder, which the render stage adds)."""
    a = grid.assets
    out: dict[str, Any] = {}
    pre = grid.datasets[dataset].assets.text_precomputed.get(perturbation) if dataset in grid.datasets else None
    if pre:
        out["precomputed"] = pre
    given = {"wordnet": a.wordnet, "sentence_encoder": a.sentence_encoder,
             "back_translation_models": a.back_translation_models, "styleformer_models": a.styleformer_models}
    for k in get(perturbation).asset_keys:
        if given.get(k) is not None:
            out[k] = list(given[k]) if isinstance(given[k], list) else given[k]
    return out


def unavailable_reason(grid, dataset: str, perturbation: str) -> str | None:
    """Why a text type cannot run on this dataset with this grid's assets (None: it can)."""
    ok, reason = availability(perturbation, **text_assets(grid, dataset, perturbation))
    return None if ok else reason


def needs_stand_in(grid, dataset: str, perturbation: str) -> bool:
    """The type retries on similarity and the grid gives no sentence encoder (nor precomputed texts): the backbone's
    text encoder stands in, so the set depends on the model."""
    assets = text_assets(grid, dataset, perturbation)
    return get(perturbation).similarity_retry and "sentence_encoder" not in assets and "precomputed" not in assets


