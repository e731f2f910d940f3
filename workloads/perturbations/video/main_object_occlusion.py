"""Main-object occlusion (docs/faithfulness.md: Main-object occlusion): a black patch of area ratio r of the main
object's box, per frame.

Assets:
- `main_objects`: the authors' boxes JSON (path) or the already loaded dict, schema
  {video_id: {video_path, ranked_objects_per_frame: {str(frame_index): [{frame_index, label, box[x1,y1,x2,y2],
  rank_score}, ...]}, video_caption}}; a single video's entry ({ranked_objects_per_frame: ...}) is accepted too.
- `video_id`: the key into that dict (tried as given, then with '/' and '\\' replaced by '_' as get_main_objects.py
  writes its keys).
Both given -> faithful. A missing file, unreadable JSON or unknown video id is an error, not a fallback.

Frame keys. get_main_objects.py keys `ranked_objects_per_frame` by the ORIGINAL frame index of each of the 12
uniform frames (`get_frame_indices(12, n)`; for videos shorter than 12 frames the repeated last index collapses
into one key), and do_video_perturbation.py looks up `str(frame_indices[i])` with the indices returned by the same
uniform rule. We do the same with `ctx.indices`, which requires `ctx.video` to hold every decoded frame (as the
registry's contract says). Resolution order, recorded in meta["frame_keys"]:
  "original_index"  every str(ctx.indices[i]) is a key (the authors' format);
  "position"        keys are exactly "0".."num_frames-1" (a JSON written per sampled position);
  "sorted_order"    the JSON has as many keys as there are distinct sampled indices: the k-th smallest key is the
                    k-th distinct sampled frame (covers cv2 vs decord frame-count disagreements of a frame or two);
otherwise a ValueError. Within a resolved frame an empty list means "no detection".

Algorithm (reference): r = linspace(0.3, 0.8, 5)[severity-1]; per frame the main object is the first entry; box
clipped to the frame; patch h = int(box_h*sqrt(r)), w = int(box_w*sqrt(r)); top-left x ~ randint(x1, max(x1+1, x2-w)),
then y likewise; filled black rectangle drawn like cv2.rectangle(..., -1) (corners inclusive, so (w+1) x (h+1)
pixels). No detection: the previous patch shifted by randint(-5, 6) in x then y; with no previous patch a centred
box of randint(W//8, W//4) x randint(H//8, H//4). A degenerate box draws nothing. Position re-drawn every frame.

Without boxes (no `main_objects` asset): a built-in model-free locator (`locate_main_objects`) produces boxes in the
same schema and the same patch algorithm runs on them; flagged faithful: false.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Mapping

import cv2
import numpy as np

from workloads.perturbations.video._registry import AssetNeeds, ClipContext, neighbour_frames, register
from workloads.seeding import file_digest

AREA_RATIOS = tuple(float(r) for r in np.linspace(0.3, 0.8, 5))
LOCATOR_LABEL = "salient_region"


# ----------------------------------------------------------------------------------------------- boxes JSON

@functools.lru_cache(maxsize=4)
def _load_json_cached(path: str, size: int, mtime_ns: int) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read main-object boxes JSON {path}: {type(err).__name__}: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"main-object boxes JSON {path} is not an object keyed by video id")
    return data


def load_main_objects(source: str | os.PathLike | Mapping) -> Mapping:
    """The boxes dict from a path (cached per process by path, size and mtime) or a dict passed through."""
    if isinstance(source, Mapping):
        return source
    p = Path(source)
    if not p.is_file():
        raise FileNotFoundError(f"main-object boxes JSON not found (asset main_objects): {source}")
    st = p.stat()
    return _load_json_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


def video_entry(data: Mapping, video_id: str | None, where: str = "main_objects") -> Mapping:
    """One video's entry ({ranked_objects_per_frame, ...}) from the boxes dict."""
    if "ranked_objects_per_frame" in data:  # already a single video's entry
        return data
    if video_id is None:
        if len(data) == 1:
            return next(iter(data.values()))
        raise ValueError(f"asset main_objects ({where}) holds {len(data)} videos: give asset video_id")
    for key in (str(video_id), str(video_id).replace("/", "_").replace("\\", "_")):
        if key in data:
            entry = data[key]
            if not isinstance(entry, Mapping) or "ranked_objects_per_frame" not in entry:
                raise ValueError(f"entry {key!r} of {where} has no ranked_objects_per_frame")
            return entry
    raise KeyError(f"video_id {video_id!r} not found in main-object boxes {where} ({len(data)} videos)")


