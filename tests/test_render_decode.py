"""Renders decode only the frames their types read (workloads/perturbations/video/__init__.py: read_for), and H.264
converts only the sampled frames of its decoded stream (h264_compression.decode_sampled): both must give the same
bytes as decoding everything."""
from __future__ import annotations

import av
import numpy as np
import pytest

from workloads.perturbations.video import NAMES, read_for, render_many
from workloads.perturbations.video import h264_compression as h264
from workloads.perturbations.video._registry import frames_needed
from workloads.video_io import SparseVideo, read_video, read_video_frames, uniform_indices


def _clip(n: int = 72, h: int = 48, w: int = 64) -> np.ndarray:
    rng = np.random.default_rng(3)
    tex = rng.integers(0, 256, (h + 2 * n, w + 3 * n, 3), dtype=np.uint8)
    return np.stack([tex[t:t + h, 2 * t:2 * t + w] for t in range(n)])


@pytest.fixture(scope="module")
def video_file(tmp_path_factory):
    """An H.264 mp4 with B-frames and a keyframe every 16 frames, so the seeking reader seeks and skips."""
    path = tmp_path_factory.mktemp("decode") / "clip.mp4"
    frames = _clip()
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.codec_context.thread_count = 1
        stream.options = {"preset": "veryfast", "threads": "1", "x264-params": "mbtree=0:keyint=16:bframes=3"}
        for f in frames:
            for p in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(p)
        for p in stream.encode():
            container.mux(p)
    return path


def test_every_type_alone_renders_the_same_bytes_from_its_frames_only(video_file):
    full = read_video(video_file)
    sparse_types = set()
    for name in NAMES:
        for severity in (1, 5):
            req = [(name, severity, 11)]
            stats: dict = {}
            video = read_for(video_file, req, stats=stats)
            ours = render_many(video, req, clip_seed=5, fps=30.0)[0]
            ref = render_many(full, req, clip_seed=5, fps=30.0)[0]
            assert np.array_equal(ours.frames, ref.frames), (name, severity)
            assert ours.meta == ref.meta, (name, severity)
            if isinstance(video, SparseVideo):
                sparse_types.add(name)
                assert len(video.indices) < len(full)
                # only H.264 streams the file (every frame once, none held beyond the uniform sample)
                assert (video.source is not None) == (name == "h264_compression")
    # every type decodes a part (motion blur and defocus: sampled frames and the ones before them, temporal
    # scrambling: its own draw); H.264 holds the uniform sample only and streams the rest
    assert sparse_types == set(NAMES)


def test_all_types_together_render_the_same_bytes(video_file):
    full = read_video(video_file)
    req = [(n, s, 2) for n in NAMES for s in (1, 3, 5)]
    video = read_for(video_file, req)
    assert isinstance(video, SparseVideo) and video.source is not None
    ours = render_many(video, req, clip_seed=1, fps=30.0)
    for a, b in zip(ours, render_many(full, req, clip_seed=1, fps=30.0)):
        assert np.array_equal(a.frames, b.frames) and a.meta == b.meta, (a.name, a.severity)
    # H.264's three severities were encoded side by side in one pass over the file: the same bytes as one by one
    alone = [render_many(video, [("h264_compression", s, 2)], fps=30.0)[0] for s in (1, 3, 5)]
    together = [r for r in ours if r.name == "h264_compression"]
    assert all(np.array_equal(a.frames, b.frames) for a, b in zip(alone, together))


def test_bounded_working_set_renders_the_same_bytes(video_file, monkeypatch):
    """At HD the types work on a few frames at a time (registry.frame_chunks) and the blur filter keeps no padded
    copy or spectrum of the clip (_blur.CACHE_BYTES): forcing both at this size gives the same bytes."""
    from workloads.perturbations.video import _blur, _registry

    req = [(n, s, 4) for n in NAMES for s in (1, 2, 4, 5)]
    video = read_for(video_file, req)
    default = render_many(video, req, clip_seed=2, fps=30.0)
    monkeypatch.setattr(_registry, "CHUNK_PIXELS", 1)  # one frame at a time
    monkeypatch.setattr(_blur, "CACHE_BYTES", 0)  # nothing kept between kernels
    for a, b in zip(default, render_many(video, req, clip_seed=2, fps=30.0)):
        assert np.array_equal(a.frames, b.frames) and a.meta == b.meta, (a.name, a.severity)


