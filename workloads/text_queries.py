"""Perturbed text queries for t2v query shift: a split's captions rendered once per (dataset, type, severity, seed,
assets) into a small JSON file beside the video render cache, read by every t2v trial of that cell.

A text set is the whole test split's captions in annotation order, with a faithful flag per caption and the fallback
counts (workloads/perturbations/text/_engine.py). Its key holds everything that decides the texts: the data version,
the grid seed and `assets`, a version string naming what made them (asset files, the similarity-retry encoder).

The similarity retry of the word- and sentence-level types needs a sentence encoder (the authors use
paraphrase-mpnet-base-v2). When the grid gives none, the retrieval backbone's own text encoder stands in for it
(`BackboneTextEncoder`): the retry still rejects edits that move the caption far in embedding space, but its captions
are flagged `faithful: false`, and the set depends on the backbone, so its assets version names the model.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from workloads.atomic import atomic_path
from workloads.perturbations.text import PerturbedCaptions
from workloads.seeding import digest
from workloads.spec import cell_label

TEXT_SET_VERSION = 1      # bump when the file layout or the way texts are made changes
SUBDIR = "_text"          # under the render cache root (no dataset is named so)


@dataclass(frozen=True)
class TextSetKey:
    dataset: str
    data_version: str
    perturbation: str
    severity: int
    seed: int
    assets: str               # version of the assets and encoder the texts were made with

    def path(self, cache_root: str | os.PathLike) -> Path:
        tag = digest({**asdict(self), "version": TEXT_SET_VERSION}, length=16)
        return Path(cache_root) / SUBDIR / self.dataset / f"{cell_label(self.perturbation, self.severity)}-{tag}.json"


@dataclass
class TextSet(PerturbedCaptions):
    """A split's perturbed captions (PerturbedCaptions) with the video ids they belong to, as stored."""
    video_ids: list[str] = field(default_factory=list)

    @property
    def faithful_share(self) -> float:
        return float(np.mean(self.faithful)) if self.faithful else 1.0


class TextSetMissing(FileNotFoundError):
    pass


def write_text_set(key: TextSetKey, cache_root: str | os.PathLike, text_set: TextSet) -> Path:
    path = key.path(cache_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps({"key": asdict(key), **asdict(text_set)}, ensure_ascii=False))
    return path


def read_text_set(key: TextSetKey, cache_root: str | os.PathLike, n_captions: int | None = None) -> TextSet:
    path = key.path(cache_root)
    if not path.is_file():
        raise TextSetMissing(f"perturbed captions {cell_label(key.perturbation, key.severity)} of {key.dataset} not "
                             f"rendered ({path}); re-submit the grid to render them")
    try:
        data = json.loads(path.read_text())
        if data["key"] != asdict(key):
            raise ValueError("key mismatch")
        out = TextSet(data["texts"], data["faithful"], data["fallbacks"], data["meta"], data["video_ids"])
    except (ValueError, KeyError, TypeError) as err:
        path.unlink(missing_ok=True)
        raise TextSetMissing(f"perturbed captions file {path} unreadable ({err}); removed, re-submit to re-render it")
    if n_captions is not None and len(out.texts) != n_captions:
        raise TextSetMissing(f"{path} holds {len(out.texts)} captions, the split has {n_captions}")
    return out


class BackboneTextEncoder:
    """The retrieval model's text tower as the similarity-retry encoder (a flagged stand-in, see the module doc)."""

    faithful = False

    def __init__(self, backbone: str, clip_model: str, checkpoint: str | None, clip_only: bool = False,
                 batch_size: int = 256):
        from workloads.backbones import create_backbone

        self.model = create_backbone(backbone, clip_model, pretrained=checkpoint, clip_only=clip_only).eval()
        self.batch_size = batch_size
        self._describe = {"kind": "retrieval backbone text encoder (stand-in)", "backbone": backbone,
                          "clip_model": clip_model, "checkpoint": checkpoint, "faithful": False}

    def describe(self) -> dict[str, Any]:
        return dict(self._describe)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        rows = []
        with torch.inference_mode():
            for s in range(0, len(texts), self.batch_size):
                feats = self.model.encode_text(self.model.tokenize(list(texts[s:s + self.batch_size]))).float()
                rows.append(torch.nn.functional.normalize(feats, dim=-1).numpy())
        return np.concatenate(rows) if rows else np.zeros((0, 1), dtype=np.float32)


def render_text_set(key: TextSetKey, cache_root: str | os.PathLike, captions: Sequence[str],
                    video_ids: Sequence[str], assets: dict[str, Any], stand_in: dict[str, Any] | None = None
                    ) -> TextSet:
    """Perturb every caption of a split (or import the asset `precomputed`) and write the set; `stand_in` builds a
    BackboneTextEncoder (its keyword arguments) when the type retries on similarity and no encoder is given."""
    from workloads.perturbations.text import get, perturb_captions

    assets = dict(assets)
    if stand_in is not None and get(key.perturbation).similarity_retry and assets.get("sentence_encoder") is None \
            and assets.get("precomputed") is None:
        assets["sentence_encoder"] = BackboneTextEncoder(**stand_in)
    out = perturb_captions(key.perturbation, captions, key.severity, dataset=key.dataset, seed=key.seed,
                           video_ids=list(video_ids), **assets)
    text_set = TextSet(list(out.texts), [bool(f) for f in out.faithful], dict(out.fallbacks),
                       json.loads(json.dumps(out.meta, default=str)), list(video_ids))
    write_text_set(key, cache_root, text_set)
    return text_set
