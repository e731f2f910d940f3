"""h264_compression old vs new vs the reference's ffmpeg CLI call, on the same frames, side by side in one run.

    python -m benchmarks.h264_psnr [--clips long,short] [--extra-rates 2000000,20000000] [--smoke]

Per clip and severity: PSNR (dB) of the 12 frames the uniform rule picks against the clean frames at those indices,
the actual elementary-stream bitrate (kbit/s) and the mean signed pixel shift (decoded - clean, grey levels) of
- old: the settings h264_compression used up to render version 3, kept here only: yuv420p (swscale bicubic, odd
  sizes edge-padded), maxrate = target with a 0.5 s VBV, mbtree off, one thread;
- new: workloads/perturbations/video/h264_compression.py as it is (yuv444p, plain ABR, mbtree on, out-of-band
  headers, one thread, x264 SIMD capped at SSE4.2);
- new, auto SIMD: the same with x264's own SIMD choice (AVX-512 where the CPU has it): the PSNR cost of the cap;
- CLI 1 thread / CLI auto threads: the reference's call (bgr24 frames piped into `ffmpeg ... -vcodec libx264 -b:v
  <rate> -preset fast out.mp4`, read back with cv2.VideoCapture), with `-threads 1` and with the CLI's own thread
  count (what the authors ran);
and the authors' figures measured on their own clips (issue #7; different content, so beside, not against).
Clips: `long` = 240 frames 240x320, `short` = 32 frames 120x160 (the issue's two sizes), both
benchmarks/real_video.py's panning scene (texture, moving disc, frame counter, film grain) at 30 fps; `smooth` =
240 frames 240x320 of a smoother scene without grain (closer to the authors' PSNR levels on real clips).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import platform
import shutil
import subprocess
import tempfile
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from benchmarks.real_video import _scene  # noqa: E402
from workloads.perturbations.video import h264_compression as h264  # noqa: E402
from workloads.perturbations.video import render  # noqa: E402
from workloads.video_io import uniform_indices  # noqa: E402

FPS = 30.0
CLIPS = {"long": (240, 240, 320), "short": (32, 120, 160), "smooth": (240, 240, 320)}  # frames, height, width
# the authors' pipeline on their clips, issue #7: PSNR (dB) per severity, and bitrates (bit/s) on the long clip
# (the smooth clip has the long clip's size, so the long figures stand beside it too)
AUTHORS_PSNR = {"long": (43.3, 39.7, 34.8, 29.2, 22.8), "short": (42.3, 39.1, 34.4, 30.5, 26.4),
                "smooth": (43.3, 39.7, 34.8, 29.2, 22.8)}
AUTHORS_KBPS = {"long": (347, 186, 75, 41, 29), "smooth": (347, 186, 75, 41, 29)}
OLD_VBV_SECONDS = 0.5


def smooth_scene(n: int, w: int, h: int, seed: int = 0):
    """A slow pan over a smooth texture with a moving disc: no grain, little detail."""
    rng = np.random.default_rng(seed)
    tex = cv2.GaussianBlur(rng.integers(0, 256, (2 * h, 2 * w, 3), dtype=np.uint8), (0, 0), 6)
    tex = cv2.normalize(tex, None, 30, 220, cv2.NORM_MINMAX)
    for i in range(n):
        x, y = int(w / 4 * (1 + np.sin(i / 120))), int(h / 4 * (1 + np.cos(i / 160)))
        f = tex[y:y + h, x:x + w].copy()
        cv2.circle(f, (int(w * (0.5 + 0.3 * np.sin(i / 40))), int(h * (0.5 + 0.2 * np.cos(i / 60)))), h // 8,
                   (200, 60, 50), -1)
        yield f


def old_encode_decode(video: np.ndarray, bitrate: int, fps: float) -> tuple[np.ndarray, int]:
    """The pre-version-4 encoder (yuv420p + VBV cap + mbtree off), decoded back to RGB; returns frames, bytes."""
    n, h, w, _ = video.shape
    rate = Fraction(fps).limit_denominator(100_000)
    enc = av.CodecContext.create("libx264", "w")
    eh, ew = h + h % 2, w + w % 2
    enc.width, enc.height, enc.pix_fmt = ew, eh, "yuv420p"
    enc.time_base, enc.framerate, enc.bit_rate, enc.thread_count = 1 / rate, rate, int(bitrate), 1
    enc.options = {"preset": "fast", "maxrate": str(int(bitrate)), "bufsize": str(int(bitrate * OLD_VBV_SECONDS)),
                   "threads": "1", "x264-params": "mbtree=0"}
    packets = []
    for i, frame in enumerate(video):
        if h % 2 or w % 2:
            frame = cv2.copyMakeBorder(frame, 0, h % 2, 0, w % 2, cv2.BORDER_REPLICATE)
        vf = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="yuv420p", interpolation="BICUBIC")
        vf.pts = i
        packets += [bytes(p) for p in enc.encode(vf)]
    packets += [bytes(p) for p in enc.encode(None)]
    dec = av.CodecContext.create("h264", "r")
    dec.thread_count = 1
    out = []
    for data in packets + [None]:
        for f in dec.decode(av.Packet(data) if data is not None else None):
            out.append(f.to_ndarray(format="rgb24", interpolation="BICUBIC")[:h, :w])
    return np.stack(out), sum(map(len, packets))


def cli_encode_decode(video: np.ndarray, bitrate: int, fps: float, threads: int | None, folder: Path):
    """The reference's call; returns all frames (RGB, read with cv2.VideoCapture), stream bytes, pixel format."""
    n, h, w, _ = video.shape
    path = folder / f"cli_{bitrate}_{threads}.mp4"
    cmd = ["ffmpeg", "-y", "-loglevel", "error", "-f", "rawvideo", "-vcodec", "rawvideo", "-s", f"{w}x{h}",
           "-pix_fmt", "bgr24", "-r", str(fps), "-i", "-", "-an", "-vcodec", "libx264", "-b:v", str(bitrate),
           "-preset", "fast"] + (["-threads", str(threads)] if threads else []) + [str(path)]
    subprocess.run(cmd, input=np.ascontiguousarray(video[..., ::-1]).tobytes(), check=True)
    cap, frames = cv2.VideoCapture(str(path)), []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame[..., ::-1])
    cap.release()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pix_fmt = stream.codec_context.pix_fmt
        nbytes = sum(p.size for p in container.demux(stream) if p.size)
    return np.stack(frames), nbytes, pix_fmt


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / max(mse, 1e-12)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python -m benchmarks.h264_psnr --clips long --extra-rates 20000000",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", default="long,short,smooth", help="comma-separated, of: " + ", ".join(CLIPS))
    parser.add_argument("--extra-rates", default="20000000",
                        help="comma-separated bit rates (bit/s) measured after the five severities ('' for none)")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: the short clip, no extra rates; without the ffmpeg CLI, its columns left empty")
    args = parser.parse_args(argv)
    if args.smoke:
        args.clips, args.extra_rates = "short", ""
    clips = [c for c in args.clips.split(",") if c]
    bad = [c for c in clips if c not in CLIPS]
    if bad:
        parser.error(f"unknown clip {bad[0]!r}; choose from {', '.join(CLIPS)}")
    cli = shutil.which("ffmpeg") is not None
    if not cli and not args.smoke:
        parser.error("the ffmpeg CLI is needed (apt-get install ffmpeg)")
    if not cli:
        from benchmarks.provenance import smoke_skips

        smoke_skips("the ffmpeg CLI's columns", "no ffmpeg here")
    extra = [int(r) for r in args.extra_rates.split(",") if r]
    version = (subprocess.run(["ffmpeg", "-version"], capture_output=True, text=True).stdout.split("\n")[0] if cli
               else "none")
    print(f"PyAV {av.__version__} (libavcodec {av.library_versions['libavcodec']}), CLI: {version}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; x264 asm: {h264.x264_asm()}")
    capped = h264.x264_asm
    for name in clips:
        n, h, w = CLIPS[name]
        video = np.stack(list((smooth_scene if name == "smooth" else _scene)(n, w, h)))
        idx = uniform_indices(n, 12)
        clean = video[idx]
        print(f"\n### clip {name}: {n} frames {h}x{w} at {FPS:g} fps; PSNR dB / kbit/s / mean shift (grey levels)")
        print("| sev | target | old | new | new, auto SIMD | CLI 1 thread | CLI auto threads | authors |")
        print("|---|---|---|---|---|---|---|---|")
        rates = list(enumerate(h264.BITRATES, 1)) + [(None, r) for r in extra]
        with tempfile.TemporaryDirectory() as tmp:
            for sev, rate in rates:
                cells = []
                frames, nbytes = old_encode_decode(video, rate, FPS)
                cells.append((frames[idx], nbytes))
                if sev is not None:
                    r = render("h264_compression", video, sev, fps=FPS)
                    cells.append((r.frames, r.meta["measured_bitrate_bps"] * n / FPS / 8))
                    h264.x264_asm = lambda: None
                    try:
                        r = render("h264_compression", video, sev, fps=FPS)
                    finally:
                        h264.x264_asm = capped
                    cells.append((r.frames, r.meta["measured_bitrate_bps"] * n / FPS / 8))
                else:  # beyond the five severities: the module's encoder at this rate
                    yuv = [av.VideoFrame.from_ndarray(f, format="rgb24").reformat(format="yuv444p").to_ndarray()
                           for f in video]
                    packets, extradata = h264.encode(yuv, w, h, rate, FPS)
                    kept, _, _ = h264.decode(packets, extradata, set(int(i) for i in idx))
                    cells.append((np.stack([kept[int(i)] for i in idx]), sum(map(len, packets))))
                    cells.append(None)
                for threads in (1, None) if cli else ():
                    frames, nbytes, pix_fmt = cli_encode_decode(video, rate, FPS, threads, Path(tmp))
                    assert pix_fmt == "yuv444p", pix_fmt
                    cells.append((frames[idx], nbytes))
                cells += [None, None] if not cli else []
                text = []
                for cell in cells:
                    if cell is None:
                        text.append("")
                        continue
                    frames, nbytes = cell
                    shift = float(np.mean(frames.astype(np.float64) - clean))
                    text.append(f"{psnr(frames, clean):.2f} / {nbytes * 8 * FPS / n / 1000:.0f}k / {shift:+.2f}")
                authors = ""
                if sev is not None and name in AUTHORS_PSNR:
                    authors = f"{AUTHORS_PSNR[name][sev - 1]}"
                    if name in AUTHORS_KBPS:
                        authors += f" / {AUTHORS_KBPS[name][sev - 1]}k"
                print(f"| {sev or '-'} | {rate // 1000}k | " + " | ".join(text) + f" | {authors} |", flush=True)


if __name__ == "__main__":
    main()
