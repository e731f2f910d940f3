"""Video decoding, frame sampling and H.264 writing.

Frames are uint8 RGB arrays [N, H, W, 3] everywhere. `read_video` decodes whole videos with decord (PyAV when decord
cannot open a file); `read_frames` decodes only the uniform rule's frames (PyAV, seeking to keyframes, for H.264/HEVC
in mp4/mov/mkv; sequential otherwise) and returns exactly the frames read_video has at those indices. Writing goes
through PyAV, whose wheel bundles FFmpeg with libx264, so no system ffmpeg is needed.

The authors read frames with OpenCV (`cv2.VideoCapture`: frame count from CAP_PROP_FRAME_COUNT, then one
CAP_PROP_POS_FRAMES seek + read per sampled index; bingqingzhang/vtr_tta, datasets/video_capture.py), not decord.
benchmarks/decoder_check.py compares the three decoders (decord 0.6.0, OpenCV 5.0.0, PyAV 18.1.0) on H.264 mp4s of
64x64, 320x240 and 1280x720 (untagged, BT.709-tagged, full range) and on MPEG-4 part 2 AVIs with B-frames: the same
frame count (decord = cv2 count = frames cv2 reads = PyAV), frame i is the same picture in all three, and the pixels
are identical (PSNR infinite) for every frame, including the frames the authors' seek-per-index sampler returns at
the 12 uniform indices. All three convert YUV to RGB with the matrix and range the stream is tagged with (BT.601
limited when untagged, BT.709 when tagged so, full range for yuvj420p): no colour difference. The one difference:
decord's seeking get_batch on sparse indices returned wrong frames on an AVI whose encoder placed I-frames between
B-frames (cv2's seeks were exact there), which is why read_frames never uses it. On the real-length H.264 files of
benchmarks/real_video.py all three samplers agree exactly. Not measured: variable frame rate files and mp4 edit
lists that drop frames (read_frames' seeking path refuses the latter and decodes sequentially).
"""
from __future__ import annotations

import bisect
import itertools
import os
from pathlib import Path

import numpy as np

from workloads.atomic import atomic_path

# CLIP's normalisation constants (OpenAI CLIP's preprocessing; docs/faithfulness.md: Common pipeline)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class VideoDecodeError(RuntimeError):
    """A video file could not be opened or decoded; carries the path."""

    def __init__(self, path: str | os.PathLike, reason: str):
        super().__init__(f"cannot decode {path}: {reason}")
        self.path = str(path)
        self.reason = reason

    def __reduce__(self):  # picklable across Ray workers (the default would pass only the message)
        return type(self), (self.path, self.reason)


