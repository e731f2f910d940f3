"""h264_compression against the reference's own encoder: an independent encode of the same frames through the ffmpeg
CLI, called as the reference calls it (raw bgr24 frames on a pipe, `-c:v libx264 -b:v <rate> -preset fast`, no
-pix_fmt, an mp4 read back with cv2.VideoCapture). Needs the `ffmpeg` command (Debian package ffmpeg, which
.ci/run installs); skipped with the reason where it is absent. ~4 s here."""
from __future__ import annotations

import shutil
import subprocess

import av
import cv2
import numpy as np
import pytest

from workloads.perturbations.video import render
from workloads.perturbations.video import h264_compression as h264
from workloads.perturbations.video._registry import ClipContext
from workloads.video_io import uniform_indices

FFMPEG = shutil.which("ffmpeg")
needs_ffmpeg = pytest.mark.skipif(FFMPEG is None, reason="the ffmpeg CLI is not installed (apt-get install ffmpeg)")


def scene(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    """A camera panning over a blurred-noise texture with a moving disc and light grain, RGB uint8 [n, h, w, 3]."""
    rng = np.random.default_rng(seed)
    tex = cv2.GaussianBlur(rng.integers(0, 256, (2 * h, 2 * w, 3), dtype=np.uint8), (0, 0), 1.5)
    tex = cv2.normalize(tex, None, 0, 255, cv2.NORM_MINMAX)
    frames = []
    for i in range(n):
        x, y = int(w / 2 * (1 + np.sin(i / 20))), int(h / 2 * (1 + np.cos(i / 30)))
        f = tex[y:y + h, x:x + w].copy()
        cv2.circle(f, (int(w * (0.5 + 0.4 * np.sin(i / 8))), int(h * (0.5 + 0.3 * np.cos(i / 12)))), h // 6,
                   (230, 40, 40), -1)
        frames.append(np.clip(f.astype(np.int16) + rng.integers(-4, 5, f.shape), 0, 255).astype(np.uint8))
    return np.stack(frames)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / max(mse, 1e-12)))


def cli_encode(video: np.ndarray, bitrate: int, fps: float, path) -> tuple[np.ndarray, str]:
    """The reference's call: bgr24 frames piped into the ffmpeg CLI, an mp4 read back with cv2.VideoCapture.
    Returns all decoded frames (RGB) and the stream's pixel format."""
    n, h, w, _ = video.shape
    cmd = [FFMPEG, "-y", "-loglevel", "error", "-f", "rawvideo", "-vcodec", "rawvideo", "-s", f"{w}x{h}",
           "-pix_fmt", "bgr24", "-r", str(fps), "-i", "-", "-an", "-vcodec", "libx264", "-b:v", str(bitrate),
           "-preset", "fast", str(path)]
    subprocess.run(cmd, input=np.ascontiguousarray(video[..., ::-1]).tobytes(), check=True, timeout=120)
    cap = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame[..., ::-1])
    cap.release()
    with av.open(str(path)) as container:
        pix_fmt = container.streams.video[0].codec_context.pix_fmt
    return np.stack(frames), pix_fmt


@pytest.fixture(scope="module")
def clip() -> np.ndarray:
    return scene(60, 96, 128)


@needs_ffmpeg
def test_psnr_per_severity_within_1db_of_the_ffmpeg_cli(clip, tmp_path):
    clean = ClipContext(clip).sampled
    idx = uniform_indices(len(clip), 12)
    ours, cli = [], []
    for s, bitrate in enumerate(h264.BITRATES, 1):
        r = render("h264_compression", clip, s)
        ref, pix_fmt = cli_encode(clip, bitrate, 30.0, tmp_path / f"s{s}.mp4")
        assert pix_fmt == "yuv444p"  # what the CLI makes of bgr24 without -pix_fmt
        assert len(ref) == len(clip) == r.meta["decoded_frames"]
        ours.append(psnr(r.frames, clean))
        cli.append(psnr(ref[idx], clean))
    assert all(abs(a - b) < 1.0 for a, b in zip(ours, cli)), (ours, cli)
    # the severities bind on this clip (a test that every severity matches is no test if all are near lossless)
    assert all(a > b + 1 for a, b in zip(cli, cli[1:])), cli


@needs_ffmpeg
def test_odd_size_and_fractional_fps_match_the_cli(tmp_path):
    """Odd sizes go through as they are in 4:4:4; the frame rate sets the bits per frame, as the CLI's -r does."""
    clip = scene(45, 57, 75, seed=1)
    fps = 30000 / 1001  # what cv2 reports for NTSC video; the reference passes str(fps) to -r
    r = render("h264_compression", clip, 3, fps=fps)
    ref, pix_fmt = cli_encode(clip, h264.BITRATES[2], fps, tmp_path / "odd.mp4")
    clean = ClipContext(clip).sampled
    assert r.frames.shape == (12, 57, 75, 3) and pix_fmt == "yuv444p"
    assert abs(psnr(r.frames, clean) - psnr(ref[uniform_indices(len(clip), 12)], clean)) < 1.0


def test_stream_is_yuv444p_high_444():
    clip = scene(12, 48, 64)
    yuv = [av.VideoFrame.from_ndarray(f, format="rgb24").reformat(format="yuv444p").to_ndarray() for f in clip]
    packets, extradata = h264.encode(yuv, 64, 48, 100_000, 30.0)
    assert extradata and not any(p.startswith(extradata) for p in packets)  # parameter sets out of band
    dec = av.CodecContext.create("h264", "r")  # an independent decoder, not h264.decode
    dec.extradata = extradata
    frames = [f for p in packets for f in dec.decode(av.Packet(p))] + list(dec.decode(None))
    assert len(frames) == 12 and {f.format.name for f in frames} == {"yuv444p"}
    assert dec.profile == "High 4:4:4 Predictive"
    r = render("h264_compression", clip, 3)
    assert (r.meta["pix_fmt"], r.meta["profile"]) == ("yuv444p", "High 4:4:4 Predictive")
    assert r.meta["faithful"] is True and "no VBV" in r.meta["rate_control"]


def test_repeated_encodes_give_the_same_bytes(clip):
    """x264's AVX-512 code with mbtree changed the bytes from call to call (module docstring); across processes:
    tests/test_video_perturbations.py::test_every_type_renders_identical_bytes_in_another_process."""
    yuv = [av.VideoFrame.from_ndarray(f, format="rgb24").reformat(format="yuv444p").to_ndarray() for f in clip]
    for bitrate in (250_000, 25_000):
        runs = [h264.encode(yuv, 128, 96, bitrate, 30.0) for _ in range(4)]
        assert all(run == runs[0] for run in runs[1:]), bitrate
