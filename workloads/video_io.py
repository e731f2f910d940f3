"""Video decoding, frame sampling and H.264 writing.

Decoding goes through decord (the reference's reader); writing goes through PyAV, whose wheel bundles FFmpeg with
libx264, so no system ffmpeg is needed. Frames are uint8 RGB arrays [N, H, W, 3] everywhere.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from workloads.atomic import atomic_path

# CLIP's normalisation constants (vtr_tta_study s2.0 / s4.1)
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
    """The reference's "uniform" rule (s2.0): split [0, n) into `num_frames` equal integer intervals
    (np.linspace(0, n, num_frames + 1).astype(int)) and take each interval's midpoint (a + b - 1) // 2.
    Videos shorter than `num_frames` repeat their last frame."""
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
    import av

    try:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except Exception as err:
        raise VideoDecodeError(path, f"{type(err).__name__}: {err}") from err
    if not frames:
        raise VideoDecodeError(path, "no frames")
    return np.stack(frames)


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
    """All frames of a video, uint8 [N, H, W, 3] RGB. decord first (the reference's reader); if decord cannot
    open the file, PyAV's FFmpeg tries (decord 0.6 rejects some valid streams, e.g. 48-pixel-wide H.264).
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
    """`num_frames` frames sampled by the uniform rule, uint8 [num_frames, H, W, 3]. decord seeks to just those
    frames; when it fails, the whole video is decoded by `read_video` (with its PyAV fallback) and sampled."""
    if not Path(path).is_file():
        raise VideoDecodeError(path, "file not found")
    try:
        vr = _reader(path)
        n = len(vr)
        if n > 0:
            return vr.get_batch(uniform_indices(n, num_frames).tolist()).asnumpy()
    except Exception:  # decord's own errors; read_video reports both decoders' reasons if PyAV fails too
        pass
    video = read_video(path)
    return video[uniform_indices(len(video), num_frames)]


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


def write_mp4(path: str | os.PathLike, frames: np.ndarray, fps: float = 8.0, *, crf: int | None = 18,
              bitrate: int | None = None, preset: str = "veryfast", deterministic: bool = True) -> None:
    """Encode uint8 RGB frames [N, H, W, 3] to an H.264 .mp4 with libx264 (PyAV). Even width/height are
    required by yuv420p. Give `bitrate` (bits/s) for constant-bitrate style encoding, else `crf`.
    Written to a temporary name first, then renamed, so a crash never leaves a half-written video.

    `deterministic` (default) encodes with one thread and x264's macroblock-tree rate control off: with x264's
    defaults identical frames gave different bitstreams and decoded pixels from one process to another (~2% of
    64x64 clips; mbtree's result depended on the heap layout), with these settings they are byte-identical. One
    thread is also ~3x faster than x264's pool on small frames with 2 cores."""
    import av

    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"expected uint8 frames [N, H, W, 3], got {frames.dtype} {frames.shape}")
    n, h, w, _ = frames.shape
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
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
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