def per_frame_objects(entry: Mapping, indices: np.ndarray) -> tuple[list[list], str]:
    """The ranked object list of each sampled frame (see the module docstring for the key resolution)."""
    rop = {str(k): (v or []) for k, v in entry["ranked_objects_per_frame"].items()}
    indices = [int(i) for i in indices]
    t = len(indices)
    if all(str(i) in rop for i in indices):
        return [rop[str(i)] for i in indices], "original_index"
    if set(rop) == {str(p) for p in range(t)}:
        return [rop[str(p)] for p in range(t)], "position"
    try:
        keys = sorted(rop, key=int)
    except ValueError as err:
        raise ValueError(f"ranked_objects_per_frame keys must be frame indices, got {sorted(rop)[:5]}") from err
    distinct = sorted(set(indices))
    if len(keys) == len(distinct):
        rank = {idx: k for idx, k in zip(distinct, keys)}
        return [rop[rank[i]] for i in indices], "sorted_order"
    raise ValueError(f"main-object boxes do not match this decode: keys {keys[:12]} vs sampled frame indices "
                     f"{indices} of a {t}-frame sample")


# ----------------------------------------------------------------------------------------------- the patch algorithm

def occlude(frames: np.ndarray, objects: list[list], severity: int, rng: np.random.Generator
            ) -> tuple[np.ndarray, list[list[int] | None]]:
    """The reference's per-frame patch placement on uint8 [T, H, W, 3]. Returns (frames, patch box per frame as
    drawn [x1, y1, x2, y2] with inclusive corners, or None)."""
    r = AREA_RATIOS[severity - 1]
    out = np.array(frames, copy=True)
    t, h, w, _ = out.shape
    last = None
    patches: list[list[int] | None] = []
    for i in range(t):
        objs = objects[i]
        box = None
        if objs:
            x_min, y_min, x_max, y_max = [int(v) for v in objs[0]["box"]]
            x_min, y_min = max(0, x_min), max(0, y_min)
            x_max, y_max = min(w, x_max), min(h, y_max)
            bw, bh = x_max - x_min, y_max - y_min
            if bw > 0 and bh > 0:
                oh, ow = int(bh * np.sqrt(r)), int(bw * np.sqrt(r))
                x0 = int(rng.integers(x_min, max(x_min + 1, x_max - ow)))
                y0 = int(rng.integers(y_min, max(y_min + 1, y_max - oh)))
                box = [x0, y0, x0 + ow, y0 + oh]
        elif last is not None:
            ow, oh = last[2] - last[0], last[3] - last[1]
            nx = last[0] + int(rng.integers(-5, 6))
            ny = last[1] + int(rng.integers(-5, 6))
            box = [nx, ny, nx + ow, ny + oh]
        else:
            ow = int(rng.integers(w // 8, max(w // 8 + 1, w // 4)))
            oh = int(rng.integers(h // 8, max(h // 8 + 1, h // 4)))
            x0, y0 = (w - ow) // 2, (h - oh) // 2
            box = [x0, y0, x0 + ow, y0 + oh]
        drawn = None
        if box is not None:
            x1, y1, x2, y2 = box
            x1, y1 = max(0, x1), max(0, y1)
            x2, y2 = min(w, x2), min(h, y2)
            if x2 > x1 and y2 > y1:
                out[i, y1:y2 + 1, x1:x2 + 1] = 0  # cv2.rectangle(thickness=-1) fills both corners inclusive
                drawn = [x1, y1, min(x2, w - 1), min(y2, h - 1)]
            last = [x1, y1, x2, y2]
        patches.append(drawn)
    return out, patches


# ----------------------------------------------------------------------------------------------- model-free locator

def _norm01(x: np.ndarray) -> np.ndarray:
    hi = float(np.percentile(x, 99.5))
    if hi <= 1e-6:
        return np.zeros_like(x, dtype=np.float32)
    return np.clip(x / hi, 0.0, 1.0).astype(np.float32)


def locate_main_objects(video: np.ndarray, indices: np.ndarray) -> dict[str, list[dict]]:
    """A model-free stand-in for the VLM + OWLv2 boxes: {str(frame_index): [one box] or []}, same schema.

    Per sampled frame: motion = |frame - temporal median of the sampled frames| (grey, blurred), plus the absolute
    difference to the neighbouring decoded frames; saliency = frequency-tuned colour contrast (Achanta et al. 2009:
    distance of the blurred Lab pixel from the frame's mean Lab colour). Both are normalised to [0, 1]; the map is
    0.6 * motion + 0.4 * saliency when the clip moves (saliency alone for a static clip), Otsu-thresholded, opened,
    and the connected component with the largest summed map (at least 0.2% of the frame) gives the box."""
    from workloads.video_io import SparseVideo

    if not isinstance(video, SparseVideo):  # a SparseVideo holds the sampled frames and their neighbours
        video = np.asarray(video)
    n, h, w, _ = video.shape
    indices = [int(i) for i in indices]
    scale = min(1.0, 160.0 / max(h, w))  # work at <= 160 px for speed; boxes are scaled back
    sh, sw = max(8, int(round(h * scale))), max(8, int(round(w * scale)))

    def small_gray(k: int) -> np.ndarray:
        g = cv2.cvtColor(cv2.resize(video[k], (sw, sh), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY)
        return cv2.GaussianBlur(g.astype(np.float32), (0, 0), 1.5)

    distinct = sorted(set(indices))
    grays = {k: small_gray(k) for k in distinct}
    background = np.median(np.stack([grays[k] for k in distinct]), axis=0) if len(distinct) > 2 else None
    motions = {}
    for k in distinct:
        m = np.zeros((sh, sw), np.float32)
        if background is not None:
            m += np.abs(grays[k] - background)
        for j in (k - 1, k + 1):
            if 0 <= j < n:
                m += 0.5 * np.abs(grays[k] - small_gray(j))
        motions[k] = m
    peak_motion = max(float(np.percentile(m, 99.5)) for m in motions.values())
    moving = peak_motion > 4.0  # grey levels: below this the clip is effectively static

    result: dict[str, list[dict]] = {}
    min_area = 0.002 * sh * sw
    for k in distinct:
        small = cv2.resize(video[k], (sw, sh), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
        lab = cv2.cvtColor(cv2.GaussianBlur(small, (0, 0), 1.0), cv2.COLOR_RGB2LAB)
        sal = _norm01(np.linalg.norm(lab - lab.reshape(-1, 3).mean(0), axis=-1))
        smap = 0.6 * _norm01(motions[k]) + 0.4 * sal if moving else sal
        u8 = (np.clip(smap, 0, 1) * 255).astype(np.uint8)
        objs: list[dict] = []
        if u8.max() > 0:
            thr, mask = cv2.threshold(u8, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
            mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
            count, labels, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
            best, best_score = None, 0.0
            for c in range(1, count):
                if stats[c, cv2.CC_STAT_AREA] < min_area:
                    continue
                score = float(smap[labels == c].sum())
                if score > best_score:
                    best, best_score = c, score
            if best is not None:
                x, y, bw, bh = (int(v) for v in stats[best, :4])
                box = [x / scale, y / scale, (x + bw) / scale, (y + bh) / scale]
                box = [round(min(max(v, 0.0), lim), 2) for v, lim in zip(box, (w, h, w, h))]
                objs.append({"frame_index": k, "label": LOCATOR_LABEL, "box": box,
                             "rank_score": round(best_score / max(1.0, float(smap.sum())), 4)})
        result[str(k)] = objs
    return result


# ----------------------------------------------------------------------------------------------- the perturbation

def _assets_version(paths: Mapping[str, str | None], context: Mapping[str, str]) -> str:
    return "boxes:" + file_digest(paths["main_objects"]) if paths.get("main_objects") else "builtin"


@register("main_object_occlusion", order=8, level="mid", frames=neighbour_frames,
          assets=AssetNeeds(("main_objects",), _assets_version))
def main_object_occlusion(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """Black patch of area ratio 0.30..0.80 of the main object's box, re-drawn per frame."""
    source = ctx.assets.get("main_objects")
    meta: dict[str, Any] = {"area_ratio": AREA_RATIOS[severity - 1]}
    if source is not None:
        where = str(source) if not isinstance(source, Mapping) else "dict"
        entry = video_entry(load_main_objects(source), ctx.assets.get("video_id"), where)
        objects, mode = per_frame_objects(entry, ctx.indices)
        meta.update(faithful=True, boxes="given", frame_keys=mode)
    else:
        located = ctx.memo("main_object_occlusion.locator", lambda: locate_main_objects(ctx.video, ctx.indices))
        objects = [located[str(int(i))] for i in ctx.indices]
        meta.update(faithful=False, boxes="locator",
                    fallback="no main_objects boxes JSON: model-free locator (background-median + neighbour "
                             "frame differencing and Lab colour-contrast saliency, strongest component's box) "
                             "instead of Qwen2.5-VL caption + OWLv2 detection + tracking")
    out, patches = occlude(ctx.sampled, objects, severity, rng)
    meta["object_boxes"] = [[float(v) for v in objs[0]["box"]] if objs else None for objs in objects]
    meta["patches"] = patches
    return out, meta


__all__ = ["AREA_RATIOS", "main_object_occlusion", "occlude", "locate_main_objects", "load_main_objects",
           "video_entry", "per_frame_objects"]
