"""The contact sheet: one row per registered type x (clean, s1..s5), plus a frame strip per type."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from workloads.perturbations.video import NAMES, VIDEO_PERTURBATIONS
from workloads.perturbations.video.contact_sheet import (BG, contact_sheet, contact_sheet_size, registered_names,
                                                         save_png)

# the asset-backed types (their fallbacks are cheap to render): a small sheet that still shows "proxy" labels
ASSET_TYPES = [n for n in VIDEO_PERTURBATIONS.names() if VIDEO_PERTURBATIONS.lookup(n).assets is not None]


def make_clip(n=24, h=36, w=64):
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.empty((n, h, w, 3), np.uint8)
    for t in range(n):
        f = np.stack([40 + xx * 150 // w, 60 + yy * 150 // h, np.full_like(xx, 150)], -1).astype(np.uint8)
        cx = 8 + (w - 16) * t // (n - 1)
        f[(yy - h // 2) ** 2 + (xx - cx) ** 2 < 49] = (250, 230, 40)
        out[t] = f
    return out


@pytest.fixture(scope="module")
def clip():
    return make_clip()


def test_contact_sheet_size_and_content(clip):
    img, meta = contact_sheet(clip, seed=1, names=ASSET_TYPES, cell_height=40, return_meta=True)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[-1] == 3
    assert img.shape[:2] == contact_sheet_size(clip.shape[1:3], len(ASSET_TYPES), 12, cell_height=40)
    assert list(meta) == [n for n in NAMES if n in ASSET_TYPES]  # NAMES order
    assert all(m["error"] is None and m["faithful"] == [False] * 5 for m in meta.values())
    not_bg = np.any(img != np.array(BG, np.uint8), axis=-1)
    assert 0.3 < not_bg.mean() < 0.98 and img.std() > 20  # thumbnails and labels, not blank
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 200
    # more rows -> taller, same width
    h2, w2 = contact_sheet_size(clip.shape[1:3], len(ASSET_TYPES) + 2, 12, cell_height=40)
    assert h2 > img.shape[0] and w2 == img.shape[1]
    again = contact_sheet(clip, seed=1, names=ASSET_TYPES, cell_height=40)
    assert np.array_equal(img, again)


def test_contact_sheet_default_renders_every_registered_type(clip):
    names = registered_names()
    assert set(ASSET_TYPES) <= set(names) and names == [n for n in NAMES if n in names]
    img, meta = contact_sheet(clip, num_frames=8, frame=-1, strip_severity=5, cell_height=32, return_meta=True)
    assert img.shape[:2] == contact_sheet_size(clip.shape[1:3], len(names), 8, cell_height=32)
    assert list(meta) == names


def test_contact_sheet_errors(clip, tmp_path):
    missing = str(tmp_path / "boxes_missing.json")
    img, meta = contact_sheet(clip, names=["main_object_occlusion"], cell_height=32, return_meta=True,
                              main_objects=missing, video_id="v")
    assert "boxes_missing.json" in meta["main_object_occlusion"]["error"]
    assert img.shape[:2] == contact_sheet_size(clip.shape[1:3], 1, 12, cell_height=32)
    with pytest.raises(FileNotFoundError, match="boxes_missing.json"):
        contact_sheet(clip, names=["main_object_occlusion"], on_error="raise", main_objects=missing, video_id="v")
    with pytest.raises(ValueError):
        contact_sheet(clip, names=["not_a_type"])
    with pytest.raises(ValueError):
        contact_sheet(clip, names=ASSET_TYPES, frame=12)
    with pytest.raises(ValueError):
        contact_sheet(clip, names=ASSET_TYPES, strip_severity=6)


def test_save_png_roundtrip(tmp_path):
    img = np.zeros((20, 30, 3), np.uint8)
    img[:, :10] = (255, 0, 0)
    path = save_png(tmp_path / "sub" / "sheet.png", img)
    back = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
    assert np.array_equal(back, img)
    with pytest.raises(ValueError):
        save_png(tmp_path / "x.png", img.astype(np.float32))
