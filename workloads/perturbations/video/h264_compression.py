"""H.264 compression (docs/faithfulness.md: H.264 compression): a real libx264 encode AND decode of the FULL frame
sequence at the source fps, encoded as the reference's ffmpeg CLI call encodes it.

The reference pipes raw bgr24 frames into `ffmpeg -f rawvideo -pix_fmt bgr24 -r <fps> -i - -an -vcodec libx264
-b:v <rate> -preset fast out.mp4` (rate 500k, 250k, 100k, 50k, 25k bit/s) and reads the result back with
cv2.VideoCapture; 12 frames are then sampled with the uniform rule from the decoded stream. With no `-pix_fmt` the
CLI hands libx264 the closest lossless format to bgr24, yuv444p, so the stream is High 4:4:4 Predictive with full
resolution chroma; `-b:v` alone is x264's plain ABR (no VBV), with x264's defaults for the rest (macroblock-tree rate
control on). Ours does the same through PyAV, whose wheel bundles FFmpeg with libx264, in memory (no temp files, no
ffmpeg CLI):
- RGB -> yuv444p through swscale (BT.601, limited range: what the CLI's automatic conversion does), once per clip
  and shared by all severities; odd frame sizes need no padding in 4:4:4;
- libx264 with preset fast, `bit_rate` = the target, nothing else set; the parameter sets go in the extradata (the
  global-header flag), as the CLI's mp4 muxer asks;
- decoded back to RGB by FFmpeg's h264 decoder and swscale (bicubic, as OpenCV's FFmpeg backend converts); only the
  12 sampled frames are converted, and the decoder skips the non-reference frames that are not sampled and stops
  after the last sampled one (decode_sampled: the same pixels as a full decode, tested);
- fps: the asset `fps` when given (render(..., fps=29.97)), else 30; a rational within 1/1001000, as ffmpeg parses
  the CLI's `-r str(fps)`.
Two settings the reference does not use, both for reproducibility (a render must be the same bytes in every
process: tests/test_video_perturbations.py checks it across processes, tests/test_h264_compression.py across calls):
- one encoder thread (the CLI picks a thread count from the core count, and x264's frame threads change the bytes);
- x264's SIMD limited to SSE4.2 on x86 (`asm=` below). The AVX-512 code of the libx264 bundled with PyAV made the
  same frames encode to different bytes from one process to another (and from call to call in one process) whenever
  mbtree was on; without AVX-512 the bytes are stable, and SSSE3 up to AVX2 all gave the same bytes (a 240-frame
  clip at two rates), so the render does not depend on which of those the machine has. The old workaround, mbtree
  off, changed the rate control itself.
benchmarks/h264_psnr.py measures both against the CLI on the same frames (docs/faithfulness.md: H.264 compression):
PSNR within 0.03 dB of the CLI with one thread, and -0.37 ... +0.28 dB (mean -0.03) from the CLI with its own thread
count, which itself moves by up to 1 dB between thread counts; so the type stays `faithful: true`.
"""
from __future__ import annotations

import platform
from fractions import Fraction

import av
import numpy as np

from workloads.perturbations.video._registry import ClipContext, register, stream_frames
from workloads.video_io import uniform_indices

NAME = "h264_compression"
BITRATES = (500_000, 250_000, 100_000, 50_000, 25_000)
PRESET = "fast"
PIX_FMT = "yuv444p"  # what the CLI picks for bgr24 input when no -pix_fmt is given
DEFAULT_FPS = 30.0
FPS_MAX_DENOMINATOR = 1_001_000  # ffmpeg's av_parse_video_rate bound
# x264's SIMD levels up to SSE4.2: every x86-64 CPU of the last 15 years has them (x86-64-v2)
X264_ASM_X86 = "MMX2,SSE,SSE2,SSE3,SSSE3,SSE4.1,SSE4.2"
# peak memory of one libx264 encoder at preset fast, yuv444p, per frame pixel (look-ahead and reference frames):
# measured 230 MB at 1280x720 (workloads/render_memory.py: how); ENCODE_BUDGET_BYTES bounds a pass's encoders
ENCODER_BYTES_PER_PIXEL = 250
ENCODE_BUDGET_BYTES = 768 << 20


