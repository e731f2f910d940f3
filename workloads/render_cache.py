"""The render cache: perturbed (or clean) query clips, uint8 at model resolution, content-addressed.

One file per clip: `<root>/<dataset>/<perturbation>_<severity>/<video>-<digest>.npz` holding `frames` uint8
[num_frames, R, R, 3] and `meta` (JSON: the key, faithful flag, fallbacks, frames' sha256). Written to a temporary
name and renamed, so readers never see half a file; a truncated or corrupt file fails its checksum and is
re-rendered. A clip that fails to render leaves `<...>.failed.json` (path and error) instead; failures are retried
on the next submission, successes never are.

`render_video` is the pure per-video worker: decode once (only the frames the requested types read: read_for in
workloads/perturbations/video/__init__.py; H.264 streams the file instead), render every requested (perturbation,
severity) from that one decode, resize/centre-crop and write each rendering as it comes (iter_render), so a render
holds one type's working set and one rendering at native resolution, whatever the clip's length
(workloads/render_memory.py gives the peak per type). The orchestrator fans it out over Ray Data actors.

OCR entries (a sibling kind, for OCR backbones: workloads/ocr.py): beside a clip, `<video>-<digest>.ocr-<engine
version>.json` holds the words an OCR engine read in each window of the clip, read on the frames at their native
resolution before the resize (`render_video(..., ocr=engine)`). Same key as the clip, so every trial of a (dataset,
perturbation, severity) shares them; clip entries, their names and digests are unchanged.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workloads import RENDER_VERSION
from workloads.atomic import atomic_path, atomic_write_text
from workloads.seeding import digest, stable_seed
from workloads.spec import CLEAN
from workloads.video_io import resize_center_crop


class CacheMiss(KeyError):
    pass


class CacheCorrupt(ValueError):
    pass


@dataclass(frozen=True)
class RenderKey:
    dataset: str
    data_version: str
    video_id: str
    perturbation: str
    severity: int
    seed: int
    num_frames: int
    resolution: int
    assets: str = ""   # version of the assets the perturbation used (weights, boxes, chosen distractor)

    @property
    def digest(self) -> str:
        return digest({"key": asdict(self), "render": RENDER_VERSION}, length=16)

    @property
    def clip_seed(self) -> int:
        """Seed of choices made once per clip (per type), shared by all severities: per (dataset, video, grid seed)."""
        return stable_seed(self.dataset, self.video_id, self.seed)

    @property
    def perturbation_seed(self) -> int:
        """Seed of this clip's random stream: per (dataset, video, perturbation, severity, grid seed)."""
        return stable_seed(self.dataset, self.video_id, self.perturbation, self.severity, self.seed)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name)[:80]


