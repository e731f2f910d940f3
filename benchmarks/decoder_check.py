"""decord (our reader) vs OpenCV's cv2.VideoCapture (the authors' reader: bingqingzhang/vtr_tta,
datasets/video_capture.py) vs PyAV, on the same files.

    python -m benchmarks.decoder_check [--dir DIR] [--smoke]

Writes small test videos (a textured scene panning, 48 frames at 30 fps) and reports, per file:
- frame counts: decord len(), cv2 CAP_PROP_FRAME_COUNT (what the authors' sampler uses), frames cv2 reads
  sequentially, frames PyAV decodes;
- index mapping: is frame i of cv2's sequential read the same picture as decord's frame i (PSNR of each pair; and
  the index of decord's frame that best matches it);
- decord's seeking get_batch on the 12 uniform indices against its own full decode at those indices;
- the authors' sampler: cv2 seeks (CAP_PROP_POS_FRAMES) to each of the 12 uniform indices of CAP_PROP_FRAME_COUNT
  and reads one frame; PSNR of those 12 frames against decord's frames at our 12 indices (inf = identical);
- colour conversion: each decoder's RGB against RGB computed here from the decoded YUV planes with the BT.601 and
  BT.709 matrices, limited and full range: the closest one (mean absolute error ~1 level, the rest being chroma
  upsampling and rounding; a wrong matrix or range costs 3-5 levels) is the conversion the decoder applied.
Files: H.264 in mp4 at 64x64, 320x240 and 1280x720 (untagged, as most web videos and write_mp4 are), 1280x720
tagged BT.709 (as YouTube's HD streams are), full-range H.264 (yuvj420p), and MPEG-4 part 2 with B-frames in AVI
(the MSVD clips are .avi).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import platform
import sys
import tempfile
from pathlib import Path

import av
import cv2
import numpy as np

from benchmarks.real_video import _scene  # noqa: E402
from workloads.video_io import uniform_indices  # noqa: E402

N_FRAMES = 48
CASES = {  # name: (container, codec, width, height, pix_fmt, x264 params)
    "h264_64x64": ("mp4", "libx264", 64, 64, "yuv420p", ""),
    "h264_320x240": ("mp4", "libx264", 320, 240, "yuv420p", ""),
    "h264_1280x720": ("mp4", "libx264", 1280, 720, "yuv420p", ""),
    "h264_1280x720_bt709": ("mp4", "libx264", 1280, 720, "yuv420p",
                            "colorprim=bt709:transfer=bt709:colormatrix=bt709"),
    "h264_320x240_fullrange": ("mp4", "libx264", 320, 240, "yuvj420p", ""),
    "mpeg4_320x240_bframes_avi": ("avi", "mpeg4", 320, 240, "yuv420p", ""),
    # pixel noise scrolling sideways: the encoder codes most frames as I-frames, with B-frames between them
    "mpeg4_64x48_bframes_avi_noise": ("avi", "mpeg4", 64, 48, "yuv420p", "noise"),
}


def _noise(n: int, w: int, h: int, seed: int = 0):
    base = np.random.default_rng(seed).integers(0, 256, (h, 3 * w, 3), dtype=np.uint8)
    for i in range(n):
        yield np.ascontiguousarray(np.roll(base, -3 * i, axis=1)[:, :w])


def write(path: Path, container: str, codec: str, w: int, h: int, pix: str, params: str) -> None:
    with av.open(str(path), mode="w", format=container) as c:
        s = c.add_stream(codec, rate=30)
        s.width, s.height, s.pix_fmt = w, h, pix
        if codec == "libx264":
            s.options = {"preset": "veryfast", "crf": "18", **({"x264-params": params} if params else {})}
        else:
            s.options = {"bf": "2"} if params == "noise" else {"bf": "2", "qscale": "3"}
            s.codec_context.max_b_frames = 2
        for f in (_noise if params == "noise" else _scene)(N_FRAMES, w, h):
            vf = av.VideoFrame.from_ndarray(f, format="rgb24")
            if "bt709" in params:  # encode with the matrix the stream is tagged with
                vf = vf.reformat(format=pix, dst_colorspace="ITU709")
            for p in s.encode(vf):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def decord_frames(path: Path) -> np.ndarray:
    import decord

    vr = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1)
    return vr.get_batch(list(range(len(vr)))).asnumpy()


def cv2_sequential(path: Path) -> tuple[np.ndarray, int]:
    cap = cv2.VideoCapture(str(path))
    count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(f, cv2.COLOR_BGR2RGB))
    cap.release()
    return np.stack(frames), count


def cv2_authors_sampler(path: Path, num: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """The authors' "uniform" read: indices from CAP_PROP_FRAME_COUNT, one seek + read per index (their retry on a
    failed read: up to 5 more reads)."""
    cap = cv2.VideoCapture(str(path))
    idx = uniform_indices(int(cap.get(cv2.CAP_PROP_FRAME_COUNT)), num)
    frames = []
    for i in idx:
        cap.set(cv2.CAP_PROP_POS_FRAMES, int(i))
        ok, f = cap.read()
        for _ in range(5):
            if ok:
                break
            ok, f = cap.read()
        frames.append(cv2.cvtColor(f, cv2.COLOR_BGR2RGB))
    cap.release()
    return np.stack(frames), idx


def pyav_decode(path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(RGB as PyAV converts, the decoded 4:2:0 planes as [Y, U, V] at full size, chroma repeated 2x2) per frame."""
    rgb, yuv = [], []
    with av.open(str(path)) as c:
        for f in c.decode(video=0):
            rgb.append(f.to_ndarray(format="rgb24"))
            h, w = f.height, f.width
            a = f.to_ndarray()  # yuv420p / yuvj420p: Y rows, then U and V (h/2 x w/2 each) packed below
            u = a[h:h + h // 4].reshape(h // 2, w // 2)
            v = a[h + h // 4:].reshape(h // 2, w // 2)
            up = lambda p: np.repeat(np.repeat(p.astype(np.float64), 2, 0), 2, 1)  # noqa: E731
            yuv.append(np.stack([a[:h].astype(np.float64), up(u), up(v)]))
    return rgb, yuv


def yuv_to_rgb(yuv: np.ndarray, matrix: str, full_range: bool) -> np.ndarray:
    """Float RGB from Y, U, V planes by the matrix's definition (Kr, Kb), limited (16-235/240) or full range."""
    y, u, v = yuv[0], yuv[1] - 128.0, yuv[2] - 128.0
    if not full_range:
        y, u, v = (y - 16.0) * 255 / 219, u * 255 / 224, v * 255 / 224
    kr, kb = {"BT.601": (0.299, 0.114), "BT.709": (0.2126, 0.0722)}[matrix]
    kg = 1 - kr - kb
    r = y + 2 * (1 - kr) * v
    b = y + 2 * (1 - kb) * u
    g = (y - kr * r - kb * b) / kg
    return np.clip(np.stack([r, g, b], -1), 0, 255)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def check(path: Path) -> dict:
    dec = decord_frames(path)
    seq, cv_count = cv2_sequential(path)
    rgb, yuv = pyav_decode(path)
    n = min(len(dec), len(seq))
    pair_psnr = [psnr(dec[i], seq[i]) for i in range(n)]
    best = [int(np.argmax([psnr(seq[i], dec[j]) for j in range(max(0, i - 3), min(len(dec), i + 4))]))
            + max(0, i - 3) for i in range(0, n, max(1, n // 8))]
    shift = sorted({b - i for b, i in zip(best, range(0, n, max(1, n // 8)))})
    authors, a_idx = cv2_authors_sampler(path)
    ours_idx = uniform_indices(len(dec), 12)
    import decord

    sparse = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1).get_batch(ours_idx.tolist()).asnumpy()
    sampler_psnr = [psnr(a, dec[i]) for a, i in zip(authors, ours_idx)]
    colour = {}
    sample = range(0, len(yuv), 12)
    refs = {f"{m} {'full' if fr else 'limited'}": [yuv_to_rgb(yuv[i], m, fr) for i in sample]
            for m in ("BT.601", "BT.709") for fr in (False, True)}
    for name, frames in (("decord", dec), ("cv2", seq), ("pyav", np.stack(rgb))):
        errs = {k: float(np.mean([np.abs(frames[i].astype(np.float64) - r).mean() for i, r in zip(sample, ref)]))
                for k, ref in refs.items()}
        best = min(errs, key=errs.get)
        colour[name] = (best, errs[best], min(v for k, v in errs.items() if k != best))
    return {"decord": len(dec), "cv2_count": cv_count, "cv2_read": len(seq), "pyav": len(rgb),
            "decord_sparse_exact": bool(np.array_equal(sparse, dec[ours_idx])),
            "decord_sparse_psnr": min(psnr(a, dec[i]) for a, i in zip(sparse, ours_idx)),
            "same_index": shift == [0], "shift": shift, "min_psnr": min(pair_psnr),
            "sampler_indices_equal": bool(np.array_equal(a_idx, ours_idx)), "sampler_min_psnr": min(sampler_psnr),
            "colour": colour}


def fmt_db(x: float) -> str:
    return "identical" if x == float("inf") else f"{x:.1f} dB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "mlvp-decoder-check"))
    ap.add_argument("--smoke", action="store_true", help="seconds: the first file only, written to a new folder")
    args = ap.parse_args(argv)
    cases = dict(list(CASES.items())[:1]) if args.smoke else CASES
    folder = Path(tempfile.mkdtemp(prefix="mlvp-decoder-check-")) if args.smoke else Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    import decord

    print("# python -m benchmarks.decoder_check")
    print(f"# decord {decord.__version__}, OpenCV {cv2.__version__}, PyAV {av.__version__} (FFmpeg "
          f"{av.library_versions['libavcodec']}), {platform.machine()}, Python {platform.python_version()}")
    print()
    print("| file | frames: decord / cv2 count / cv2 read / PyAV | frame i = frame i | min PSNR decord vs cv2 "
          "(per frame) | decord get_batch(12) = its full decode | authors' cv2 sampler vs ours: indices, min PSNR | "
          "conversion applied (MAE, next best): "
          "decord; cv2; PyAV |")
    print("|---|---|---|---|---|---|---|")
    for name, (container, codec, w, h, pix, params) in cases.items():
        path = folder / f"{name}.{container}"
        if not path.is_file():
            write(path, container, codec, w, h, pix, params)
        r = check(path)
        col = "; ".join(f"{r['colour'][d][0]} ({r['colour'][d][1]:.2f}, next {r['colour'][d][2]:.2f})"
                        for d in ("decord", "cv2", "pyav"))
        print(f"| {name} | {r['decord']} / {r['cv2_count']} / {r['cv2_read']} / {r['pyav']} | "
              f"{'yes' if r['same_index'] else 'shifted ' + str(r['shift'])} | {fmt_db(r['min_psnr'])} | "
              f"{'yes' if r['decord_sparse_exact'] else 'NO, min ' + fmt_db(r['decord_sparse_psnr'])} | "
              f"{'same' if r['sampler_indices_equal'] else 'differ'}, {fmt_db(r['sampler_min_psnr'])} | {col} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