def uniform_indices(n_frames: int, num_frames: int = 12) -> np.ndarray:
    """The authors' "uniform" rule (docs/faithfulness.md: Common pipeline): split [0, n) into `num_frames` equal
    integer intervals (np.linspace(0, n, num_frames + 1).astype(int)) and take each interval's midpoint
    (a + b - 1) // 2. Videos shorter than `num_frames` repeat their last frame."""
    if n_frames <= 0:
        raise ValueError(f"a video needs at least one frame, got n_frames={n_frames}")
    if num_frames <= 0:
        raise ValueError(f"num_frames must be positive, got {num_frames}")
    if n_frames < num_frames:
        idx = np.arange(num_frames)
        return np.minimum(idx, n_frames - 1).astype(np.int64)
    edges = np.linspace(0, n_frames, num_frames + 1).astype(int)
    return ((edges[:-1] + edges[1:] - 1) // 2).astype(np.int64)


def _reader(path: str | os.PathLike, width: int = -1, height: int = -1):
    import decord  # imported lazily: decord pulls in its native library

    if not Path(path).is_file():
        raise VideoDecodeError(path, "file not found")
    try:
        return decord.VideoReader(str(path), ctx=decord.cpu(0), width=width, height=height, num_threads=1)
    except Exception as err:  # decord raises its own DECORDError / RuntimeError
        raise VideoDecodeError(path, f"{type(err).__name__}: {err}") from err


def _read_pyav(path: str | os.PathLike) -> np.ndarray:
    return np.stack(list(_iter_pyav(path)))


def _decord_all(path: str | os.PathLike) -> np.ndarray:
    vr = _reader(path)
    n = len(vr)
    if n == 0:
        raise VideoDecodeError(path, "no frames")
    try:
        return vr.get_batch(list(range(n))).asnumpy()
    except Exception as err:
        raise VideoDecodeError(path, f"{type(err).__name__}: {err}") from err


def read_video(path: str | os.PathLike) -> np.ndarray:
    """All frames of a video, uint8 [N, H, W, 3] RGB. decord first (the authors read with cv2.VideoCapture; decord
    returns the same frame count and the same pixels, frame for frame, on the files benchmarks/decoder_check.py
    measured: module docstring); if decord cannot open the file, PyAV's FFmpeg tries (decord 0.6 rejects some valid
    streams, e.g. 48-pixel-wide H.264).
    A file neither can decode raises VideoDecodeError naming the path and both reasons."""
    if not Path(path).is_file():
        raise VideoDecodeError(path, "file not found")
    try:
        return _decord_all(path)
    except VideoDecodeError as first:
        try:
            return _read_pyav(path)
        except VideoDecodeError as second:
            raise VideoDecodeError(path, f"decord: {first.reason}; pyav: {second.reason}") from None


def read_frames(path: str | os.PathLike, num_frames: int = 12) -> np.ndarray:
    """`num_frames` frames sampled by the uniform rule, uint8 [num_frames, H, W, 3]: exactly the frames `read_video`
    returns at those indices.

    H.264 / HEVC in mp4, mov or mkv (the datasets' web videos) go through `_read_frames_seeking`: each target is
    decoded from the keyframe before it, skipping the frames nothing refers to (on a 3-minute 720p video with a
    keyframe every 5 s: ~1.5 s of CPU instead of ~11 s for a full decode; benchmarks/real_video.py). Other files
    (e.g. MPEG-4 part 2 in AVI, as MSVD's clips are) are decoded sequentially, keeping only the targets: decord's
    seeking get_batch returned wrong frames on AVI files with B-frames (benchmarks/decoder_check.py). When decord
    cannot open a file, `read_video` (with its PyAV fallback) decodes it and the targets are taken from that."""
    if not Path(path).is_file():
        raise VideoDecodeError(path, "file not found")
    try:
        return _read_frames_seeking(path, num_frames)
    except _NotSeekable:
        pass
    try:
        return _read_frames_sequential(path, num_frames)
    except Exception:  # decord's own errors; read_video reports both decoders' reasons if PyAV fails too
        pass
    video = read_video(path)
    return video[uniform_indices(len(video), num_frames)]


def _read_frames_sequential(path: str | os.PathLike, num_frames: int) -> np.ndarray:
    """The uniform rule's frames through `_read_indices_sequential` (stacked in the rule's order)."""
    n, got = _read_indices_sequential(path, lambda n: uniform_indices(n, num_frames))
    return np.stack([got[int(i)] for i in uniform_indices(n, num_frames)])


def _read_indices_sequential(path: str | os.PathLike, pick, chunk: int = 32) -> tuple[int, dict[int, np.ndarray]]:
    """decord, straight through in chunks of consecutive frames (no seek) up to the last frame `pick(n)` names,
    keeping only those: the memory of one chunk plus the kept frames, read_video's pixels. Returns (n, {index:
    frame})."""
    vr = _reader(path)
    n = len(vr)
    if n == 0:
        raise VideoDecodeError(path, "no frames")
    wanted = {int(i) for i in pick(n)}
    keep: dict[int, np.ndarray] = {}
    if not wanted:
        return n, keep
    last = max(wanted)
    for start in range(0, last + 1, chunk):
        stop = min(n, start + chunk, last + 1)
        # every chunk is decoded, none skipped: a skip is a seek, and decord's seeks on AVIs with B-frames return
        # other frames (module docstring)
        frames = vr.get_batch(list(range(start, stop))).asnumpy()
        for i in range(start, stop):
            if i in wanted:
                keep[i] = frames[i - start].copy()  # not a view: the chunk is freed
    return n, keep


def iter_video(path: str | os.PathLike, chunk: int = 8):
    """Every frame of a video in display order, uint8 [H, W, 3] RGB, the pixels `read_video` returns, one frame in
    memory at a time: PyAV decoding straight through with one thread, converting as the seeking reader does (the
    same pixels as decord's: module docstring); decord in chunks of `chunk` consecutive frames when PyAV cannot
    decode the file. PyAV first because decord decoding beside a libx264 encoder in one process (H.264's stream)
    raised the process's peak by ~800 MB at 720p (measured: 1.08 GB against 0.31 GB with PyAV as the source, for
    one encoder over 120 frames; workloads/render_memory.py). Raises VideoDecodeError as read_video does."""
    if not Path(path).is_file():
        raise VideoDecodeError(path, "file not found")
    count = 0
    try:
        for frame in _iter_pyav(path):
            count += 1
            yield frame
        return
    except VideoDecodeError as first:
        if count:  # frames were already handed out: a later error cannot restart the stream
            raise
        reason = first.reason
    try:
        vr = _reader(path)
        n = len(vr)
        if n == 0:
            raise VideoDecodeError(path, "no frames")
        for start in range(0, n, chunk):
            yield from vr.get_batch(list(range(start, min(n, start + chunk)))).asnumpy()
    except Exception as err:
        why = err.reason if isinstance(err, VideoDecodeError) else f"{type(err).__name__}: {err}"
        raise VideoDecodeError(path, f"pyav: {reason}; decord: {why}") from err


def _iter_pyav(path: str | os.PathLike):
    import av
    from av.video.reformatter import VideoReformatter

    count = 0
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoDecodeError(path, "no video stream")
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            rgb = VideoReformatter()  # one swscale context for the stream (a frame's own is rebuilt per frame)
            for frame in container.decode(stream):
                count += 1
                yield rgb.reformat(frame, format="rgb24", threads=1).to_ndarray()
    except VideoDecodeError:
        raise
    except Exception as err:
        raise VideoDecodeError(path, f"{type(err).__name__}: {err}") from err
    if count == 0:
        raise VideoDecodeError(path, "no frames")


class _NotSeekable(Exception):
    """This file is not one `_read_frames_seeking` handles exactly: use the general path."""


# containers whose packets carry one frame each with a presentation timestamp, and codecs whose non-reference
# frames the decoder can skip (FFmpeg's skip_frame=NONREF)
_SEEK_FORMATS = ("mov", "mp4", "matroska")
_SEEK_CODECS = ("h264", "hevc")


def _read_frames_seeking(path: str | os.PathLike, num_frames: int, stats: dict | None = None) -> np.ndarray:
    """The uniform rule's frames through `_read_indices_seeking` (stacked in the rule's order)."""
    n, got = _read_indices_seeking(path, lambda n: uniform_indices(n, num_frames), stats)
    return np.stack([got[int(i)] for i in uniform_indices(n, num_frames)])


def _read_indices_seeking(path: str | os.PathLike, pick, stats: dict | None = None
                          ) -> tuple[int, dict[int, np.ndarray]]:
    """PyAV, one thread: index the packets (no decoding) -> frame i = the i-th smallest timestamp, as a full decode
    numbers them; `pick(n)` (n = the frame count) gives the frame indices wanted; then for each keyframe that
    precedes a target, seek to it and decode forward to its targets, with the decoder skipping non-reference frames
    that are not targets (no other frame depends on them, so the targets' pixels are the same as in a full decode).
    RGB conversion as read_video's decoders do (FFmpeg's swscale with the stream's colour matrix and range;
    benchmarks/decoder_check.py). Returns (n, {index: frame}). Raises _NotSeekable when the file is outside what
    this handles exactly, or decoding fails. `stats` (a dict), if given, receives the number of packets, of packets
    sent to the decoder (after the seeks) and the stream's average frame rate."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise _NotSeekable
            stream = container.streams.video[0]
            ctx = stream.codec_context
            if ctx.name not in _SEEK_CODECS or not any(f in container.format.name for f in _SEEK_FORMATS):
                raise _NotSeekable
            ctx.thread_count = 1
            pts, keys = [], []
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue  # the flush packet at the end
                if packet.pts is None or packet.is_discard or packet.is_corrupt:
                    raise _NotSeekable  # edit-list cuts, missing timestamps: a full decode may number differently
                pts.append(packet.pts)
                if packet.is_keyframe:
                    keys.append(packet.pts)
            order = sorted(pts)
            if not order or len(set(order)) != len(order) or not keys or min(keys) != order[0]:
                raise _NotSeekable
            n = len(order)
            index_of = {t: i for i, t in enumerate(order)}
            wanted = sorted({order[int(i)] for i in pick(n)})
            keys.sort()
            groups: dict[int, set[int]] = {}
            for t in wanted:
                groups.setdefault(keys[bisect.bisect_right(keys, t) - 1], set()).add(t)
            got: dict[int, np.ndarray] = {}
            decoded = 0
            for key, targets in sorted(groups.items()):
                container.seek(key, stream=stream, backward=True)  # flushes the decoder
                for packet in container.demux(stream):
                    ctx.skip_frame = "DEFAULT" if packet.pts is None or packet.pts in targets else "NONREF"
                    decoded += 1
                    for frame in ctx.decode(packet):
                        if frame.pts in targets and frame.pts not in got:
                            got[frame.pts] = frame.to_ndarray(format="rgb24", threads=1)
                    if targets.issubset(got):
                        break
                ctx.skip_frame = "DEFAULT"
            if not set(wanted).issubset(got):
                raise _NotSeekable
            if stats is not None:
                rate = stream.average_rate
                stats.update(packets=n, sent_to_decoder=decoded, fps=float(rate) if rate else None,
                             shape=(ctx.height, ctx.width, 3))
            return n, {index_of[t]: f for t, f in got.items()}
    except (av.FFmpegError, OSError, ValueError):
        raise _NotSeekable from None


class SparseVideo:
    """Some decoded frames of an n-frame video, indexed like the full uint8 [n, H, W, 3] array would be (an int,
    or a sequence / array of ints); asking for a frame that was not decoded raises KeyError naming it. Made by
    `read_video_frames` for renderings that need only some frames (workloads/perturbations/video/_registry.py:
    frames_needed). With `source` (the video file), `iter_frames()` streams every frame in display order from it
    (`iter_video`), for renderings that read the whole clip once (H.264) without holding it."""

    def __init__(self, n: int, frames: dict[int, np.ndarray], source: str | os.PathLike | None = None,
                 frame_shape: tuple[int, int, int] | None = None):
        if not frames and (frame_shape is None or source is None):
            raise ValueError("a SparseVideo needs at least one frame, or a source file and the frames' shape")
        self._frames = {int(i): np.ascontiguousarray(f) for i, f in frames.items()}
        self.shape = (int(n), *(next(iter(self._frames.values())).shape if frames else frame_shape))
        self.dtype = np.dtype(np.uint8)
        self.ndim = 4
        self.source = None if source is None else str(source)

    def iter_frames(self):
        """Every frame of the source file in display order (iter_video); a SparseVideo without `source` raises."""
        if self.source is None:
            raise ValueError("this SparseVideo has no source file to stream every frame from")
        count = 0
        for frame in iter_video(self.source):
            if frame.shape != self.shape[1:]:
                raise VideoDecodeError(self.source, f"streamed frame {count} is {frame.shape}, "
                                                    f"expected {self.shape[1:]}")
            count += 1
            yield frame
        if count != self.shape[0]:
            raise VideoDecodeError(self.source, f"streamed {count} frames, the index counted {self.shape[0]}")

    def __len__(self) -> int:
        return self.shape[0]

    def has(self, i: int) -> bool:
        return int(i) in self._frames

    @property
    def indices(self) -> list[int]:
        return sorted(self._frames)

    def _one(self, i) -> np.ndarray:
        i = int(i)
        if i < 0:
            i += self.shape[0]
        try:
            return self._frames[i]
        except KeyError:
            raise KeyError(f"frame {i} of {self.shape[0]} was not decoded (SparseVideo holds {self.indices[:8]}"
                           f"{'...' if len(self._frames) > 8 else ''})") from None

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            return self._one(key)
        if isinstance(key, slice):
            key = range(*key.indices(self.shape[0]))
        idx = np.asarray(key)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"SparseVideo takes an int or a 1-d sequence of ints, got {key!r}")
        return np.stack([self._one(i) for i in idx]) if len(idx) else np.empty((0, *self.shape[1:]), self.dtype)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a SparseVideo holds only some frames; index it (video[k], video[indices]) instead")


def read_video_frames(path: str | os.PathLike, pick, stats: dict | None = None, stream: bool = False):
    """The frames `pick(n)` names (n = the video's frame count; `pick` returns indices, or None for all), as a
    SparseVideo holding exactly the pixels `read_video` has at those indices: seeking where the file is one the
    seeking reader handles exactly (module docstring), else decoded straight through keeping only those frames
    (never the whole video in memory); the whole video (read_video's array) only when `pick` returns None.
    `stream`: the SparseVideo also streams every frame from the file (SparseVideo.iter_frames); then `pick` may
    name no frame at all (an H.264 render alone needs none but the stream): the SparseVideo holds none.
    `stats`, if given, receives {"sparse": bool, "fps": the stream's average frame rate when read with PyAV}."""
    info: dict = {}
    if not Path(path).is_file():
        raise VideoDecodeError(path, "file not found")
    everything = False

    def pick_or_flag(n: int):
        nonlocal everything
        chosen = pick(n)
        if chosen is None:
            everything = True
            return []
        return chosen

    got: dict[int, np.ndarray] | None = None
    try:
        n, got = _read_indices_seeking(path, pick_or_flag, info)
        if not got and not everything and stream and info.get("shape"):  # nothing to hold: the stream alone
            if stats is not None:
                stats.update(sparse=True, fps=info.get("fps"))
            return SparseVideo(n, {}, source=path, frame_shape=info["shape"])
    except _NotSeekable:
        if not everything:
            try:  # frame 0 at least: its shape is the clip's (the stream-only case picks none)
                n, got = _read_indices_sequential(path, lambda n: list(pick_or_flag(n)) or [0])
            except Exception:  # decord cannot open it (rare, e.g. 48-px-wide H.264): read_video's PyAV fallback
                everything = True  # reads the whole file, or raises naming both decoders' reasons
    if everything or not got:
        if stats is not None:
            stats.update(sparse=False, fps=None)
        return read_video(path)
    if stats is not None:
        stats.update(sparse=True, fps=info.get("fps"))
    return SparseVideo(n, got, source=path if stream else None)


def video_fps(path: str | os.PathLike) -> float:
    return float(_reader(path).get_avg_fps())


def resize_center_crop(frames: np.ndarray, size: int) -> np.ndarray:
    """Resize the shorter side to `size` (bicubic; area when shrinking, as antialiasing) then centre-crop to
    size x size, as the reference's clip_test transform does before normalisation. uint8 in, uint8 out."""
    import cv2

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"expected frames [N, H, W, 3], got shape {frames.shape}")
    n, h, w, _ = frames.shape
    scale = size / min(h, w)
    nh, nw = max(size, round(h * scale)), max(size, round(w * scale))
    if (nh, nw) != (h, w):
        interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
        frames = np.stack([cv2.resize(f, (nw, nh), interpolation=interp) for f in frames])
    top, left = (nh - size) // 2, (nw - size) // 2
    return np.ascontiguousarray(frames[:, top:top + size, left:left + size])


def write_mp4(path: str | os.PathLike, frames, fps: float = 8.0, *, crf: int | None = 18,
              bitrate: int | None = None, preset: str = "veryfast", deterministic: bool = True) -> None:
    """Encode uint8 RGB frames [N, H, W, 3] (an array, or an iterable of [H, W, 3] frames, encoded as they come: a
    long HD clip never needs to be in memory) to an H.264 .mp4 with libx264 (PyAV). Even width/height are
    required by yuv420p. Give `bitrate` (bits/s) for constant-bitrate style encoding, else `crf`.
    Written to a temporary name first, then renamed, so a crash never leaves a half-written video.

    `deterministic` (default) encodes with one thread and x264's macroblock-tree rate control off: with x264's
    defaults identical frames gave different bitstreams and decoded pixels from one process to another (~2% of
    64x64 clips; mbtree's result depended on the heap layout), with these settings they are byte-identical. One
    thread is also ~3x faster than x264's pool on small frames with 2 cores."""
    import av

    stream_in = iter(frames)
    first = next(stream_in, None)
    if first is None:
        raise ValueError("expected uint8 frames [N, H, W, 3], got none")
    first = np.asarray(first)
    if isinstance(frames, np.ndarray):
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"expected uint8 frames [N, H, W, 3], got {frames.dtype} {frames.shape}")
    elif first.dtype != np.uint8 or first.ndim != 3 or first.shape[-1] != 3:
        raise ValueError(f"expected uint8 frames [H, W, 3], got {first.dtype} {first.shape}")
    h, w = first.shape[:2]
    if h % 2 or w % 2:
        raise ValueError(f"H.264 (yuv420p) needs even frame sizes, got {h}x{w}")
    with atomic_path(path, suffix=".mp4") as tmp, av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("libx264", rate=int(round(fps)))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        options = {"preset": preset}
        if deterministic:
            stream.codec_context.thread_count = 1
            options.update({"threads": "1", "x264-params": "mbtree=0"})
        if bitrate is not None:
            stream.bit_rate = int(bitrate)
            # without a VBV cap libx264 overshoots low targets badly; cap at the target
            options.update({"maxrate": str(int(bitrate)), "bufsize": str(int(bitrate))})
        elif crf is not None:
            options["crf"] = str(crf)
        stream.options = options
        for frame in itertools.chain([first], stream_in):
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.asarray(frame), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def frames_to_model_input(frames, mean=CLIP_MEAN, std=CLIP_STD):
    """uint8 [..., T, H, W, 3] (numpy or torch) -> float32 torch [..., T, 3, H, W], scaled to [0, 1] and
    normalised with CLIP's statistics."""
    import torch

    x = torch.as_tensor(frames)
    if x.dtype != torch.uint8:
        raise TypeError(f"expected uint8 frames, got {x.dtype}")
    x = x.movedim(-1, -3).float().div_(255.0)
    m = torch.tensor(mean, dtype=x.dtype).view(3, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).view(3, 1, 1)
    return (x - m) / s
