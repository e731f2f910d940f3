"""One trial, end to end, without Ray or MLflow: `run(spec, context) -> TrialResult`.

    dataset test split -> model (fine-tuned checkpoint) -> gallery features (encoded once, cached on disk)
    -> query stream (rendered clips from the render cache, or captions) -> online TTA -> scores -> metrics

Every trial also reports TCR's embedding diagnostics (workloads/metrics.py `embedding_diagnostics`,
docs/faithfulness.md: Diagnostics): the uniformity of the query embeddings and their modality gap to the gallery on
the clean queries, on the shifted queries before adaptation (both from the unadapted model, cached on disk beside
the galleries: the clean ones are the other direction's gallery, the shifted ones are shared by every method of a
cell) and on the queries as the method scored them. A method that learns from the source domain (TITAN) is given
encoded pairs of the dataset's train split (cached likewise) or told why there are none.

Beside R@1 a trial records each query's share of R@1 (`query_R1`, in test-split order: the tables bootstrap
intervals from it) and label-free signals for choosing hyperparameters without test labels (workloads/selection.py):
prediction entropy, soft neighbourhood density, and with `spec.source_pairs` R@1 on clean source train pairs after
adapting. `spec.stream_order` "shuffled" permutes the query stream by the trial's seed.

The stream follows the spec's protocol (workloads/protocols, docs/protocols.md): the default, reset_each_shift, is
the stream above; others reset, reorder, skip adaptation or span several (perturbation, severity) segments, and the
result records the protocol, each segment's metrics and the running R@1 along the stream.

A query clip missing from the render cache (its video failed to decode or perturb) is dropped from the stream and
listed in the result: a corrupt video fails that video, not the trial. In t2v a failed gallery video also drops
the caption that points at it.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import platform
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from workloads import CODE_VERSION, RENDER_VERSION, TRIAL_VERSION
from workloads.atomic import atomic_path
from workloads.backbones import create_backbone
from workloads.backbones.model import Features, VideoTextModel
from workloads.datasets import create_dataset
from workloads.datasets.base import DatasetError, Split
from workloads.methods import METHODS, Gallery, NonFiniteError, QueryBatch, SourceFeatures, create_method, run_stream
from workloads.protocols import StreamSetup, check_batch_size, create_protocol, method_cost
from workloads.read_ahead import Waited, read_ahead
from workloads.metrics import embedding_diagnostics, k_occurrence, recall_hits, summarise, tie_rule
from workloads.selection import prediction_entropy, soft_neighbourhood_density, source_accuracy
from workloads.render_cache import CacheCorrupt, CacheMiss, RenderCache, RenderKey
from workloads.seeding import digest, rng_for
from workloads.spec import CLEAN, TrialResult, TrialSpec, cell_label
from workloads.text_queries import TextSetKey, read_text_set
from workloads.versions import software_versions
from workloads.video_io import VideoDecodeError, read_frames, resize_center_crop


@dataclass
class TrialContext:
    """Where a trial finds things; not part of the trial key."""

    render_cache: str
    checkpoint: str | None                  # mlvp checkpoint or CLIP weights; None = random init
    clip_only: bool = False                 # take only the CLIP weights (zero-shot: the head starts at its init)
    dataset_root: str | None = None
    dataset_options: dict[str, Any] = field(default_factory=dict)
    # the checkpoint's source dataset (cross-dataset cells): where a method learning from the source's train split
    # (TITAN) finds it; None where the source is the target itself or not on this machine
    source_root: str | None = None
    source_options: dict[str, Any] = field(default_factory=dict)
    gallery_cache: str | None = None        # where encoded galleries are kept (None: not cached)
    scores_dir: str | None = None           # save the final score matrix (fp16 .npy) here when given
    device: str = "cpu"
    threads: int | None = None              # torch intra-op threads (None: leave as is)
    # batches of clips read behind the one being computed (workloads/read_ahead.py; 0: read each when needed). The
    # values are the same either way; on a GPU it keeps the device from waiting for the render cache
    read_ahead: int = 2


def _base_model(backbone: str, clip_model: str, checkpoint: str | None, clip_only: bool,
                options: str = "") -> VideoTextModel:
    """The process's base model; trials get deep copies (adaptation mutates LayerNorms). `options`: the backbone's
    (TrialSpec.backbone_options), over those a fine-tuned checkpoint of it records."""
    return _cached_base_model(backbone, clip_model, checkpoint, clip_only, options or "")


@functools.lru_cache(maxsize=2)
def _cached_base_model(backbone: str, clip_model: str, checkpoint: str | None, clip_only: bool,
                       options: str) -> VideoTextModel:
    # built once per process, one entry whichever way a caller spells the arguments
    return create_backbone(backbone, clip_model, pretrained=checkpoint, clip_only=clip_only,
                           **json.loads(options or "{}"))


def load_model(spec: TrialSpec, ctx: TrialContext) -> VideoTextModel:
    """A fresh copy of the process's base model: weights and buffers copied, the tokenizer shared. Adaptation
    never touches the tokenizer, and copying open_clip's (its BPE tables, ~10^6 dict entries) was most of the
    copy: 0.15 s of every trial against 0.01 s (docs/notes/2026-11-results-history.md §15)."""
    base = _base_model(spec.backbone, spec.clip_model, ctx.checkpoint, ctx.clip_only, spec.backbone_options)
    return copy.deepcopy(base, {id(base.tokenizer): base.tokenizer}).to(ctx.device).eval()


def render_key(spec: TrialSpec, video_id: str, perturbation: str | None = None, severity: int | None = None
               ) -> RenderKey:
    """The render cache key of one query clip of this trial (its own perturbation unless another is given)."""
    perturbation = spec.perturbation if perturbation is None else perturbation
    return RenderKey(dataset=spec.dataset, data_version=spec.data_version, video_id=video_id,
                     perturbation=perturbation, severity=spec.severity if severity is None else severity,
                     seed=spec.seed, num_frames=spec.num_frames, resolution=spec.resolution,
                     assets=spec.assets_for(perturbation))


def query_cells(spec: TrialSpec, n_queries: int) -> list[tuple[str, int]]:
    """(perturbation, severity) of each query in stream order: the trial's own cell, or each query's draw of a
    mixed shift (workloads/mixing.py)."""
    if spec.mix:
        from workloads.mixing import Mix

        return Mix.from_json(spec.mix).draws(spec.dataset, n_queries, spec.seed)
    return [(spec.perturbation, spec.severity)] * n_queries


def video_groups(test: Split) -> tuple[list[int], np.ndarray]:
    """The split's videos: the first pair of each video in split order, and each pair's video number (its index
    in that list). One caption per video gives (all pairs, 0..n-1); MSVD `captions: all` repeats a video once per
    caption (docs/faithfulness.md: Datasets)."""
    first: dict[str, int] = {}
    groups = np.empty(len(test), dtype=np.int64)
    for i, pair in enumerate(test.pairs):
        groups[i] = first.setdefault(pair.video_id, len(first))
    rows = [0] * len(first)
    for i in range(len(test) - 1, -1, -1):
        rows[groups[i]] = i
    return rows, groups


def _load_clips(spec: TrialSpec, cache: RenderCache, test: Split, cells: list[tuple[str, int]],
                rows: list[int] | None = None) -> tuple[list[int], list[dict], list[dict]]:
    """Which pairs (of `rows`, default all) have their clip (at the row's cell) in the cache; the others with the
    reason they are dropped; metas of the good ones. Only the small meta member is read here (`probe`); frames are
    read and checksummed batch by batch later."""
    ok, dropped, metas = [], [], []
    for i in range(len(test)) if rows is None else rows:
        pair, (perturbation, severity) = test.pairs[i], cells[i]
        key = render_key(spec, pair.video_id, perturbation, severity)
        try:
            meta = cache.probe(key)
            ok.append(i)
            metas.append(meta)
        except (CacheMiss, CacheCorrupt) as err:
            fail = cache.failure(key)
            reason = fail["error"].splitlines()[0] if fail else f"{type(err).__name__}: not rendered"
            dropped.append({"video_id": pair.video_id, "reason": reason})
    return ok, dropped, metas


def read_clip_batch(cache: RenderCache, keys: list[RenderKey], ocr_engine: str | None = None, pin: bool = False
                    ) -> tuple[torch.Tensor, dict | None]:
    """The clips of `keys` from the render cache as one uint8 tensor [B, T, H, W, 3] (checksums verified), in pinned
    memory with `pin` (its copy to a GPU then does not wait for the host), and with `ocr_engine` their OCR entries."""
    clips = [_read_clip(cache, key) for key in keys]
    # stacked straight into the (pinned) batch: no second copy of it
    frames = torch.empty((len(clips), *clips[0].shape), dtype=torch.uint8, pin_memory=pin)
    np.stack(clips, out=frames.numpy())
    side = None
    if ocr_engine is not None:
        from workloads.ocr import get_engine

        version = get_engine(ocr_engine).version()
        side = {"ocr": [cache.read_ocr(key, version) for key in keys]}
    return frames, side


def _clip_batches(spec: TrialSpec, model: VideoTextModel, cache: RenderCache, test: Split, rows: list[int],
                  cells: list[tuple[str, int]], ahead: int = 0):
    """Yield QueryBatches of preprocessed clips (row i at cells[i]), holding only the batch in use and the `ahead`
    batches being read behind it (workloads/read_ahead.py), with the clips' side inputs where the backbone reads some
    (their OCR entries: workloads/ocr.py)."""
    ocr_engine = model.pooling.ocr_engine if "ocr" in model.video_inputs else None
    pin = model.pixel_mean.device.type == "cuda"

    def read(start: int):
        keys = [render_key(spec, test.pairs[i].video_id, *cells[i]) for i in rows[start:start + spec.batch_size]]
        return read_clip_batch(cache, keys, ocr_engine, pin)

    for b, (frames, side) in enumerate(read_ahead(read, range(0, len(rows), spec.batch_size), ahead)):
        yield QueryBatch(b, model.preprocess_frames(frames), side=side)


def _item_clip_batches(spec: TrialSpec, model: VideoTextModel, cache: RenderCache, test: Split,
                       batches: list[list[tuple[int, tuple[str, int]]]], ahead: int = 0):
    """Yield the QueryBatches of a protocol's plan: batch b holds the clips `batches[b]` ((row, cell) each), read
    `ahead` batches behind the one being computed, as `_clip_batches` reads a plain stream."""
    ocr_engine = model.pooling.ocr_engine if "ocr" in model.video_inputs else None
    pin = model.pixel_mean.device.type == "cuda"

    def read(b: int):
        keys = [render_key(spec, test.pairs[row].video_id, *cell) for row, cell in batches[b]]
        return read_clip_batch(cache, keys, ocr_engine, pin)

    for b, (frames, side) in enumerate(read_ahead(read, range(len(batches)), ahead)):
        yield QueryBatch(b, model.preprocess_frames(frames), side=side)


def ensure_side_inputs(spec: TrialSpec, model: VideoTextModel, cache: RenderCache, test: Split, rows: list[int],
                       cells: list[tuple[str, int]]) -> None:
    """Read what the backbone's video side needs besides frames for these clips, where the render stage has not:
    the OCR entries of an OCR backbone (workloads/ocr.py `ensure_ocr`: once per clip and cell, shared by every
    trial through the render cache). A fallback: the render stage writes the entries of every engine the grid's
    backbones read (orchestrator/planning/render_sets.py), so in a submission this finds them all and reads
    nothing; it runs OCR for a cache filled without them (a trial run outside a grid, an engine that could not run
    in the render workers: then it fails with why). TCD with `ocr: false` reads none."""
    if "ocr" not in model.video_inputs:
        return
    from workloads.ocr import ensure_ocr, get_engine

    engine = get_engine(model.pooling.ocr_engine)
    version = engine.version()   # read once: tesseract's asks its binary
    items = []
    for i in rows:
        key = render_key(spec, test.pairs[i].video_id, *cells[i])
        if key.assets and not cache.ocr_path(key, version).is_file():
            raise RuntimeError(f"OCR of {key.video_id} at {key.perturbation}-{key.severity}, rendered with assets "
                               f"({key.assets}), is not in the render cache: it must come from the render stage "
                               "(render_video(..., ocr=engine)); a trial re-renders only asset-free cells")
        items.append((key, test.pairs[i].video_path))
    ensure_ocr(cache, items, engine)


def _text_queries(spec: TrialSpec, test: Split, ctx: TrialContext
                  ) -> tuple[list[str], list[bool] | None, list[str]]:
    """The t2v query captions in split order (perturbed ones from their text sets, workloads/text_queries.py), with
    per-caption faithful flags (None for clean queries) and the fallbacks used."""
    captions = [p.caption for p in test.pairs]
    if spec.perturbation == CLEAN and not spec.mix:
        return captions, None, []
    cells = query_cells(spec, len(test))
    faithful = [True] * len(test)
    fallbacks: set[str] = set()
    sets = {}
    for i, (pert, sev) in enumerate(cells):
        if pert == CLEAN:
            continue
        if (pert, sev) not in sets:
            key = TextSetKey(spec.dataset, spec.data_version, pert, sev, spec.seed, spec.assets_for(pert))
            sets[(pert, sev)] = read_text_set(key, ctx.render_cache, len(test))
            fallbacks |= set(sets[(pert, sev)].fallbacks)
        captions[i] = sets[(pert, sev)].texts[i]
        faithful[i] = sets[(pert, sev)].faithful[i]
    return captions, faithful, sorted(fallbacks)


def _read_clip(cache: RenderCache, key: RenderKey) -> np.ndarray:
    try:
        return cache.read(key)[0]
    except CacheCorrupt as err:
        # the stream cannot skip a query half-way (scores of earlier batches are already adapted): fail the trial
        # clearly and drop the entry, so the next submission re-renders it and reruns this trial
        cache.path(key).unlink(missing_ok=True)
        raise RuntimeError(f"render cache entry corrupt, removed: {err}; re-submit the grid to re-render it") from None


def _model_key(spec: TrialSpec) -> dict[str, Any]:
    """What features of the unadapted model depend on besides their inputs (part of every feature cache key). The
    backbone's options only where it has some, so the galleries of a backbone as registered keep their keys."""
    return {"model": spec.model_version, "backbone": spec.backbone, "clip": spec.clip_model, "data": spec.data_version,
            "dataset": spec.dataset, "frames": spec.num_frames, "res": spec.resolution, "precision": spec.precision,
            "trial": TRIAL_VERSION, "render": RENDER_VERSION,
            **({"backbone_options": spec.backbone_options} if spec.backbone_options else {})}


def _autocast(spec: TrialSpec, ctx: TrialContext):
    return torch.autocast(torch.device(ctx.device).type, dtype=torch.bfloat16, enabled=spec.precision == "bf16")


def _pack(features: Features) -> torch.Tensor | dict:
    """A gallery as the cache keeps it: the global embedding alone (a cosine backbone: the file as before), or with
    its parts in fp16 (HVP-Net's levels and compressed patches, TCD's OCR captions: half the bytes)."""
    main = features.main.float().cpu()
    if not features.parts:
        return main
    return {"main": main, "parts": {k: (v.half() if v.is_floating_point() else v).cpu()
                                    for k, v in features.parts.items()}}


def _unpack(value: torch.Tensor | dict) -> Features:
    if isinstance(value, dict):
        return Features(value["main"], dict(value["parts"])).to(dtype=torch.float32)
    return Features(value)


def _cached_features(ctx: TrialContext, name: str, compute: Callable[[], Any]) -> Any:
    """`compute()` (a tensor or a dict of tensors), kept in the gallery cache as `name` when the trial has one."""
    path = Path(ctx.gallery_cache) / name if ctx.gallery_cache else None
    if path is not None and path.is_file():
        try:
            return torch.load(path, map_location=ctx.device, weights_only=True)
        except Exception:
            path.unlink(missing_ok=True)  # unreadable: compute again
    value = compute()
    if path is not None:
        with atomic_path(path) as tmp:
            torch.save(value, tmp)
    return value


@torch.no_grad()
def encode_gallery(spec: TrialSpec, model: VideoTextModel, cache: RenderCache, test: Split, rows: list[int],
                   ctx: TrialContext) -> Gallery:
    """Gallery features from the unadapted model, cached on disk per (model, data, direction, frames, res)."""
    gkey = digest({**_model_key(spec), "direction": spec.direction, "rows": digest(rows)})

    def encode() -> torch.Tensor | dict:
        with _autocast(spec, ctx):
            if spec.direction == "v2t":
                captions = [test.pairs[i].caption for i in rows]
                feats = Features.cat([model.text_features(model.tokenize(captions[s:s + 64]))
                                      for s in range(0, len(captions), 64)])
            else:
                clean = [(CLEAN, 0)] * len(test)
                ensure_side_inputs(spec, model, cache, test, rows, clean)
                feats = Features.cat([model.video_features(batch.inputs, batch.side) for batch in
                                      _clip_batches(spec, model, cache, test, rows, clean, ctx.read_ahead)])
        return _pack(feats)

    # a cosine backbone's gallery is one tensor, named as it always was; the global embedding is what
    # `clean_query_embeddings` and the diagnostics read
    feats = _unpack(_cached_features(ctx, f"{spec.dataset}-{spec.backbone}-{spec.direction}-{gkey}.pt", encode))
    feats = feats.to(ctx.device)
    return Gallery(spec.direction, feats.main, feats.parts)


def encode_captions(model: VideoTextModel, captions: list[str]) -> torch.Tensor:
    """Unnormalised text features [N, D] of captions, 64 at a time."""
    return torch.cat([model.encode_text(model.tokenize(captions[s:s + 64])) for s in range(0, len(captions), 64)])


def unit_embeddings(features: torch.Tensor) -> torch.Tensor:
    """The L2-normalised embedding of each row of encoder features: texts [N, D] as they are, videos [N, T, D] by
    the mean of their frames (the features TCR's losses consume: TTAMethod.query_embedding)."""
    return torch.nn.functional.normalize((features.mean(1) if features.dim() == 3 else features).float(), dim=-1)


@torch.no_grad()
def clean_query_embeddings(spec: TrialSpec, model: VideoTextModel, cache: RenderCache, test: Split,
                           query_rows: list[int], ctx: TrialContext) -> tuple[torch.Tensor | None, str]:
    """Unit embeddings of the trial's queries unperturbed, from the unadapted model: the other direction's gallery
    features (the same cache entry), restricted to the queries. (None, reason) when a v2t query's clean clip is not
    in the render cache."""
    other = dataclasses.replace(spec, direction="t2v" if spec.direction == "v2t" else "v2t")
    if spec.direction == "t2v":
        texts = encode_gallery(other, model, cache, test, list(range(len(test))), ctx).features
        return unit_embeddings(texts[query_rows]), ""
    video_rows, _ = video_groups(test)
    rows, dropped, _ = _load_clips(other, cache, test, [(CLEAN, 0)] * len(test), video_rows)
    position = {r: j for j, r in enumerate(rows)}
    if not all(r in position for r in query_rows):
        return None, f"{len(dropped)} clean clips not rendered ({dropped[0]['video_id']}, ...)"
    videos = encode_gallery(other, model, cache, test, rows, ctx).features
    return unit_embeddings(videos[[position[r] for r in query_rows]]), ""


@torch.no_grad()
def shifted_query_embeddings(spec: TrialSpec, model: VideoTextModel, batches, ctx: TrialContext, key: dict
                             ) -> torch.Tensor:
    """Unit embeddings of the trial's (shifted) queries from the unadapted model, before any adaptation: one pass
    over `batches()` (a fresh iterator of the stream's QueryBatches), cached per cell (`key`: what the queries are)."""
    def encode() -> torch.Tensor:
        with _autocast(spec, ctx):
            feats = [model.encode_frames(b.inputs) if spec.direction == "v2t" else model.encode_text(b.inputs)
                     for b in batches()]
        return unit_embeddings(torch.cat(feats)).cpu()

    qkey = digest({**_model_key(spec), "direction": spec.direction, "queries": key})
    return _cached_features(ctx, f"{spec.dataset}-{spec.backbone}-{spec.direction}-queries-{qkey}.pt", encode)


def source_split_rows(train: Split, n: int) -> list[int]:
    """At most n pairs of a train split for a method's source stage: the first caption of n distinct videos evenly
    spaced through the split (all videos when it has fewer)."""
    first: dict[str, int] = {}
    for i, pair in enumerate(train.pairs):
        first.setdefault(pair.video_id, i)
    rows = list(first.values())
    if len(rows) <= n:
        return rows
    return [rows[int(k)] for k in np.linspace(0, len(rows) - 1, n).round().astype(int)]


@torch.no_grad()
def encode_source(spec: TrialSpec, model: VideoTextModel, ctx: TrialContext, n_pairs: int
                  ) -> tuple[SourceFeatures | None, str]:
    """Up to `n_pairs` encoded pairs of the checkpoint's source train split (the dataset's own for query shift, the
    source dataset's for cross-dataset cells: `ctx.source_root`), each video decoded at the trial's frames and
    resolution: (features, "") or (None, why there are none). Cached in the gallery cache by content (model, the
    chosen pairs' ids and captions)."""
    source = spec.source_dataset or spec.dataset
    if source == "pretrained":
        return None, "a zero-shot checkpoint has no source train split"
    own = source == spec.dataset
    root, options = (ctx.dataset_root, ctx.dataset_options) if own else (ctx.source_root, ctx.source_options)
    if not own and root is None and not options:
        return None, f"the source {source}'s location is not given to trials on {spec.dataset}"
    try:
        train = create_dataset(source, root=root, **options).train_split()
    except (DatasetError, OSError) as err:
        return None, f"no train split: {str(err).splitlines()[0]}"
    rows = source_split_rows(train, n_pairs)
    if not rows:
        return None, "the train split is empty"
    picked = Split(train.dataset, train.name, tuple(train.pairs[i] for i in rows))

    def encode() -> dict[str, torch.Tensor]:
        kept, clips, video_feats = [], [], []

        def flush():
            if clips:
                frames = model.preprocess_frames(torch.from_numpy(np.stack(clips)))
                video_feats.append(model.encode_frames(frames).float().cpu())
                clips.clear()

        with _autocast(spec, ctx):
            for pair in picked.pairs:
                try:
                    clips.append(resize_center_crop(read_frames(pair.video_path, spec.num_frames), model.image_size))
                except VideoDecodeError:
                    continue
                kept.append(pair.caption)
                if len(clips) == spec.batch_size:
                    flush()
            flush()
            if not kept:
                return {"text": torch.zeros(0), "video": torch.zeros(0)}
            text = encode_captions(model, kept).float().cpu()
        return {"text": unit_embeddings(text), "video": unit_embeddings(torch.cat(video_feats))}

    skey = digest({**_model_key(spec), "source": picked.fingerprint})
    feats = _cached_features(ctx, f"{source}-{spec.backbone}-source-{skey}.pt", encode)
    if feats["text"].dim() != 2 or len(feats["text"]) == 0:
        return None, "no video of the train split could be decoded"
    return SourceFeatures(feats["text"].to(ctx.device), feats["video"].to(ctx.device)), ""


def stream_rows(spec: TrialSpec, rows: list[int]) -> list[int]:
    """The queries in stream order: as given (the authors' annotation order), or with `stream_order: shuffled` a
    permutation drawn from the trial's seed (the same for every method of a cell and seed)."""
    if spec.stream_order != "shuffled":
        return rows
    order = rng_for("stream", spec.dataset, spec.seed).permutation(len(rows))
    return [rows[i] for i in order]


def source_r1(spec: TrialSpec, model: VideoTextModel, ctx: TrialContext) -> tuple[float | None, str]:
    """R@1 after adaptation on `spec.source_pairs` clean pairs of the checkpoint's source train split
    (workloads/selection.py `source_accuracy`): (R@1, "") or (None, why not). The decoded clips are cached in the
    gallery cache by the chosen pairs' fingerprint, frames and resolution (uint8), so each trial only encodes."""
    if spec.source_dataset not in ("", spec.dataset):
        return None, "only a checkpoint's own dataset's train split reaches a trial"
    try:
        train = create_dataset(spec.dataset, root=ctx.dataset_root, **ctx.dataset_options).train_split()
    except (DatasetError, OSError) as err:
        return None, f"no train split: {str(err).splitlines()[0]}"
    picked = [train.pairs[i] for i in source_split_rows(train, spec.source_pairs)]

    def decode() -> dict:
        clips, captions = [], []
        for pair in picked:
            try:
                clips.append(resize_center_crop(read_frames(pair.video_path, spec.num_frames), model.image_size))
            except VideoDecodeError:
                continue
            captions.append(pair.caption)
        return {"frames": torch.from_numpy(np.stack(clips)) if clips else torch.zeros(0), "captions": captions}

    key = digest({"pairs": digest([(p.video_id, p.caption) for p in picked]), "frames": spec.num_frames,
                  "size": model.image_size, "data": spec.data_version})
    clips = _cached_features(ctx, f"{spec.dataset}-source-clips-{key}.pt", decode)
    if len(clips["captions"]) < 2:
        return None, "fewer than two source videos could be decoded"
    with _autocast(spec, ctx):
        return source_accuracy(model, spec.direction, clips["frames"], clips["captions"], spec.batch_size), ""


def batch_recall(hits: np.ndarray, lengths: list[int]) -> list[float]:
    """R@1 (%) of each scored stream batch: `hits` (each query's share of R@1, under the trial's tie rule and
    positives) in scoring order, cut into consecutive batches of `lengths` (workloads/methods run_stream scores a
    batch when it adapts on it, or with its current weights). The batches average to the trial's R@1."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int)
    return [round(100.0 * float(hits[s:s + k].mean()), 4) for s, k in zip(starts, lengths)]


def running_recall(hits: np.ndarray, every: int) -> list[list[float]]:
    """[queries scored, R@1 (%) over them] every `every` queries along the stream (`hits` in scoring order), and at
    its end: the "R@1 over the stream" of docs/protocols.md."""
    ends = sorted(set(range(every, len(hits), every)) | {len(hits)})
    total = np.cumsum(hits, dtype=np.float64)
    return [[float(e), round(100.0 * float(total[e - 1]) / e, 4)] for e in ends]


def _segment_spec(spec: TrialSpec, cell: tuple[str, int]) -> TrialSpec:
    """The spec of one segment's cell, as a reset-each-shift trial of that cell would have it (its render keys,
    text sets and cached shifted queries are that trial's); the spec itself when it has no segments."""
    if not spec.segments:
        return spec
    return dataclasses.replace(spec, perturbation=cell[0], severity=cell[1], segments="", protocol="",
                               protocol_options="", render_assets=spec.assets_for(cell[0]))


def _stream_setup(spec: TrialSpec, protocol, method, n: int, n_segments: int, gallery_z: torch.Tensor,
                  gt: np.ndarray, gallery_groups) -> StreamSetup:
    """What the protocol plans from: the correlated order's query clusters (k-means over the source model's gallery
    embeddings, read at each query's ground-truth item: for grouped positives the group's first item) and the
    budgeted protocol's relative cost k (the grid's, else counted from the method's passes)."""
    clusters = None
    if protocol.needs_clusters:
        from workloads.protocols.correlated import query_clusters

        if gallery_groups is None:
            items = gt
        else:
            first: dict[int, int] = {}
            for i, g in enumerate(np.asarray(gallery_groups).tolist()):
                first.setdefault(g, i)
            items = [first[int(g)] for g in gt]
        clusters = query_clusters(gallery_z.cpu().numpy(), items, protocol.options["k"], spec.seed).tolist()
    cost = 1
    if protocol.needs_cost:
        cost = protocol.options["k"] or method_cost(type(method), spec.steps, protocol.options["backward_cost"])
    return StreamSetup(n=n, segments=n_segments, batch_size=spec.batch_size, seed=spec.seed, clusters=clusters,
                       cost=cost)


def _environment(ctx: TrialContext) -> dict[str, str]:
    # what `mlvp --version` prints (workloads/versions.py), then where this trial ran; str(): torch.__version__ is a
    # TorchVersion, whose unpickling in the driver (a `check` result) imports torch
    env = {**software_versions(with_cuda=True, gpu=False), "host": platform.node(),
           "python": platform.python_version(), "torch": str(torch.__version__), "device": ctx.device,
           "code_version": CODE_VERSION, "threads": str(torch.get_num_threads())}
    if ctx.device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(ctx.device))
    return env


