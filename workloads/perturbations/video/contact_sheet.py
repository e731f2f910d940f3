"""Contact sheet of the registered video perturbations of one clip (`mlvp render --contact-sheet`).

    image = contact_sheet(video, seed=0, num_frames=12, frame=None, strip_severity=3, **assets)
    save_png("sheet.png", image)

Top: a grid with one row per registered type (in the registry's order, labelled, with "faithful"/"proxy" under the name)
and columns clean, s1..s5, each cell showing sampled frame `frame` (default num_frames // 2) of that rendering.
Below: a frame strip per type (the clean clip first) with all `num_frames` frames at `strip_severity`, to show
temporal consistency. Labels are drawn with cv2.putText. A type that raises is drawn as a red cell with the error
(on_error="draw", the default) or re-raised (on_error="raise"). `video` is uint8 [N, H, W, 3] or a video path.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import cv2
import numpy as np

from workloads.perturbations.video import render_many
from workloads.perturbations.video._registry import SEVERITIES, VIDEO_PERTURBATIONS
from workloads.video_io import uniform_indices

BG = (28, 28, 32)
FG = (235, 235, 235)
DIM = (150, 150, 160)
OK = (110, 200, 120)
WARN = (240, 170, 60)
ERR = (150, 30, 30)
FONT = cv2.FONT_HERSHEY_SIMPLEX
MARGIN, GAP, LABEL_W, TITLE_H, HEADER_H = 8, 4, 190, 28, 22


def registered_names(names: Sequence[str] | None = None) -> list[str]:
    """The registered perturbation types, in the registry's order (optionally restricted to `names`)."""
    known = VIDEO_PERTURBATIONS.names()
    wanted = list(known) if names is None else list(names)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(f"unknown video perturbation(s) {unknown}; allowed: {', '.join(known)}")
    return [n for n in known if n in wanted]


