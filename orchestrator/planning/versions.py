"""Content versions that key the cache and the trials, computed without running anything: a weights file's, what a
video perturbation renders with on a dataset (`asset_version`), what makes a text set (`text_assets_version`).
A changed asset, model or data version changes every key that depends on it, so nothing stale is reused."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from orchestrator.config.assets import asset_paths, text_assets
from orchestrator.planning.keys import CheckpointKey
from workloads.perturbations.text import _wordnet
from workloads.perturbations.video import get as perturbation_info
from workloads.seeding import digest, file_digest
from workloads.text_queries import TEXT_SET_VERSION, TextSetKey


def file_version(path: str) -> str:
    """Content key of a weights file, or of a Hugging Face / open_clip folder (its weights file and config)."""
    p = Path(path).expanduser()
    if not p.exists():   # only when sizing without the data (a run's grid has every path checked): a stand-in
        return f"missing:{path}"
    if p.is_dir():
        from workloads.backbones.convert import _folder_weights   # imports torch (seconds): only when weights are read

        _, weights, config = _folder_weights(p)
        return "file:" + digest([file_digest(weights), file_digest(config) if config else None])
    return "file:" + file_digest(p)


def asset_version(grid, dataset: str, perturbation: str, data_version: str, embedder_version: str) -> str:
    """Content version of what `perturbation` renders with on `dataset` ("" for types without assets)."""
    needs = perturbation_info(perturbation).assets
    if needs is None:
        return ""
    paths = asset_paths(grid, dataset)
    return needs.version({k: paths.get(k) for k in needs.keys}, {"data": data_version, "embedder": embedder_version})


def fingerprint(path: str) -> str:
    """A cheap content fingerprint of an asset path: a file's digest, a folder's file names and sizes."""
    p = Path(path).expanduser()
    h = hashlib.sha256(str(p.resolve()).encode())
    if p.is_file():
        return file_digest(str(p))
    if p.is_dir():
        for f in sorted(p.rglob("*")):
            if f.is_file():
                h.update(f"{f.relative_to(p)}:{f.stat().st_size};".encode())
    return h.hexdigest()[:16]


def text_assets_version(grid, dataset: str, perturbation: str, stand_in_model: str | None) -> str:
    """Version string of what makes a text set (a TrialSpec's render_assets for a t2v cell)."""
    # the installed version, read without importing nlpaug (it imports torch: seconds in `plan`); the same string
    parts: dict[str, Any] = {"text_set": TEXT_SET_VERSION, "nlpaug": version("nlpaug")}
    for k, v in sorted(text_assets(grid, dataset, perturbation).items()):
        paths = v if isinstance(v, list) else [v]
        parts[k] = [fingerprint(str(p)) for p in paths]
    if "wordnet" not in parts:
        located = _wordnet.locate(None)
        parts["wordnet"] = fingerprint(located) if located else None
    if stand_in_model is not None:
        parts["stand_in_encoder"] = stand_in_model
    return "text:" + digest(parts, length=16)


@dataclass
class TextSetJob:
    key: TextSetKey
    stand_in: CheckpointKey | None = None     # the model whose text tower stands in