def x264_asm() -> str | None:
    """The `asm` value given to x264: SIMD up to SSE4.2 on x86 CPUs that have it, x264's C code ("0") on older x86
    CPUs, and x264's own choice (None) elsewhere (ARM has no AVX-512)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "x86", "i686"):
        return None
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as features
        except ImportError:
            features = {}
    return X264_ASM_X86 if features.get("SSE42") else "0"


def _fps(ctx: ClipContext) -> float:
    fps = ctx.assets.get("fps")
    if fps is None:
        return DEFAULT_FPS
    fps = float(fps)
    if not np.isfinite(fps) or fps <= 0:
        return DEFAULT_FPS  # containers sometimes report 0 or NaN; the reference's ffmpeg would fail there
    return fps


def encoders_per_pass(width: int, height: int) -> int:
    """How many severities one pass over the clip encodes side by side within ENCODE_BUDGET_BYTES (at least 1)."""
    return int(max(1, min(len(BITRATES), ENCODE_BUDGET_BYTES // (ENCODER_BYTES_PER_PIXEL * width * height))))


def _to_yuv(frame: np.ndarray, pts: int) -> av.VideoFrame:
    """One RGB frame as the yuv444p frame every encoder of a pass gets (the encoder copies its input)."""
    # one swscale thread: the default spawns one per core, which only waits on a busy render actor's one CPU
    yuv = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format=PIX_FMT, threads=1)
    yuv.pts = pts
    return yuv


def _encoded(ctx: ClipContext, bitrate: int, fps: float) -> tuple[list[bytes], list[int | None], bytes, int]:
    """(packets, their pts, extradata, source frame count) of the clip at `bitrate`. The first call encodes this
    bitrate and the next ones the clip's requests still need, in one pass (module docstring); kept per clip until
    the severity is rendered."""
    store = ctx.memo("_h264.encoded", dict)  # bitrate -> its encode, or None once that severity is rendered
    if store.get(bitrate) is None:
        h, w = ctx.video.shape[1:3]
        todo = [bitrate] + [BITRATES[s - 1] for s in ctx.severities(NAME) if BITRATES[s - 1] not in store]
        rates = list(dict.fromkeys(todo))[:encoders_per_pass(w, h)]
        encoders = {rate: _Encoder(w, h, rate, fps) for rate in rates}
        n = 0
        for frame in ctx.frames_in_order():
            yuv = _to_yuv(frame, n)
            for enc in encoders.values():
                enc.encode(yuv)
            n += 1
        for rate, enc in encoders.items():
            store[rate] = (*enc.finish(), n)
    return store[bitrate]


def encode(yuv, width: int, height: int, bitrate: int, fps: float) -> tuple[list[bytes], bytes]:
    """libx264 packets (bytes) of the yuv444p frames (an iterable of planes [3, H, W] or av.VideoFrame), and the
    extradata (SPS/PPS) they need."""
    packets, _pts, extradata = _encode(yuv, width, height, bitrate, fps)
    return packets, extradata


class _Encoder:
    """libx264 as the reference's CLI call sets it up (module docstring), fed one yuv444p frame at a time."""

    def __init__(self, width: int, height: int, bitrate: int, fps: float):
        rate = Fraction(fps).limit_denominator(FPS_MAX_DENOMINATOR)
        enc = av.CodecContext.create("libx264", "w")
        enc.width, enc.height, enc.pix_fmt = width, height, PIX_FMT
        enc.time_base = 1 / rate
        enc.framerate = rate
        enc.bit_rate = int(bitrate)
        enc.flags |= av.codec.context.Flags.global_header  # headers out of band, as the CLI's mp4 muxer requests
        enc.thread_count = 1
        options = {"preset": PRESET, "threads": "1"}
        asm = x264_asm()
        if asm is not None:
            options["x264-params"] = f"asm={asm}"
        enc.options = options
        self._enc = enc
        self.packets: list[bytes] = []
        self.pts: list[int | None] = []

    def _take(self, out) -> None:
        for p in out:
            self.packets.append(bytes(p))
            self.pts.append(p.pts)

    def encode(self, frame: av.VideoFrame) -> None:
        self._take(self._enc.encode(frame))

    def finish(self) -> tuple[list[bytes], list[int | None], bytes]:
        """Flush: (packets, each packet's presentation timestamp = its frame's display index, extradata)."""
        self._take(self._enc.encode(None))
        return self.packets, self.pts, bytes(self._enc.extradata or b"")


def _encode(yuv, width: int, height: int, bitrate: int, fps: float
            ) -> tuple[list[bytes], list[int | None], bytes]:
    """encode(), plus each packet's presentation timestamp (= the display index of its frame)."""
    enc = _Encoder(width, height, bitrate, fps)
    for i, planes in enumerate(yuv):
        if isinstance(planes, av.VideoFrame):
            frame = planes
        else:
            frame = av.VideoFrame.from_ndarray(planes, format=PIX_FMT)
        frame.pts = i
        enc.encode(frame)
    return enc.finish()


