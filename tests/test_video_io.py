import av
import numpy as np
import pytest

from workloads.video_io import (VideoDecodeError, frames_to_model_input, read_frames, read_video, resize_center_crop,
                                uniform_indices, write_mp4)


def test_uniform_rule_by_hand():
    # n=24, 12 frames: edges 0,2,4,...,24 -> midpoints (a+b-1)//2 = 0,2,4,...,22
    assert uniform_indices(24, 12).tolist() == list(range(0, 24, 2))
    # n=100: edges linspace(0,100,13).astype(int) = 0,8,16,25,33,41,50,58,66,75,83,91,100
    edges = [0, 8, 16, 25, 33, 41, 50, 58, 66, 75, 83, 91, 100]
    assert uniform_indices(100, 12).tolist() == [(a + b - 1) // 2 for a, b in zip(edges[:-1], edges[1:])]
    # shorter than 12: repeat the last frame
    assert uniform_indices(5, 12).tolist() == [0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4]
    with pytest.raises(ValueError):
        uniform_indices(0, 12)


def moving_square(n=20, h=64, w=64):
    frames = np.zeros((n, h, w, 3), np.uint8)
    for i in range(n):
        frames[i, 20:36, 2 * i:2 * i + 16] = (230, 40, 40)
    return frames


def test_h264_round_trip_through_decord(tmp_path):
    frames = moving_square()
    path = tmp_path / "clip.mp4"
    write_mp4(path, frames, fps=8)
    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name == "h264"
    decoded = read_video(path)
    assert decoded.shape == frames.shape and decoded.dtype == np.uint8
    assert np.abs(decoded.astype(int) - frames).mean() < 4  # CRF 18: near-lossless
    sampled = read_frames(path, 12)
    assert sampled.shape == (12, 64, 64, 3)
    np.testing.assert_array_equal(sampled, decoded[uniform_indices(20, 12)])
    assert not list(tmp_path.glob(".*tmp*")), "no temporary file left behind"


def test_decord_rejected_stream_falls_back_to_pyav(tmp_path):
    # decord 0.6 cannot copy out 48-pixel-wide H.264 frames; PyAV decodes them
    frames = moving_square(n=8, h=32, w=48)
    path = tmp_path / "w48.mp4"
    write_mp4(path, frames)
    assert read_video(path).shape == (8, 32, 48, 3)
    assert read_frames(path, 12).shape == (12, 32, 48, 3)


def test_corrupt_and_missing_files_raise_with_path(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00not a video" * 50)
    for fn in (read_video, lambda p: read_frames(p, 12)):
        with pytest.raises(VideoDecodeError) as info:
            fn(bad)
        assert str(bad) in str(info.value) and info.value.path == str(bad)
    with pytest.raises(VideoDecodeError, match="file not found"):
        read_video(tmp_path / "none.mp4")


def test_write_rejects_bad_frames(tmp_path):
    with pytest.raises(ValueError, match="even frame sizes"):
        write_mp4(tmp_path / "x.mp4", np.zeros((2, 33, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        write_mp4(tmp_path / "x.mp4", np.zeros((2, 32, 32, 3), np.float32))


def test_resize_center_crop_and_model_input():
    frames = np.zeros((3, 240, 320, 3), np.uint8)
    frames[:, :, 30:290] = 255  # a white band wider than the centre crop (cols ~37..283 of 320)
    out = resize_center_crop(frames, 64)
    assert out.shape == (3, 64, 64, 3) and out.dtype == np.uint8
    assert out.min() > 200  # the crop keeps the centre
    x = frames_to_model_input(out)
    assert tuple(x.shape) == (3, 3, 64, 64)


def test_decode_error_survives_pickling_across_workers():
    import pickle

    err = pickle.loads(pickle.dumps(VideoDecodeError("/data/v.mp4", "moov atom not found")))
    assert err.path == "/data/v.mp4" and err.reason == "moov atom not found" and "/data/v.mp4" in str(err)


def encode(path, frames, fps=30, params="", pix_fmt="yuv420p", fmt=None, codec="libx264"):
    """A real encode with chosen GOP/B-frames/colour tags (write_mp4 fixes its own settings)."""
    with av.open(str(path), mode="w", format=fmt) as c:
        s = c.add_stream(codec, rate=fps)
        s.width, s.height, s.pix_fmt = frames.shape[2], frames.shape[1], pix_fmt
        if codec == "libx264":
            s.options = {"preset": "veryfast", "crf": "20", "x264-params": params or "keyint=30"}
        else:
            s.options = {"bf": "2"}
            s.codec_context.max_b_frames = 2
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def textured(n, h, w, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (h, 3 * w, 3), dtype=np.uint8)
    return np.stack([np.roll(base, -3 * i, axis=1)[:, :w] for i in range(n)])


@pytest.mark.parametrize("case", ["b_frames_gop30", "gop250_no_b", "bt709", "full_range", "short"])
def test_seeking_reader_gives_the_full_decodes_frames(tmp_path, case):
    from workloads.video_io import _read_frames_seeking

    n = 5 if case == "short" else 240
    frames = textured(n, 48, 64)
    params = {"b_frames_gop30": "keyint=30:bframes=3:b-pyramid=normal", "gop250_no_b": "bframes=0",
              "bt709": "keyint=40:colorprim=bt709:transfer=bt709:colormatrix=bt709"}.get(case, "keyint=30")
    path = encode(tmp_path / f"{case}.mp4", frames, params=params,
                  pix_fmt="yuvj420p" if case == "full_range" else "yuv420p")
    full = read_video(path)
    for num in (31, 7, 12, 3):
        stats = {}
        got = _read_frames_seeking(path, num, stats)
        np.testing.assert_array_equal(got, full[uniform_indices(len(full), num)])
        np.testing.assert_array_equal(read_frames(path, num), got)
        assert stats["packets"] == len(full)
    if case == "b_frames_gop30":  # 8 keyframes: 3 targets need the packets of 3 keyframe intervals at most
        assert stats["sent_to_decoder"] <= 3 * 30


def test_avi_with_b_frames_is_read_sequentially(tmp_path):
    import decord

    from workloads.video_io import _NotSeekable, _read_frames_seeking

    # MPEG-4 part 2 in AVI with B-frames (MSVD's clips are .avi); content that makes the encoder insert I-frames often
    frames = textured(40, 48, 64)
    path = encode(tmp_path / "clip.avi", frames, fmt="avi", codec="mpeg4")
    with pytest.raises(_NotSeekable):
        _read_frames_seeking(path, 12)
    full = read_video(path)
    idx = uniform_indices(len(full), 12)
    np.testing.assert_array_equal(read_frames(path, 12), full[idx])
    # why: decord's seeking get_batch returns other frames on this file
    sparse = decord.VideoReader(str(path), num_threads=1).get_batch(idx.tolist()).asnumpy()
    assert not np.array_equal(sparse, full[idx])


@pytest.mark.parametrize("kind", ["mp4", "avi", "w48"])
def test_iter_video_streams_read_videos_frames_and_sparse_reads_never_hold_the_clip(tmp_path, kind):
    """iter_video yields read_video's frames one at a time (H.264 streams a clip through it), and read_video_frames
    keeps only the picked frames: seeking in H.264 mp4s (also the 48 px wide one decord cannot open), straight
    through in AVIs."""
    from workloads.video_io import SparseVideo, iter_video, read_video_frames

    if kind == "w48":
        path = tmp_path / "w48.mp4"
        write_mp4(path, moving_square(n=30, h=32, w=48))
    else:
        path = encode(tmp_path / f"clip.{kind}", textured(40, 48, 64),
                      **({"fmt": "avi", "codec": "mpeg4"} if kind == "avi" else {"params": "keyint=10:bframes=2"}))
    full = read_video(path)
    streamed = list(iter_video(path))
    assert len(streamed) == len(full) and all(np.array_equal(a, b) for a, b in zip(streamed, full))
    pick = [0, 5, len(full) - 1]
    video = read_video_frames(path, lambda n: pick, stream=True)
    assert isinstance(video, SparseVideo) and video.indices == pick and np.array_equal(video[pick], full[pick])
    assert all(np.array_equal(a, b) for a, b in zip(video.iter_frames(), full))