def test_each_types_shared_work_is_dropped_after_its_last_request(video_file):
    """iter_render releases a type's memo entries once its requests are done (flow is shared by the two blurs)."""
    from workloads.perturbations.video import ClipContext, iter_render

    req = [("motion_blur", 1, 0), ("gaussian_noise", 1, 0), ("video_defocus", 2, 0), ("motion_blur", 3, 0),
           ("video_defocus", 4, 0), ("h264_compression", 2, 0), ("fog", 5, 0)]
    video = read_for(video_file, req)
    ctx = ClipContext(video, assets={"fps": 30.0})
    seen = [(r.name, sorted(str(k) for k in ctx._memo)) for r in iter_render(video, req, context=ctx)]
    flow_kept = [name for name, keys in seen if any("_flow" in k for k in keys)]
    # the flow lives from the first blur to the last defocus, then goes; H.264's packets go with H.264
    assert flow_kept == ["motion_blur", "gaussian_noise", "video_defocus", "motion_blur"], seen
    assert not any("_h264" in k for _, keys in seen[5:] for k in keys), seen
    assert all(keys == ["sampled"] for _, keys in seen[5:]), seen


def test_sparse_video_holds_read_videos_pixels_and_refuses_the_rest(video_file):
    full = read_video(video_file)
    pick = [0, 15, 16, 17, 40, 71]
    video = read_video_frames(video_file, lambda n: pick)
    assert isinstance(video, SparseVideo) and video.shape == full.shape and len(video) == len(full)
    assert video.indices == pick
    assert np.array_equal(video[np.array(pick)], full[pick]) and np.array_equal(video[-1], full[-1])
    with pytest.raises(KeyError, match="frame 3 of 72 was not decoded"):
        video[3]
    with pytest.raises(TypeError, match="index it"):
        np.asarray(video)
    assert isinstance(read_video_frames(video_file, lambda n: None), np.ndarray)  # None: everything


def test_frames_needed_by_type():
    n, idx = 72, uniform_indices(72, 12)
    assert frames_needed([("gaussian_noise", 3, 0)], n) == set(idx.tolist())
    assert frames_needed([("motion_blur", 3, 0)], n) == set(idx.tolist()) | set((idx - 1).tolist())
    # H.264 streams every frame (ClipContext.frames_in_order) and holds none: it adds nothing to the decode
    assert frames_needed([("gaussian_noise", 3, 0), ("h264_compression", 1, 0)], n) == set(idx.tolist())


def test_h264_sampled_decode_equals_full_decode():
    clip = _clip(60, 48, 64)
    yuv = [h264._to_yuv(f, i) for i, f in enumerate(clip)]
    wanted = {int(i) for i in uniform_indices(len(clip), 12)}
    for bitrate in (500_000, 25_000):
        packets, pts, extradata = h264._encode(yuv, 64, 48, bitrate, 30.0)
        kept, info = h264.decode_sampled(packets, pts, extradata, wanted)
        full, count, full_info = h264.decode(packets, extradata, wanted)
        assert count == len(clip) and info == full_info and set(kept) == wanted
        assert all(np.array_equal(kept[i], full[i]) for i in wanted), bitrate
        # the packets' timestamps are what identifies frames: without them, no shortcut
        assert h264.decode_sampled(packets, [None] * len(packets), extradata, wanted) is None


def test_h264_alone_decodes_nothing_up_front(video_file):
    """A render of H.264 only (no clean clip in the row: render_video's sample=False) holds no decoded frame and
    streams the file, with the bytes of a render from every frame."""
    req = [("h264_compression", s, 3) for s in (2, 4)]
    video = read_for(video_file, req, sample=False)
    assert isinstance(video, SparseVideo) and video.indices == [] and video.source is not None
    assert video.shape == read_video(video_file).shape
    ours = render_many(video, req, fps=30.0)
    ref = render_many(read_video(video_file), req, fps=30.0)
    assert all(np.array_equal(a.frames, b.frames) and a.meta == b.meta for a, b in zip(ours, ref))
