"""Registry and shared per-clip context for the MLVP video perturbations.

A perturbation is a function `fn(ctx, severity, rng) -> (frames, meta)`:
- `ctx` is the ClipContext of one source video: the decoded frames its types read (or every frame), the uniform
  sample indices, the assets, the requests being rendered, and a memo so work shared across types and severities
  (the uniform sample, optical flow, ...) is done once per video. A memo entry belongs to the type that made it (or
  to the types named with `users=`) and is dropped once their last request is rendered (`iter_render` in
  __init__.py), so a render of every type holds one type's working set at a time, not the sum;
- `severity` is 1..5; `rng` a numpy Generator seeded by the caller;
- it returns uint8 [num_frames, H, W, 3] at the input resolution and a JSON-able meta dict that must contain
  `faithful` (bool: true when the reference algorithm and its real assets were used) and, when not faithful,
  `fallback` (a one-line description of what was substituted).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from workloads.registry import Registry
from workloads.video_io import uniform_indices

SEVERITIES = (1, 2, 3, 4, 5)


class ClipContext:
    """One source video and everything renderings of it may share."""

    def __init__(self, video: np.ndarray, num_frames: int = 12, assets: dict[str, Any] | None = None,
                 clip_seed: int | None = None, requests: Iterable[tuple[str, int, int]] = ()):
        from workloads.video_io import SparseVideo

        if not isinstance(video, SparseVideo):  # a SparseVideo holds some frames of the clip, each contiguous
            video = np.asarray(video)
        if video.ndim != 4 or video.shape[-1] != 3 or video.dtype != np.uint8:
            raise ValueError(f"video must be uint8 [N, H, W, 3], got {video.dtype} {video.shape}")
        if len(video) == 0:
            raise ValueError("video has no frames")
        # OpenCV/PyAV need C-contiguous frames; no copy when already so
        self.video = video if isinstance(video, SparseVideo) else np.ascontiguousarray(video)
        self.num_frames = int(num_frames)
        self.indices = uniform_indices(len(video), self.num_frames)
        self.assets = dict(assets or {})
        self.clip_seed = clip_seed
        self.requests = [(str(n), int(s), int(seed)) for n, s, seed in requests]  # what this render will make
        self.current: str | None = None  # the type being rendered (set by iter_render): owner of new memo entries
        self._memo: dict[Any, Any] = {}
        self._users: dict[Any, frozenset[str]] = {}

    def clip_rng(self, name: str, fallback: np.random.Generator) -> np.random.Generator:
        """A random stream for choices made once per clip and type, shared by all severities (e.g. the style image),
        so severities differ only in strength. Without a clip seed, the request's own stream."""
        if self.clip_seed is None:
            return fallback
        from workloads.seeding import stable_seed

        return np.random.default_rng(stable_seed(self.clip_seed, name))

    @property
    def sampled(self) -> np.ndarray:
        """The `num_frames` frames picked by the uniform rule (docs/faithfulness.md: Common pipeline)."""
        return self.memo("sampled", lambda: np.ascontiguousarray(self.video[self.indices]), users=CLIP)

    def severities(self, name: str) -> list[int]:
        """The severities of `name` this render makes, in request order (a type can share one pass over the clip
        between them: H.264 encodes them side by side)."""
        return [s for n, s, _ in self.requests if n == name]

    def frames_in_order(self):
        """Every frame of the clip in display order, one at a time: from the array, or streamed from the file of a
        SparseVideo read with `stream=True` (workloads/video_io.py: iter_video), so a type that reads the whole
        clip once (H.264) never holds it."""
        from workloads.video_io import SparseVideo

        if isinstance(self.video, SparseVideo):
            return self.video.iter_frames()
        return iter(self.video)

    def memo(self, key: Any, compute: Callable[[], Any], users: Iterable[str] | str | None = None) -> Any:
        """`compute()` once per clip. The entry is kept while a request of one of its `users` (type names; default
        the type being rendered; CLIP: the whole clip) remains to be rendered (see `release`)."""
        if key not in self._memo:
            self._memo[key] = compute()
            if users is None:
                users = None if self.current is None else (self.current,)
            if users is not None and users != CLIP:
                self._users[key] = frozenset([users] if isinstance(users, str) else users)
        return self._memo[key]

    def forget(self, key: Any) -> None:
        """Drop one memo entry now (a type that knows it is done with it)."""
        self._memo.pop(key, None)
        self._users.pop(key, None)

    def release(self, remaining: Iterable[str]) -> None:
        """Drop every memo entry none of whose users is in `remaining` (the types still to be rendered)."""
        remaining = set(remaining)
        for key, users in list(self._users.items()):
            if not users & remaining:
                self.forget(key)


CLIP = "clip"  # ClipContext.memo(users=CLIP): kept for the whole clip (the uniform sample)
PerturbFn = Callable[[ClipContext, int, np.random.Generator], "tuple[np.ndarray, dict]"]
# which decoded frames a rendering reads: fn(n frames, uniform indices, severity, seed) -> indices, or None for all
FramesFn = Callable[[int, np.ndarray, int, int], "Iterable[int] | None"]


def sampled_frames(n: int, indices: np.ndarray, severity: int, seed: int) -> Iterable[int]:
    """The uniform sample only (frame-level types)."""
    return indices


def flow_frames(n: int, indices: np.ndarray, severity: int, seed: int) -> Iterable[int]:
    """Each sampled frame and the one before it (Farneback flow between k-1 and k: _flow.py)."""
    return {int(j) for k in indices for j in (k - 1, k) if j >= 0}


