"""OCR engines on the scene-text domain (issue #35, item 3): speed and accuracy of each engine of workloads/ocr.py on
the sampled frames of `synthetic_text`'s test clips at their native resolution (128 px), clean and at severity 5 of
the perturbations that destroy text.

    python -m benchmarks.ocr_engines [--cache DIR] [--clips 64] [--frames 12] [--n-train 2000]
        [--engines tesseract,rapidocr] [--n-test N] [--smoke]
        [--types gaussian_noise,video_defocus,h264_compression,main_object_occlusion] [--severity 5]

Per (engine, cell): `word acc` = share of windows (sampled frames) whose words include the sign's word (case
ignored), `clip acc` = share of clips with the word in at least one window, `extra` = words per window that are not
the sign's word, `ms/frame` = wall time per frame read (one thread). The frames are the render stage's, before its
resize (workloads/render_cache.py render_video). Figures: docs/notes/2026-11-27-ocr-engines.md.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


TYPES = ("gaussian_noise", "video_defocus", "h264_compression", "main_object_occlusion")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=os.environ.get("MLVP_CACHE_DIR", os.path.expanduser("~/.cache/mlvp")))
    ap.add_argument("--clips", type=int, default=64, help="test clips read (the first N)")
    ap.add_argument("--frames", type=int, default=12, help="sampled frames per clip (the trials' 12)")
    ap.add_argument("--n-train", type=int, default=2000, help="the dataset's train clips (the default's 2000)")
    ap.add_argument("--engines", default="tesseract,rapidocr")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--severity", type=int, default=5)
    ap.add_argument("--json", help="write the table here too")
    ap.add_argument("--n-test", type=int, default=None, help="the dataset's test clips (default: the default's 256)")
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: 16 train / 4 test clips, 2 of them read at 2 frames, clean and gaussian_noise, "
                         "in a new cache folder")
    args = ap.parse_args(argv)
    if args.smoke:
        import tempfile

        args.cache = tempfile.mkdtemp(prefix="mlvp-ocr-engines-smoke-")
        args.clips, args.frames, args.n_train, args.n_test, args.types = 2, 2, 16, 4, "gaussian_noise"

    import cv2

    from workloads.datasets import create_dataset
    from workloads.ocr import ENGINES, missing_reason
    from workloads.perturbations import video as vp
    from workloads.render_cache import RenderKey
    from workloads.spec import CLEAN
    from workloads.video_io import read_video, uniform_indices

    cv2.setNumThreads(1)
    sizes = {"n_train": args.n_train, **({"n_test": args.n_test} if args.n_test else {})}
    ds = create_dataset("synthetic_text", root=str(Path(args.cache) / "datasets"), **sizes)
    test = ds.test_split()
    words = {a["video_id"]: a["sign"]["word"] for a in ds.attributes("test")}
    pairs = test.pairs[:args.clips]
    cells = [(CLEAN, 0)] + [(t, args.severity) for t in args.types.split(",") if t]
    frames: dict[tuple, list] = {c: [] for c in cells}
    for pair in pairs:  # the render stage's frames before its resize, per cell
        video = read_video(pair.video_path)
        keys = [RenderKey(ds.name, ds.version(), pair.video_id, p, s, 0, args.frames, 64)
                for p, s in cells[1:]]
        frames[cells[0]].append(video[uniform_indices(len(video), args.frames)])
        rendered = vp.render_many(video, [(k.perturbation, k.severity, k.perturbation_seed) for k in keys],
                                  num_frames=args.frames, clip_seed=keys[0].clip_seed)
        for cell, r in zip(cells[1:], rendered):
            frames[cell].append(r.frames)
    rows = []
    for name in args.engines.split(","):
        why = missing_reason(name)
        if why:
            print(f"{name}: skipped ({why})")
            continue
        engine = ENGINES[name]()
        engine.read(frames[cells[0]][0][0])  # load models outside the timing
        for cell in cells:
            hit = extra = n = clip_hits = 0
            t0 = time.perf_counter()
            for pair, clip in zip(pairs, frames[cell]):
                windows = engine.read_windows(clip)
                want = words[pair.video_id].lower()
                got = [[w.lower() for w in win] for win in windows]
                hits = [want in win for win in got]
                hit += sum(hits)
                clip_hits += any(hits)
                extra += sum(len([w for w in win if w != want]) for win in got)
                n += len(windows)
            seconds = time.perf_counter() - t0
            rows.append({"engine": engine.version(), "cell": f"{cell[0]}-{cell[1]}" if cell[1] else cell[0],
                         "word_acc": 100 * hit / n, "clip_acc": 100 * clip_hits / len(pairs),
                         "extra_per_window": extra / n, "ms_per_frame": 1000 * seconds / n})
            r = rows[-1]
            print(f"{r['engine']:32s} {r['cell']:28s} word acc {r['word_acc']:5.1f}%  clip acc {r['clip_acc']:5.1f}%  "
                  f"extra {r['extra_per_window']:.2f}/window  {r['ms_per_frame']:6.1f} ms/frame", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