def run(spec: TrialSpec, ctx: TrialContext, progress: Callable[[int, int], None] | None = None) -> TrialResult:
    """Run one trial. Errors inside the trial (bad data, NaN scores) come back as a failed TrialResult with the
    error and traceback, never as an exception, so a caller can record them."""
    t_start = time.perf_counter()
    result = TrialResult(key=spec.key, spec=spec.to_dict(), status="failed", environment=_environment(ctx))
    try:
        if ctx.threads:
            torch.set_num_threads(ctx.threads)
        torch.manual_seed(spec.seed)
        np.random.seed(spec.seed % 2**32)
        test = create_dataset(spec.dataset, root=ctx.dataset_root, **ctx.dataset_options).test_split()
        cache = RenderCache(ctx.render_cache)
        model = load_model(spec, ctx)
        t0 = time.perf_counter()

        # queries and gallery by video (workloads.metrics: several positives per query): with one caption per
        # video the groups are 0..n-1 and nothing changes; with several (MSVD `captions: all`) v2t has one query per
        # video scored by its best-ranked caption, t2v one query per caption against one gallery clip per video
        protocol = create_protocol(spec.protocol, **spec.protocol_kwargs)
        if spec.protocol:   # the default keeps running every batch size, as it always has
            check_batch_size(METHODS.lookup(spec.method), spec.batch_size)
        segments = spec.segment_cells
        # queries and gallery by video (workloads.metrics: several positives per query): with one caption per
        # video the groups are 0..n-1 and nothing changes; with several (MSVD `captions: all`) v2t has one query per
        # video scored by its best-ranked caption, t2v one query per caption against one gallery clip per video
        video_rows, groups = video_groups(test)
        gallery_groups = None
        if spec.direction == "v2t":
            gallery_rows = list(range(len(test)))
            if spec.segments:   # a query runs in every segment: one whose clip is missing at any is dropped
                seg_cells = [[cell] * len(test) for cell in segments]
                loaded = [_load_clips(spec, cache, test, c, video_rows) for c in seg_cells]
                usable = set.intersection(*(set(rows) for rows, _, _ in loaded))
                query_rows = [r for r in video_rows if r in usable]
                dropped = [{**d, "cell": cell_label(*cell)} for cell, (_, ds, _) in zip(segments, loaded) for d in ds]
                metas = [m for _, _, ms in loaded for m in ms]
            else:
                video_cells = query_cells(spec, len(video_rows))  # one draw per query (video) in stream order
                cells = [video_cells[g] for g in groups]
                seg_cells = [cells]
                query_rows, dropped, metas = _load_clips(spec, cache, test, cells, video_rows)
            query_rows = stream_rows(spec, query_rows)
            gt = groups[query_rows]                          # the query's video: positives are its captions
            if len(video_rows) < len(test):
                gallery_groups = groups
            result.faithful_renders = float(np.mean([m["faithful"] for m in metas])) if metas else None
            result.fallbacks = sorted({m["fallback"] for m in metas if m.get("fallback")})
        else:
            seg_texts = [_text_queries(_segment_spec(spec, cell), test, ctx) for cell in segments]
            gallery_rows, dropped, _ = _load_clips(spec, cache, test, [(CLEAN, 0)] * len(test), video_rows)
            position = {int(groups[r]): j for j, r in enumerate(gallery_rows)}
            # a caption whose video failed has no match: drop it
            query_rows = stream_rows(spec, [i for i in range(len(test)) if int(groups[i]) in position])
            gt = np.asarray([position[int(groups[i])] for i in query_rows], dtype=np.int64)
            if any(faithful is not None for _, faithful, _ in seg_texts):
                flags = [f[i] for _, f, _ in seg_texts if f is not None for i in query_rows]
                result.faithful_renders = float(np.mean(flags)) if flags else None
                result.fallbacks = sorted({x for _, _, fb in seg_texts for x in fb})
        result.dropped = dropped
        if not query_rows:
            raise RuntimeError(f"no usable queries: all {len(video_rows)} clips are missing or failed "
                               f"(first: {dropped[0] if dropped else '-'})")

        gallery = encode_gallery(spec, model, cache, test, gallery_rows, ctx)
        result.timings["gallery_s"] = time.perf_counter() - t0
        n = len(query_rows)
        if spec.direction == "v2t":
            for cells in seg_cells:
                ensure_side_inputs(spec, model, cache, test, query_rows, cells)

            def segment_batches(s: int):
                return _clip_batches(spec, model, cache, test, query_rows, seg_cells[s], ctx.read_ahead)

            def stream_batches(plan):
                groups_ = [[(query_rows[i % n], seg_cells[i // n][query_rows[i % n]]) for i in b.items] for b in plan]
                return _item_clip_batches(spec, model, cache, test, groups_, ctx.read_ahead)
        else:
            seg_query_texts = [[captions[i] for i in query_rows] for captions, _, _ in seg_texts]
            seg_tokens = [model.tokenize(texts) for texts in seg_query_texts]

            def segment_batches(s: int):
                texts, tokens = seg_query_texts[s], seg_tokens[s]
                return (QueryBatch(b, tokens[j:j + spec.batch_size], tuple(texts[j:j + spec.batch_size]))
                        for b, j in enumerate(range(0, n, spec.batch_size)))

            def stream_batches(plan):
                for b, batch in enumerate(plan):
                    s, j = divmod(batch.items[0], n)
                    if list(batch.items) == list(range(batch.items[0], batch.items[0] + len(batch.items))) \
                            and (batch.items[-1] // n) == s:   # a run of one segment: sliced, as always
                        yield QueryBatch(b, seg_tokens[s][j:j + len(batch.items)],
                                         tuple(seg_query_texts[s][j:j + len(batch.items)]))
                    else:
                        yield QueryBatch(b, torch.stack([seg_tokens[i // n][i % n] for i in batch.items]),
                                         tuple(seg_query_texts[i // n][i % n] for i in batch.items))

        # diagnostics before adaptation: the model is still the unadapted one
        t_diag = time.perf_counter()
        gallery_z = unit_embeddings(gallery.features)
        clean_z, why = clean_query_embeddings(spec, model, cache, test, query_rows, ctx)
        if clean_z is None:
            result.notes.append(f"diagnostics on clean queries skipped: {why}")
        shifted = []
        for s, cell in enumerate(segments):
            seg = _segment_spec(spec, cell)
            if seg.perturbation == CLEAN and not seg.mix and clean_z is not None:
                shifted.append(clean_z)   # the segment's queries are the clean ones
            else:
                shifted.append(shifted_query_embeddings(seg, model, functools.partial(segment_batches, s), ctx, {
                    "cell": seg.cell, "mix": seg.mix, "seed": seg.seed, "assets": seg.render_assets,
                    "rows": digest(query_rows),
                    "texts": digest(seg_query_texts[s]) if spec.direction == "t2v" else ""}))
        shifted_z = shifted[0] if len(shifted) == 1 else torch.cat(shifted)
        diagnostics_s = time.perf_counter() - t_diag

        method = create_method(spec.method, model, spec.direction, gallery, steps=spec.steps,
                               faithful=spec.faithful, precision=spec.precision, **spec.method_options)
        if method.source_pairs():
            t_source = time.perf_counter()
            method.attach_source(*encode_source(spec, model, ctx, method.source_pairs()))
            result.timings["source_s"] = time.perf_counter() - t_source
        setup = _stream_setup(spec, protocol, method, n, len(segments), gallery_z, gt, gallery_groups)
        plan = protocol.plan(setup)
        scored = np.asarray([i for b in plan if b.score for i in b.items], dtype=np.int64)
        if sorted(scored.tolist()) != list(range(n * len(segments))):
            raise RuntimeError(f"protocol {protocol.name!r} must score every query once")
        t1 = time.perf_counter()
        stream = Waited(stream_batches(plan))
        scores = run_stream(method, stream, progress=progress, plan=plan)
        result.timings["adapt_s"] = time.perf_counter() - t1
        # of which the stream waited for its next batch: on a GPU, time the device had nothing to do
        result.timings["input_wait_s"] = stream.seconds
        result.timings["per_query_ms"] = 1000 * result.timings["adapt_s"] / len(scored)
        # the scores in item order (segment-major, each segment in the trial's stream order)
        in_order = bool((scored == np.arange(len(scored))).all())
        scores = scores if in_order else scores[torch.from_numpy(np.argsort(scored, kind="stable"))]
        gt_all = np.tile(gt, len(segments))
        result.method_faithful = spec.faithful and not method.paper_derived
        if method.paper_derived:
            result.notes.append(method.paper_derived)
        result.fallbacks = result.fallbacks + method.fallbacks
        result.metrics = summarise(scores, gt_all, k=spec.hub_k, ties=tie_rule(spec.faithful),
                                   gallery_groups=gallery_groups)
        t_diag = time.perf_counter()
        stages = {"clean": clean_z, "shifted": shifted_z, "adapted": torch.cat(method.query_embeddings)}
        for stage, z in stages.items():
            if z is not None:
                result.metrics.update(embedding_diagnostics(z, gallery_z, stage))
        result.timings["diagnostics_s"] = diagnostics_s + time.perf_counter() - t_diag
        adapted = [i for b in plan if b.adapt for i in b.items]   # the ground truth in the order adapted on
        result.metrics.update(method.stream_stats(gt_all[adapted] if adapted else gt_all[:0], gallery_groups))
        # label-free selection signals (workloads/selection.py) and each query's share of R@1 in test-split order,
        # from which the tables bootstrap an interval over queries (orchestrator/config/tables.py)
        result.metrics["pred_entropy"] = prediction_entropy(scores)
        result.metrics["snd"] = soft_neighbourhood_density(stages["adapted"])
        hits = recall_hits(scores, gt_all, 1, ties=tie_rule(spec.faithful), gallery_groups=gallery_groups)
        split_order = np.argsort(np.asarray(query_rows), kind="stable")
        result.query_R1 = [round(float(h), 4) for s in range(len(segments))
                           for h in hits[s * n:(s + 1) * n][split_order]]
        if spec.source_pairs:
            t_source = time.perf_counter()
            r1, why = source_r1(spec, model, ctx)
            if r1 is None:
                result.notes.append(f"source accuracy skipped: {why}")
            else:
                result.metrics["source_R1"] = r1
            result.timings["source_eval_s"] = time.perf_counter() - t_source
        result.k_occurrence = k_occurrence(scores, spec.hub_k).tolist()
        stream_hits = hits[scored]   # in scoring order
        result.batch_R1 = batch_recall(stream_hits, [len(b.items) for b in plan if b.score])
        result.running_R1 = running_recall(stream_hits, protocol.options.get("every") or spec.batch_size)
        options = {k: v for k, v in protocol.options.items() if v is not None}   # defaults resolved later: left out
        result.protocol = {"name": protocol.name, "options": options, "batches": len(plan),
                           "adapted": sum(b.adapt for b in plan), "scored": sum(b.score for b in plan),
                           **({"k": setup.cost} if protocol.needs_cost else {})}
        if spec.segments:
            result.segments = [{"cell": cell_label(*cell), "perturbation": cell[0], "severity": cell[1],
                                **summarise(scores[s * n:(s + 1) * n], gt, k=spec.hub_k, ties=tie_rule(spec.faithful),
                                            gallery_groups=gallery_groups)} for s, cell in enumerate(segments)]
        result.n_queries, result.n_gallery = int(scores.shape[0]), int(scores.shape[1])
        if ctx.scores_dir:
            path = Path(ctx.scores_dir) / f"{spec.key}.npy"
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, scores.numpy().astype(np.float16))
            result.scores_path = str(path)
        result.status = "ok"
    except Exception as err:
        result.error = f"{type(err).__name__}: {err}"
        result.traceback = traceback.format_exc()
        if isinstance(err, NonFiniteError):
            result.failed_batch = err.batch_index
    result.timings["total_s"] = time.perf_counter() - t_start
    return result
