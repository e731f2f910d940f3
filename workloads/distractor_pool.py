"""The distractor pool of event insertion (docs/faithfulness.md: Event insertion): listing a pool folder and choosing
the pool video a caption embedding is closest to. Light (numpy only), so that both the perturbation
(workloads/perturbations/video/event_insertion.py) and the distractor preparation that embeds the pool with a backbone
(workloads/distractors.py) import it, and neither imports the other's module at load.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from workloads.perturbations.video._registry import find_files

POOL_EXTENSIONS = (".mp4", ".avi")


def list_pool(folder: str | os.PathLike) -> list[str]:
    """Every .mp4/.avi under `folder` (recursive, case-insensitive extension), as sorted absolute paths."""
    return list(_list_pool_cached(str(folder)))


@functools.lru_cache(maxsize=8)
def _list_pool_cached(folder: str) -> tuple[str, ...]:
    p = Path(folder)
    if not p.is_dir():
        raise FileNotFoundError(f"distractor pool folder not found (asset distractor_pool): {folder}")
    found = find_files(folder, POOL_EXTENSIONS)
    if not found:
        raise ValueError(f"no .mp4/.avi videos under distractor pool {folder}")
    return found


def pool_paths(pool: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    if isinstance(pool, (str, os.PathLike)):
        return list_pool(pool)
    paths = [os.path.abspath(str(p)) for p in pool]
    if not paths:
        raise ValueError("asset distractor_pool is an empty list")
    return paths


def choose_distractor(caption_embedding, pool_embeddings, exclude: int | Iterable[int] | None = None) -> int:
    """Index of the pool video whose embedding has the largest raw dot product with the caption embedding (no
    normalisation, first index on ties, as the reference's np.argmax). `exclude`: index or indices never chosen."""
    emb, cap = np.asarray(pool_embeddings), np.asarray(caption_embedding)
    dtype = np.result_type(emb.dtype, cap.dtype, np.float32)  # float32 inputs stay float32, as the reference
    emb, cap = emb.astype(dtype, copy=False), cap.astype(dtype, copy=False).reshape(-1)
    if emb.ndim != 2 or emb.shape[1] != cap.shape[0]:
        raise ValueError(f"pool embeddings {emb.shape} do not match caption embedding dimension {cap.shape}")
    sims = (emb @ cap).astype(np.float64)
    if exclude is not None:
        ex = [exclude] if isinstance(exclude, (int, np.integer)) else list(exclude)
        sims[np.asarray(ex, dtype=np.int64)] = -np.inf
    if not np.isfinite(sims).any():
        raise ValueError("every pool video is excluded (or has a non-finite similarity)")
    sims[np.isnan(sims)] = -np.inf
    return int(np.argmax(sims))
