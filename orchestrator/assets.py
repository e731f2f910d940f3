"""Perturbation assets: which local files each (dataset, perturbation) renders with, their content versions (part of
every render key and trial key, so a changed asset never reuses stale clips), and the event-insertion distractor
choice, computed once per dataset in a Ray task and cached."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from workloads.seeding import digest, file_digest

ASSET_USERS = ("main_object_occlusion", "style_transfer", "event_insertion")


def _listing_version(path: str) -> str:
    """Cheap content version of a folder (names, sizes, mtimes) or a file (its digest)."""
    p = Path(path).expanduser()
    if p.is_file():
        return file_digest(p)
    items = sorted((str(f.relative_to(p)), f.stat().st_size, int(f.stat().st_mtime))
                   for f in p.rglob("*") if f.is_file())
    return digest(items)


def dataset_assets(grid, dataset: str) -> dict[str, Any]:
    """Assets handed to the perturbations of one dataset (absolute paths)."""
    a, d = grid.assets, grid.datasets[dataset].assets
    out: dict[str, Any] = {}
    for key in ("adain_vgg", "adain_decoder", "style_images"):
        if getattr(a, key):
            out[key] = str(Path(getattr(a, key)).expanduser().resolve())
    if d.main_objects:
        out["main_objects"] = str(Path(d.main_objects).expanduser().resolve())
    return out


def distractor_pool(grid, dataset: str) -> str | None:
    pool = grid.datasets[dataset].assets.distractor_pool or grid.assets.distractor_pool
    return str(Path(pool).expanduser().resolve()) if pool else None


def asset_version(grid, dataset: str, perturbation: str, data_version: str, embedder_version: str) -> str:
    """Content version of what `perturbation` renders with on `dataset` ("" for types without assets)."""
    if perturbation not in ASSET_USERS:
        return ""
    a, d = grid.assets, grid.datasets[dataset].assets
    if perturbation == "main_object_occlusion":
        return "boxes:" + file_digest(d.main_objects) if d.main_objects else "builtin"
    if perturbation == "style_transfer":
        if not a.adain_vgg:
            return "proxy:" + (_listing_version(a.style_images) if a.style_images else "builtin")
        return "adain:" + digest([file_digest(a.adain_vgg), file_digest(a.adain_decoder),
                                  _listing_version(a.style_images) if a.style_images else "builtin"])
    pool = distractor_pool(grid, dataset)
    return "distractors:" + digest([_listing_version(pool) if pool else f"train:{data_version}",
                                    file_digest(d.main_objects) if d.main_objects else "query-video",
                                    embedder_version])


def choose_distractors(plan, dataset: str, embedder_path: str, embedder_kind: str, version: str) -> dict[str, dict]:
    """Per test video of `dataset`: the distractor video and how it was chosen. Runs the embedding in a Ray task
    (all local CPUs, or one GPU); the result is cached under the cache's distractors/ folder."""
    import ray

    cache = plan.paths.cache / "distractors" / f"{dataset}-{version.split(':', 1)[-1]}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    ds = plan.datasets[dataset]
    pool = distractor_pool(plan.grid, dataset)
    gpus = 1 if plan.grid.runtime.gpus_per_trial > 0 else 0
    cpus = 1 if gpus else max(1, int(ray.available_resources().get("CPU", 1)))
    task = ray.remote(num_cpus=cpus, num_gpus=gpus)(_choose_task)
    boxes = plan.grid.datasets[dataset].assets.main_objects
    result = ray.get(task.remote(dataset, ds.root, ds.options, pool, boxes, plan.grid.models.clip_model,
                                 embedder_path, embedder_kind, plan.grid.runtime.num_frames, bool(gpus)))
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, cache)
    return result


def _choose_task(dataset, root, options, pool_folder, boxes_path, clip_model, embedder_path, embedder_kind,
                 num_frames, use_gpu) -> dict[str, dict]:
    from workloads.backbones import create_backbone
    from workloads.datasets import create_dataset
    from workloads.distractors import DistractorSource, choose_all, embed_captions, embed_pool
    from workloads.perturbations.video.event_insertion import list_pool
    from workloads.perturbations.video.main_object_occlusion import load_main_objects

    ds = create_dataset(dataset, root=root, **options)
    test = ds.test_split()
    if pool_folder:
        pool_paths, pool_kind = list_pool(pool_folder), "folder"
    else:
        pool_paths, pool_kind = sorted({p.video_path for p in ds.train_split().pairs}), "train_split"
    vlm = None
    if boxes_path:
        entries = load_main_objects(boxes_path)
        vlm = [(entries.get(p.video_id) or {}).get("video_caption") for p in test.pairs]
    device = "cuda" if use_gpu else "cpu"
    model = create_backbone("clip4clip", clip_model, pretrained=embedder_path, clip_only=True, device=device)
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