class RenderCache:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, key: RenderKey) -> Path:
        return (self.root / _safe(key.dataset) / f"{_safe(key.perturbation)}_{key.severity}"
                / f"{_safe(key.video_id)}-{key.digest}.npz")

    def failure_path(self, key: RenderKey) -> Path:
        p = self.path(key)
        return p.with_name(p.name[:-4] + ".failed.json")

    def write(self, key: RenderKey, frames: np.ndarray, meta: dict[str, Any]) -> Path:
        frames = np.ascontiguousarray(frames, dtype=np.uint8)
        meta = {**meta, "key": asdict(key), "sha256": hashlib.sha256(frames.data).hexdigest(),
                "shape": list(frames.shape)}
        path = self.path(key)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, frames=frames, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
        self.failure_path(key).unlink(missing_ok=True)
        return path

    def write_failure(self, key: RenderKey, video_path: str, error: str) -> None:
        atomic_write_text(self.failure_path(key), json.dumps({"key": asdict(key), "video_path": video_path,
                                                               "error": error, "time": time.time()}))

    def failure(self, key: RenderKey) -> dict | None:
        try:
            return json.loads(self.failure_path(key).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def read(self, key: RenderKey) -> tuple[np.ndarray, dict[str, Any]]:
        path = self.path(key)
        if not path.is_file():
            raise CacheMiss(str(path))
        try:
            with np.load(path) as z:
                frames = z["frames"]
                meta = json.loads(z["meta"].tobytes().decode())
        except Exception as err:
            raise CacheCorrupt(f"{path}: {type(err).__name__}: {err}") from err
        # the array's own buffer (C-ordered, as written): the same bytes as `tobytes()` without copying them
        checksum = hashlib.sha256(np.ascontiguousarray(frames).data).hexdigest()
        if list(frames.shape) != meta.get("shape") or checksum != meta.get("sha256"):
            raise CacheCorrupt(f"{path}: checksum mismatch")
        return frames, meta

    # -- OCR entries (module docstring) ---------------------------------------------------------------------------
    def ocr_path(self, key: RenderKey, engine: str) -> Path:
        p = self.path(key)
        return p.with_name(f"{p.name[:-4]}.ocr-{_safe(engine)}.json")

    def write_ocr(self, key: RenderKey, engine: str, windows: list[list[str]]) -> Path:
        path = self.ocr_path(key, engine)
        atomic_write_text(path, json.dumps({"key": asdict(key), "engine": engine, "windows": windows}))
        return path

    def read_ocr(self, key: RenderKey, engine: str) -> list[list[str]]:
        """The words of each window of the clip `key`, as `engine` read them; CacheMiss / CacheCorrupt."""
        path = self.ocr_path(key, engine)
        if not path.is_file():
            raise CacheMiss(str(path))
        try:
            data = json.loads(path.read_text())
            windows = data["windows"]
            if data["key"] != asdict(key) or not all(isinstance(w, list) for w in windows):
                raise ValueError("not this clip's entry")
        except Exception as err:
            raise CacheCorrupt(f"{path}: {type(err).__name__}: {err}") from err
        return windows

    def probe(self, key: RenderKey) -> dict[str, Any]:
        """Cheap check that an entry exists and is whole: opens the archive's directory and reads the small meta
        member, not the frames (a truncated file fails here; bit rot is caught by `read`'s checksum)."""
        path = self.path(key)
        if not path.is_file():
            raise CacheMiss(str(path))
        try:
            with np.load(path) as z:
                if "frames" not in z.files:
                    raise KeyError("frames")
                return json.loads(z["meta"].tobytes().decode())
        except Exception as err:
            raise CacheCorrupt(f"{path}: {type(err).__name__}: {err}") from err

    def is_valid(self, key: RenderKey) -> bool:
        try:
            self.read(key)
            return True
        except (CacheMiss, CacheCorrupt):
            return False


def render_video(video_path: str, keys: list[RenderKey], cache: RenderCache,
                 assets: dict[str, Any] | None = None, ocr=None, clips: bool = True) -> list[dict[str, Any]]:
    """Render every key of one source video from a single decode (per frame count), sharing per-video work (uniform
    sample, optical flow, ...) across perturbations and severities, each rendering written as soon as it is made.
    Never raises for a bad video or a failing perturbation: each key gets a status record {digest, status:
    ok|failed, error, faithful, fallback, seconds}.
    `ocr`: an OCR engine (workloads/ocr.py), or a list of them: each key's frames are also read at their native
    resolution, before the resize, into the key's OCR entry of each engine. `clips=False` writes only the OCR
    entries (the clips are there already)."""
    out: list[dict[str, Any]] = []
    if ocr is not None and not isinstance(ocr, (list, tuple)):
        ocr = [ocr]
    groups: dict[int, list[RenderKey]] = {}
    for key in keys:  # keys of one video normally share the grid's frame count
        groups.setdefault(key.num_frames, []).append(key)
    for group in groups.values():
        out += _render_group(video_path, group, cache, dict(assets or {}), ocr, clips)
    by_digest = {o["digest"]: o for o in out}
    return [by_digest[k.digest] for k in keys]


def _render_group(video_path: str, keys: list[RenderKey], cache: RenderCache, assets: dict[str, Any],
                  ocr: list | None = None, clips: bool = True) -> list[dict[str, Any]]:
    from workloads.perturbations import video as vp
    from workloads.video_io import uniform_indices, video_fps

    out: list[dict[str, Any]] = []

    def failed(key: RenderKey, msg: str, detail: str, t0: float) -> None:
        if clips:  # an OCR-only pass leaves the clip's own record alone
            cache.write_failure(key, video_path, msg + detail)
        out.append({"digest": key.digest, "status": "failed", "error": msg, "faithful": None, "fallback": None,
                    "seconds": time.perf_counter() - t0})

    t0 = time.perf_counter()
    num_frames = keys[0].num_frames
    clean = [k for k in keys if k.perturbation == CLEAN]
    perturbed = [k for k in keys if k.perturbation != CLEAN]
    requests = [(k.perturbation, k.severity, k.perturbation_seed) for k in perturbed]
    try:  # decode only the frames the requested types read
        video = vp.read_for(video_path, requests, num_frames=num_frames, sample=bool(clean))
    except Exception as err:  # a corrupt video fails its keys, not the grid
        for key in keys:
            failed(key, f"{type(err).__name__}: {err}", "", t0)
        return out
    if "fps" not in assets and any(vp.get(k.perturbation).streams for k in perturbed):
        try:  # h264_compression re-encodes at the source rate
            assets["fps"] = video_fps(video_path)
        except Exception:
            pass  # the perturbation falls back to its default and says so in its meta
    decode_s = time.perf_counter() - t0

    def write(key: RenderKey, frames: np.ndarray, meta: dict[str, Any]) -> None:
        for engine in ocr or ():
            cache.write_ocr(key, engine.version(), engine.read_windows(frames))
        if clips:
            cache.write(key, resize_center_crop(frames, key.resolution), meta)

    for key in clean:
        t1 = time.perf_counter()
        try:
            write(key, video[uniform_indices(len(video), num_frames)], {"faithful": True})
        except Exception as err:
            failed(key, f"{type(err).__name__}: {err}", "\n" + traceback.format_exc(limit=5), t1)
            continue
        out.append({"digest": key.digest, "status": "ok", "error": None, "faithful": True, "fallback": None,
                    "seconds": time.perf_counter() - t1 + decode_s / len(keys)})
    # one ClipContext for all requests of this video; each rendering is resized and written as it comes
    renders = vp.iter_render(video, requests, num_frames=num_frames, errors="return",
                             clip_seed=perturbed[0].clip_seed if perturbed else None, **assets)
    t1 = time.perf_counter()
    for key, r in zip(perturbed, renders):
        seconds = time.perf_counter() - t1 + decode_s / len(keys)
        if r.error is not None:
            failed(key, r.error, "", t1)
        else:
            try:
                write(key, r.frames, r.meta)
                out.append({"digest": key.digest, "status": "ok", "error": None, "faithful": bool(r.meta["faithful"]),
                            "fallback": r.meta.get("fallback"), "seconds": seconds})
            except Exception as err:
                failed(key, f"{type(err).__name__}: {err}", "\n" + traceback.format_exc(limit=5), t1)
        del r
        t1 = time.perf_counter()
    return out