def neighbour_frames(n: int, indices: np.ndarray, severity: int, seed: int) -> Iterable[int]:
    """Each sampled frame and its two neighbours."""
    return {int(j) for k in indices for j in (k - 1, k, k + 1) if 0 <= j < n}


def all_frames(n: int, indices: np.ndarray, severity: int, seed: int) -> None:
    """Every frame, decoded and held at once (no registered type needs this any more)."""
    return None


def stream_frames(n: int, indices: np.ndarray, severity: int, seed: int) -> Iterable[int]:
    """Every frame once, in display order, through ClipContext.frames_in_order (H.264 re-encodes the whole clip):
    nothing is decoded up front or held (read_for streams the file)."""
    return ()
LEVELS = ("low", "mid", "high")  # the paper's three-level hierarchy (pixel, motion/object, semantic/temporal)


@dataclass(frozen=True)
class AssetNeeds:
    """What a perturbation renders with besides the video, declared on its registration so the orchestrator never
    compares perturbation names:
    - `keys`: the asset keys it reads, from the grid's `assets:` or, overriding them, `datasets.<name>.assets:`;
    - `version(paths, context)`: the content version of those assets (part of every render and trial key), from
      the resolved local paths by key (None when absent) and context {"data": data version, "embedder": version
      of the CLIP used by `prepare`};
    - `prepare(dataset, paths, embedder, num_frames, device)`: optional per-video assets chosen once per dataset
      with a CLIP (`embedder` = (clip_model, weights path, kind)), returning {video_id: {asset: value}}."""

    keys: tuple[str, ...]
    version: Callable[[Mapping[str, str | None], Mapping[str, str]], str]
    prepare: Callable[..., dict[str, dict[str, Any]]] | None = None


@dataclass(frozen=True)
class PerturbationInfo:
    name: str
    fn: PerturbFn
    level: str        # "low" | "mid" | "high"
    full_video: bool  # True: reads the whole frame sequence (h264, blur, defocus, event insertion, scrambling)
    assets: AssetNeeds | None
    doc: str
    frames: FramesFn = sampled_frames  # the decoded frames it reads (a render decodes only what its types read)

    @property
    def streams(self) -> bool:
        """Reads every frame once in order (ClipContext.frames_in_order) instead of holding decoded frames."""
        return self.frames is stream_frames


VIDEO_PERTURBATIONS = Registry("video perturbation", package="workloads.perturbations.video")


def register(name: str, *, order: float | None = None, level: str, full_video: bool = False,
             assets: AssetNeeds | None = None, frames: FramesFn | None = None) -> Callable[[PerturbFn], PerturbFn]:
    """Register a perturbation function; `order` is its column in the paper's tables, `level` its group; `frames`
    says which decoded frames it reads (default: the uniform sample, or every frame for `full_video` types)."""
    if frames is None:
        frames = all_frames if full_video else sampled_frames
    if level not in LEVELS:
        raise ValueError(f"video perturbation {name!r}: level must be one of {LEVELS}, got {level!r}")

    def wrap(fn: PerturbFn) -> PerturbFn:
        info = PerturbationInfo(name, fn, level, full_video, assets, (fn.__doc__ or "").strip(), frames)
        VIDEO_PERTURBATIONS.add(name, info, order=order, level=level)
        return fn

    return wrap


def get(name: str) -> PerturbationInfo:
    return VIDEO_PERTURBATIONS.lookup(name)


def frames_needed(requests: Iterable[tuple[str, int, int]], n: int, num_frames: int = 12,
                  sample: bool = True) -> set[int] | None:
    """The union of the decoded frames the (name, severity, seed) requests read from an n-frame video (and the
    uniform sample when `sample`: clean clips use it), or None when one of them reads every frame."""
    indices = uniform_indices(n, num_frames)
    needed = {int(i) for i in indices} if sample else set()
    for name, severity, seed in requests:
        more = get(name).frames(n, indices, int(severity), int(seed))
        if more is None:
            return None
        needed.update(int(i) for i in more)
    return needed


def check_severity(severity: int) -> int:
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or int(severity) not in SEVERITIES:
        raise ValueError(f"severity must be one of {list(SEVERITIES)}, got {severity!r}")
    return int(severity)


def find_files(folder: str, extensions: tuple[str, ...]) -> tuple[str, ...]:
    """Every file under `folder` (recursive) whose name ends with one of `extensions` (case-insensitive), as
    sorted absolute paths, so asset choices do not depend on the file system's listing order."""
    import os

    found = [os.path.abspath(os.path.join(root, f)) for root, _dirs, files in os.walk(folder)
             for f in files if f.lower().endswith(extensions)]
    return tuple(sorted(found))


# frame pixels a type turns into float at once: all 12 frames of a 320x240 clip, 2 of a 720p one (a float32 copy of
# 12 720p frames is 133 MB, and a type makes several), so a clip's working set stays bounded (render_memory.py)
CHUNK_PIXELS = 1 << 21


def frame_chunks(t: int, h: int, w: int) -> list[slice]:
    """Consecutive slices of a clip's t frames of h x w, each of at most CHUNK_PIXELS pixels (at least 1 frame)."""
    step = max(1, CHUNK_PIXELS // max(1, h * w))
    return [slice(a, min(t, a + step)) for a in range(0, t, step)]


def to_float(frames: np.ndarray) -> np.ndarray:
    """uint8 -> float32 in [0, 1]."""
    return frames.astype(np.float32) / 255.0


def to_uint8(x: np.ndarray) -> np.ndarray:
    """float in [0, 1] -> uint8 by truncation `(y * 255).astype(uint8)`, as the reference does."""
    return (np.clip(x, 0.0, 1.0) * 255).astype(np.uint8)