@dataclass(frozen=True)
class _Layout:
    n_types: int
    num_frames: int
    cell_w: int
    cell_h: int
    strip_w: int
    strip_h: int

    @classmethod
    def make(cls, frame_hw: tuple[int, int], n_types: int, num_frames: int, cell_height: int) -> "_Layout":
        h, w = frame_hw
        cell_h = int(cell_height)
        cell_w = int(np.clip(round(cell_h * w / h), 24, 4 * cell_h))
        grid_w = 6 * cell_w + 5 * GAP
        strip_w = max(12, (grid_w - (num_frames - 1) * GAP) // num_frames)
        strip_h = max(8, int(round(strip_w * h / w)))
        return cls(n_types, num_frames, cell_w, cell_h, strip_w, strip_h)

    @property
    def content_w(self) -> int:
        return max(6 * self.cell_w + 5 * GAP, self.num_frames * self.strip_w + (self.num_frames - 1) * GAP)

    @property
    def width(self) -> int:
        return MARGIN + LABEL_W + self.content_w + MARGIN

    @property
    def grid_top(self) -> int:
        return MARGIN + TITLE_H + HEADER_H

    @property
    def strips_top(self) -> int:
        return self.grid_top + self.n_types * (self.cell_h + GAP) + TITLE_H

    @property
    def height(self) -> int:
        return self.strips_top + (self.n_types + 1) * (self.strip_h + GAP) + MARGIN


def contact_sheet_size(frame_hw: tuple[int, int], n_types: int, num_frames: int = 12,
                       cell_height: int = 96) -> tuple[int, int]:
    """(height, width) of the sheet for frames of `frame_hw` and `n_types` rows."""
    lay = _Layout.make(frame_hw, n_types, num_frames, cell_height)
    return lay.height, lay.width


def _text(img, text: str, org: tuple[int, int], scale: float = 0.45, colour=FG, thickness: int = 1) -> None:
    cv2.putText(img, text, org, FONT, scale, colour, thickness, cv2.LINE_AA)


def _fit_text(text: str, width: int, scale: float) -> str:
    while text and cv2.getTextSize(text, FONT, scale, 1)[0][0] > width:
        text = text[:-2] + "~" if len(text) > 2 else ""
    return text


def _paste(canvas, image, x: int, y: int, w: int, h: int) -> None:
    interp = cv2.INTER_AREA if image.shape[0] > h else cv2.INTER_LINEAR
    canvas[y:y + h, x:x + w] = cv2.resize(np.ascontiguousarray(image), (w, h), interpolation=interp)


def _error_cell(canvas, x: int, y: int, w: int, h: int, message: str) -> None:
    canvas[y:y + h, x:x + w] = ERR
    _text(canvas, "error", (x + 3, y + 14), 0.4)
    words, line, row = message.split(), "", 0
    for word in words:
        cand = (line + " " + word).strip()
        if cv2.getTextSize(cand, FONT, 0.3, 1)[0][0] > w - 6 and line:
            _text(canvas, line, (x + 3, y + 28 + 11 * row), 0.3)
            line, row = word, row + 1
            if 28 + 11 * (row + 1) > h:
                return
        else:
            line = cand
    if line:
        _text(canvas, line, (x + 3, y + 28 + 11 * row), 0.3)


def contact_sheet(video, seed: int = 0, num_frames: int = 12, frame: int | None = None, strip_severity: int = 3, *,
                  names: Sequence[str] | None = None, cell_height: int = 96, on_error: str = "draw",
                  return_meta: bool = False, **assets: Any):
    """uint8 RGB contact sheet [H, W, 3] of every registered type x severity (see the module docstring).
    With return_meta=True returns (image, {type: {"faithful": [5 bools or None], "fallback": str|None,
    "error": str|None}})."""
    if on_error not in ("draw", "raise"):
        raise ValueError(f"on_error must be 'draw' or 'raise', got {on_error!r}")
    if isinstance(video, (str, os.PathLike)):
        from workloads.video_io import read_video

        video = read_video(video)
    video = np.asarray(video)
    if video.dtype != np.uint8 or video.ndim != 4 or video.shape[-1] != 3 or len(video) == 0:
        raise ValueError(f"video must be uint8 [N, H, W, 3], got {video.dtype} {video.shape}")
    if strip_severity not in SEVERITIES:
        raise ValueError(f"strip_severity must be one of {list(SEVERITIES)}, got {strip_severity!r}")
    frame = num_frames // 2 if frame is None else int(frame)
    if not -num_frames <= frame < num_frames:
        raise ValueError(f"frame must index one of the {num_frames} sampled frames, got {frame}")
    frame %= num_frames

    types = registered_names(names)
    h, w = video.shape[1:3]
    lay = _Layout.make((h, w), len(types), num_frames, cell_height)
    canvas = np.empty((lay.height, lay.width, 3), np.uint8)
    canvas[:] = BG
    clean = video[uniform_indices(len(video), num_frames)]
    x0 = MARGIN + LABEL_W

    _text(canvas, f"MLVP video perturbations  |  {w}x{h}, {len(video)} frames  |  seed {seed}  |  "
                  f"grid: frame {frame}/{num_frames}", (MARGIN, MARGIN + 17), 0.5)
    for c, label in enumerate(["clean"] + [f"s{s}" for s in SEVERITIES]):
        _text(canvas, label, (x0 + c * (lay.cell_w + GAP) + 4, lay.grid_top - 6), 0.45, DIM)
    _text(canvas, f"frame strips at severity {strip_severity} (frames 0..{num_frames - 1})",
          (MARGIN, lay.strips_top - 9), 0.5)

    def strip_row(row: int, frames, label: str, colour=FG) -> None:
        y = lay.strips_top + row * (lay.strip_h + GAP)
        _text(canvas, _fit_text(label, LABEL_W - 6, 0.42), (MARGIN, y + min(lay.strip_h, 28) // 2 + 5), 0.42, colour)
        for i in range(num_frames):
            x = x0 + i * (lay.strip_w + GAP)
            if frames is None:
                canvas[y:y + lay.strip_h, x:x + lay.strip_w] = ERR
            else:
                _paste(canvas, frames[i], x, y, lay.strip_w, lay.strip_h)

    strip_row(0, clean, "clean", DIM)
    meta: dict[str, dict[str, Any]] = {}
    for r, name in enumerate(types):
        y = lay.grid_top + r * (lay.cell_h + GAP)
        _paste(canvas, clean[frame], x0, y, lay.cell_w, lay.cell_h)
        try:
            results = render_many(video, [(name, s, seed) for s in SEVERITIES], num_frames=num_frames, **assets)
            error = None
        except Exception as err:  # one broken type must not hide the others
            if on_error == "raise":
                raise
            results, error = None, f"{type(err).__name__}: {err}"
        if results is None:
            faithful = [None] * len(SEVERITIES)
            fallback = None
            for c in range(1, 6):
                _error_cell(canvas, x0 + c * (lay.cell_w + GAP), y, lay.cell_w, lay.cell_h, error)
            strip_row(r + 1, None, name, WARN)
            status, colour = "error", WARN
        else:
            faithful = [bool(res.meta.get("faithful")) for res in results]
            fallback = next((res.meta.get("fallback") for res in results if not res.meta.get("faithful")), None)
            for c, res in enumerate(results, start=1):
                _paste(canvas, res.frames[frame], x0 + c * (lay.cell_w + GAP), y, lay.cell_w, lay.cell_h)
            strip_row(r + 1, results[strip_severity - 1].frames, name)
            status, colour = ("faithful", OK) if all(faithful) else ("proxy", WARN)
        _text(canvas, _fit_text(name, LABEL_W - 6, 0.48), (MARGIN, y + min(lay.cell_h, 48) // 2), 0.48)
        _text(canvas, status, (MARGIN, y + min(lay.cell_h, 48) // 2 + 18), 0.4, colour)
        meta[name] = {"faithful": faithful, "fallback": fallback, "error": error}
    return (canvas, meta) if return_meta else canvas


def save_png(path: str | os.PathLike, image: np.ndarray) -> Path:
    """Write a uint8 RGB image [H, W, 3] as PNG (parent folders created). Returns the path."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"expected a uint8 RGB image [H, W, 3], got {image.dtype} {image.shape}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
        raise OSError(f"cannot write PNG {path}")
    return path


__all__ = ["contact_sheet", "contact_sheet_size", "registered_names", "save_png"]
