"""Choosing event-insertion distractors (docs/faithfulness.md: Event insertion).

The reference embeds a pool of 2K MSRVTT-train videos with zero-shot CLIP (12 uniform frames, mean of UNnormalised
frame embeddings), embeds each query's VLM caption (unnormalised text features), and inserts the pool video with the
largest raw dot product: a hard distractor, similar to what the query video shows. We do the same with whatever is
available and record every substitution:
- pool: a user folder, else the dataset's own train split;
- query side: the VLM caption from the main-objects JSON (`video_caption`), else the query VIDEO's own embedding
  (same pooling as the pool videos). Never the ground-truth caption: that is the retrieval target, and choosing the
  perturbation with it leaks the answer into the query (measured on the synthetic data: with ground-truth captions
  the "distractor" shared the caption's background and objects and event insertion RAISED R@1 over clean);
- embedder: zero-shot CLIP weights from the grid (`models.pretrained`), else the run's fine-tuned model.
The choice is made once per (dataset, query video) and shared by every trial, like the rendered clip itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workloads.distractor_pool import choose_distractor, list_pool
from workloads.video_io import read_frames, resize_center_crop


@dataclass(frozen=True)
class DistractorSource:
    pool: str          # "folder" | "train_split"
    caption: str       # "vlm" (VLM caption of the query video) | "query_video" (the query video's embedding)
    embedder: str      # "zero_shot_clip" | "finetuned"

    @property
    def faithful(self) -> bool:
        return (self.pool, self.caption, self.embedder) == ("folder", "vlm", "zero_shot_clip")

    def describe(self) -> str:
        return f"pool={self.pool}, caption={self.caption}, embedder={self.embedder}"


@torch.no_grad()
def embed_pool(model, paths: list[str], num_frames: int = 12, batch: int = 32) -> tuple[np.ndarray, list[str]]:
    """Mean of unnormalised frame features of each pool video; pool videos that cannot be decoded are skipped
    (returned as the second value) rather than failing the selection."""
    feats, bad, chunk, rows = [], [], [], []

    def flush():
        if chunk:
            x = model.preprocess_frames(torch.from_numpy(np.stack(chunk)))
            feats.append(model.encode_frames(x).mean(1).float().cpu().numpy())
            chunk.clear()

    for i, p in enumerate(paths):
        try:
            chunk.append(resize_center_crop(read_frames(p, num_frames), model.image_size))
            rows.append(i)
        except Exception:
            bad.append(p)
        if len(chunk) == batch:
            flush()
    flush()
    emb = np.full((len(paths), feats[0].shape[1] if feats else 1), -np.inf, dtype=np.float32)
    if feats:
        emb[rows] = np.concatenate(feats)
    return emb, bad


@torch.no_grad()
def embed_captions(model, captions: list[str], batch: int = 128) -> np.ndarray:
    out = [model.encode_text(model.tokenize(captions[i:i + batch])).float().cpu().numpy()
           for i in range(0, len(captions), batch)]
    return np.concatenate(out)


def choose_all(pool_emb: np.ndarray, caption_emb: np.ndarray, pool_paths: list[str],
               query_paths: list[str]) -> list[int | None]:
    """Index into the pool of each query's distractor (never the query's own video); None for a query whose own
    embedding is not finite (its video could not be decoded: its clips fail at render time anyway)."""
    where = {p: i for i, p in enumerate(pool_paths)}
    usable = np.isfinite(pool_emb).all(1)
    if not usable.any():
        raise ValueError("no pool video could be decoded")
    masked = np.where(usable[:, None], pool_emb, 0.0)
    unusable = np.flatnonzero(~usable).tolist()
    return [choose_distractor(cap, masked, exclude=unusable + ([where[path]] if path in where else []))
            if np.isfinite(cap).all() else None
            for cap, path in zip(caption_emb, query_paths)]


def prepare_distractors(dataset, paths, embedder: tuple[str, str | None, str], num_frames: int = 12,
                        device: str = "cpu") -> dict[str, dict]:
    """Per test video of `dataset` (a VideoTextDataset): the distractor video and how it was chosen. `paths`: the
    resolved asset paths (`distractor_pool`, `main_objects`; None when absent); `embedder`: (open_clip model name,
    weights path, "zero_shot_clip" | "finetuned")."""
    from workloads.backbones import create_backbone
    from workloads.perturbations.video.main_object_occlusion import load_main_objects

    test = dataset.test_split()
    pool_folder, boxes_path = paths.get("distractor_pool"), paths.get("main_objects")
    if pool_folder:
        pool_paths, pool_kind = list_pool(pool_folder), "folder"
    else:
        pool_paths, pool_kind = sorted({p.video_path for p in dataset.train_split().pairs}), "train_split"
    vlm = None
    if boxes_path:
        entries = load_main_objects(boxes_path)
        vlm = [(entries.get(p.video_id) or {}).get("video_caption") for p in test.pairs]
    clip_model, weights, embedder_kind = embedder
    model = create_backbone("clip4clip", clip_model, pretrained=weights, clip_only=True, device=device)
    pool_emb, unreadable = embed_pool(model, pool_paths, num_frames)
    if vlm and all(vlm):
        query_emb, caption_kind = embed_captions(model, vlm), "vlm"
    else:  # label-free: what the query video itself shows (never its ground-truth caption, the retrieval target)
        query_emb, _ = embed_pool(model, [p.video_path for p in test.pairs], num_frames)
        caption_kind = "query_video"
    source = DistractorSource(pool_kind, caption_kind, embedder_kind)
    chosen = choose_all(pool_emb, query_emb, pool_paths, [p.video_path for p in test.pairs])
    return {p.video_id: {"event_distractor": pool_paths[i], "event_distractor_source": source.describe(),
                         "event_distractor_faithful": source.faithful, "pool_size": len(pool_paths),
                         "pool_unreadable": len(unreadable)}
            for p, i in zip(test.pairs, chosen) if i is not None}