def decode(packets: list[bytes], extradata: bytes, wanted: set[int] | None
           ) -> tuple[dict[int, np.ndarray], int, tuple[str, str]]:
    """Decode every packet; return RGB frames for the display indices in `wanted` (all if None), the count, and the
    stream's (pixel format, profile) as FFmpeg's decoder reads them from the parameter sets."""
    dec = av.CodecContext.create("h264", "r")
    dec.extradata = extradata
    dec.thread_count = 1
    kept: dict[int, np.ndarray] = {}
    count = 0

    def take(frames):
        nonlocal count
        for f in frames:
            if wanted is None or count in wanted:
                kept[count] = f.to_ndarray(format="rgb24", interpolation="BICUBIC", threads=1)
            count += 1

    for data in packets:
        take(dec.decode(av.Packet(data)))
    take(dec.decode(None))
    return kept, count, (str(dec.pix_fmt), str(dec.profile))


def decode_sampled(packets: list[bytes], pts: list[int | None], extradata: bytes, wanted: set[int]
                   ) -> tuple[dict[int, np.ndarray], tuple[str, str]] | None:
    """The frames of display indices `wanted` (RGB, as decode() gives them) when the packets carry the display
    indices 0..n-1 once each (one frame per packet, as x264 writes them): packets of non-reference frames that are
    not wanted are skipped by the decoder (no other frame refers to them, so every wanted frame is the same pixels
    as in a full decode: tests/test_render_decode.py checks it against decode()), and decoding stops once every
    wanted frame is out. None when the packets are not numbered so (then decode() everything)."""
    if sorted(p for p in pts if p is not None) != list(range(len(packets))):
        return None
    dec = av.CodecContext.create("h264", "r")
    dec.extradata = extradata
    dec.thread_count = 1
    kept: dict[int, np.ndarray] = {}

    def take(frames):
        for f in frames:
            if f.pts in wanted and f.pts not in kept:
                kept[f.pts] = f.to_ndarray(format="rgb24", interpolation="BICUBIC", threads=1)

    for data, t in zip(packets, pts):
        dec.skip_frame = "DEFAULT" if t in wanted else "NONREF"
        packet = av.Packet(data)
        packet.pts = t
        take(dec.decode(packet))
        if len(kept) == len(wanted):
            break
    else:
        dec.skip_frame = "DEFAULT"
        take(dec.decode(None))
    if len(kept) != len(wanted):
        return None
    return kept, (str(dec.pix_fmt), str(dec.profile))


@register("h264_compression", order=5, level="low", full_video=True, frames=stream_frames)
def h264_compression(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """Real libx264 encode + decode of the full clip at the severity's bitrate, then 12 uniform frames
    (docs/faithfulness.md: H.264 compression)."""
    bitrate = BITRATES[severity - 1]
    fps = _fps(ctx)
    packets, pts, extradata, n = _encoded(ctx, bitrate, fps)
    nbytes = sum(len(p) for p in packets)
    wanted = uniform_indices(n, ctx.num_frames)
    sampled = decode_sampled(packets, pts, extradata, set(int(i) for i in wanted))
    if sampled is not None:  # one frame per packet, display indices 0..n-1: the stream holds the n frames
        (kept, (pix_fmt, profile)), count = sampled, len(packets)
    else:
        kept, count, (pix_fmt, profile) = decode(packets, extradata, set(int(i) for i in wanted))
        if count != n:  # the codec dropped or added frames: sample from what it returned, as the reference does
            kept, count, _ = decode(packets, extradata, None)
            wanted = uniform_indices(count, ctx.num_frames)
    ctx.memo("_h264.encoded", dict)[bitrate] = None  # this severity's packets are done with
    frames = np.stack([kept[int(i)] for i in wanted])
    meta = {
        "faithful": True,
        "codec": f"libx264 via PyAV {av.__version__}",
        "preset": PRESET,
        "pix_fmt": pix_fmt,  # read back from the stream
        "profile": profile,
        "rate_control": "ABR (-b:v only, no VBV), x264 defaults (mbtree on), as the reference's CLI call",
        "target_bitrate_bps": bitrate,
        "measured_bitrate_bps": round(nbytes * 8 * fps / n, 1),
        "threads": 1,
        "x264_asm": x264_asm() or "auto",
        "fps": fps,
        "fps_source": "asset" if ctx.assets.get("fps") is not None else "default",
        "encoded_frames": n,
        "decoded_frames": count,  # frames in the decoded stream (only the sampled ones are converted to RGB)
    }
    return frames, meta
