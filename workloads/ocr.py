"""Scene-text reading for OCR backbones (TCD, workloads/backbones/tcd.py): the OCR engines, TCD's windowed OCR
captions, and the OCR entries of the render cache.

Engines (`ENGINES`; measured on the scene-text domain in docs/notes/2026-11-27-ocr-engines.md):
  rapidocr    `rapidocr` 3 on `onnxruntime` (the `ocr` extra): PP-OCRv6 detection and recognition models that its
              wheel ships (nothing is downloaded), detection at the frame's own size, no angle classifier, one
              thread. The default: it read every sign of the measured clips.
  tesseract   Debian's `tesseract-ocr` 5 (LSTM, `eng`) through `pytesseract`; the frame is upscaled 3x (bicubic)
              and read as one block (page segmentation mode 6). Measured beside it; it misses about half the signs
              over the synthetic textured backgrounds.
An engine reads one RGB frame at its native resolution (the render stage's frames before the resize to the model
input: workloads/render_cache.py `render_video(..., ocr=...)`) and returns its words in reading order; `version()`
names the engine, its settings and its models, and is part of every OCR entry's name, so another engine or version
never reads a stale entry.

Windows (TCD's window-OCR captioner): a clip of T sampled frames has T windows, one per frame; each window's words
are that frame's words, repeats merged (first occurrence kept); the caption is "There are scene texts: w1 w2 in
this frame." or, with no words, "There is no scene text in this frame." The paper reads every frame of a window; here
the window is read on its sampled frame, the only one a perturbation renders (docs/faithfulness.md: TCD). In
fine-tuning the windows are read at the train clips' own evenly spaced frames and each batch takes the windows of the
frames it feeds the model (workloads/backbones/finetune.py `side_inputs`, `batch_side`).

Options (`OCR_OPTIONS`): every OCR backbone takes `ocr` (false: no OCR is read, every window is the no-text caption)
and `engine`. They are declared here, without torch, so that a plan knows which engines a grid's backbones read
(`engine_of`) and its render stage writes their entries, without importing the backbones.
"""
from __future__ import annotations

import functools
import re
from typing import Callable, Sequence

import numpy as np

from workloads.options import Option

NO_TEXT = "There is no scene text in this frame."
# a word: at least two letters or digits (engines read single strokes of patterns and glyph fragments as 1-2 char
# tokens; a one-character word is mostly such noise)
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'&.-]*[A-Za-z0-9]")


def window_caption(words: Sequence[str]) -> str:
    """TCD's template for one window's words."""
    return f"There are scene texts: {' '.join(words)} in this frame." if words else NO_TEXT


def clean_words(text: str) -> list[str]:
    """The words of an engine's raw output, in order, repeats merged."""
    return list(dict.fromkeys(m.group(0) for m in _WORD.finditer(text)))


class OcrEngine:
    """Reads the words of one frame. Subclasses set `name` and implement `read` and `version`."""

    name = ""

    def read(self, frame: np.ndarray) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def version(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def read_windows(self, frames: np.ndarray) -> list[list[str]]:
        """The words of each window of a clip: uint8 [T, H, W, 3] -> T lists."""
        return [self.read(f) for f in frames]


class Tesseract(OcrEngine):
    name = "tesseract"
    UPSCALE = 3       # tesseract's LSTM reads glyphs ~20-40 px tall best; the signs are 11-13% of a 128 px frame
    PSM = 6           # one uniform block: the best of modes 3, 6, 11, 12 on the scene-text domain (docs/notes)

    def read(self, frame: np.ndarray) -> list[str]:
        import cv2
        import pytesseract

        grey = cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_RGB2GRAY)
        big = cv2.resize(grey, None, fx=self.UPSCALE, fy=self.UPSCALE, interpolation=cv2.INTER_CUBIC)
        return clean_words(pytesseract.image_to_string(big, lang="eng", config=f"--psm {self.PSM} --oem 1"))

    def version(self) -> str:
        import pytesseract

        return f"tesseract-{pytesseract.get_tesseract_version()}-x{self.UPSCALE}-psm{self.PSM}-eng"


class RapidOcr(OcrEngine):
    name = "rapidocr"
    # detection at the frame's own size (`limit_type: min` upscales only a frame whose short side is below the
    # limit; its default, 736 px, is 6x slower on the 96-128 px synthetic frames and no more accurate), one thread
    # (trials and render actors own one CPU each), no angle classifier (its 180-degree check only costs time on
    # upright text), no logging below errors
    SETTINGS = {"Det.limit_side_len": 96, "Global.use_cls": False, "Global.log_level": "error",
                "EngineConfig.onnxruntime.intra_op_num_threads": 1,
                "EngineConfig.onnxruntime.inter_op_num_threads": 1}

    def __init__(self):
        self._engine = None

    def read(self, frame: np.ndarray) -> list[str]:
        if self._engine is None:
            from rapidocr import RapidOCR

            self._engine = RapidOCR(params=dict(self.SETTINGS))
        result = self._engine(np.ascontiguousarray(frame[..., ::-1]))  # it reads BGR (OpenCV's order)
        return clean_words(" ".join(result.txts or ()))

    def version(self) -> str:
        from importlib.metadata import version

        return f"rapidocr-{version('rapidocr')}-ort-{version('onnxruntime')}-det96-nocls"


ENGINES: dict[str, Callable[[], OcrEngine]] = {"tesseract": Tesseract, "rapidocr": RapidOcr}
DEFAULT_ENGINE = "rapidocr"

# the options of an OCR backbone (module docstring); a backbone registered with `ocr=True` takes them
OCR_OPTIONS = {
    "ocr": Option(bool, True, doc="read the OCR windows (false: TCD without OCR; no OCR is run for it)"),
    "engine": Option(str, DEFAULT_ENGINE, choices=tuple(ENGINES), doc="the OCR engine (workloads/ocr.py)"),
}


def engine_of(options: dict) -> str | None:
    """The engine an OCR backbone with these options reads (OCR_OPTIONS' defaults for the ones not given), or None
    when it reads none (`ocr: false`)."""
    if OCR_OPTIONS["ocr"].check("ocr", options.get("ocr"), "OCR backbone") is False:
        return None
    engine = options.get("engine")
    return DEFAULT_ENGINE if engine is None else OCR_OPTIONS["engine"].check("engine", engine, "OCR backbone")


@functools.cache
def engine_version(name: str) -> str | None:
    """The version string of engine `name` as it names its OCR entries, read without loading the engine or its
    models (the plan checks which entries exist with it); None when the engine is not installed here."""
    try:
        return ENGINES[name]().version()
    except Exception:   # PackageNotFoundError, ImportError, TesseractNotFoundError
        return None


def missing_reason(name: str = DEFAULT_ENGINE) -> str | None:
    """Why engine `name` cannot run here (one line), or None when it can."""
    if name not in ENGINES:
        return f"unknown OCR engine {name!r}; engines: {', '.join(ENGINES)}"
    try:
        if name == "tesseract":
            import pytesseract

            pytesseract.get_tesseract_version()
        else:
            import onnxruntime  # noqa: F401
            import rapidocr  # noqa: F401
    except ImportError as err:
        return f"OCR engine {name!r} needs the Python package {err.name!r} (pip install '.[ocr]')"
    except Exception as err:  # pytesseract raises TesseractNotFoundError without the binary
        return f"OCR engine {name!r}: {type(err).__name__}: the tesseract binary is missing (apt-get install " \
               f"tesseract-ocr)" if name == "tesseract" else f"OCR engine {name!r}: {err}"
    return None


@functools.cache
def get_engine(name: str = DEFAULT_ENGINE) -> OcrEngine:
    """The engine `name`, once per process; RuntimeError saying what to install when it cannot run."""
    why = missing_reason(name)
    if why:
        raise RuntimeError(why)
    return ENGINES[name]()


def ensure_ocr(cache, items: Sequence[tuple], engine: OcrEngine) -> int:
    """Read the OCR entries of the render cache's clips that lack one: `items` are (RenderKey, source video path);
    each video is decoded once and its missing cells re-rendered at their native resolution (the same seeded
    perturbation as the render stage's: workloads/render_cache.py `render_video`) without rewriting its clips.
    Returns how many entries were read; RuntimeError naming the first clip that failed."""
    from workloads.render_cache import render_video

    version = engine.version()
    by_video: dict[str, list] = {}
    for key, path in items:
        if not cache.ocr_path(key, version).is_file():
            by_video.setdefault(path, []).append(key)
    for path, keys in by_video.items():
        for key, status in zip(keys, render_video(path, keys, cache, {"video_id": keys[0].video_id,
                                                                        "video_path": path}, ocr=engine, clips=False)):
            if status["status"] != "ok":
                raise RuntimeError(f"OCR of {key.video_id} at {key.perturbation}-{key.severity} failed: "
                                   f"{status['error']}")
    return sum(len(k) for k in by_video.values())


def split_windows(split, num_frames: int, engine: OcrEngine, cache_dir=None, threads: int = 2
                  ) -> dict[str, list[list[str]]]:
    """The OCR windows of every video of a split (a fine-tuning source): `num_frames` frames by the uniform rule at
    their native resolution, each read by `engine`; {video_id: windows}. A video that cannot be decoded gets empty
    windows (the fine-tune drops it anyway). Cached in `cache_dir` by the split's fingerprint, the frame count and
    the engine's version. `threads`: frames read at once (pytesseract runs the engine in a subprocess)."""
    import json
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from workloads.atomic import atomic_write_text
    from workloads.seeding import digest
    from workloads.video_io import VideoDecodeError, read_frames

    path = None
    if cache_dir is not None:
        key = digest({"split": split.fingerprint, "frames": num_frames, "engine": engine.version()})
        path = Path(cache_dir) / f"{split.dataset}-{split.name}-ocr-{key}.json"
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except ValueError:
                pass  # unreadable: read again
    paths = dict((p.video_id, p.video_path) for p in split.pairs)

    def read(vid: str) -> list[list[str]]:
        try:
            return engine.read_windows(read_frames(paths[vid], num_frames))
        except VideoDecodeError:
            return [[] for _ in range(num_frames)]

    with ThreadPoolExecutor(max(1, threads)) as pool:
        out = dict(zip(paths, pool.map(read, list(paths))))
    if path is not None:
        atomic_write_text(path, json.dumps(out))
    return out
