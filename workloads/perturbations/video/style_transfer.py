"""Style transfer (high-level; docs/faithfulness.md: Style transfer): AdaIN with ONE style image per clip, alpha by
severity.

Assets (all optional; any given must be valid, a bad path is an error, never a silent fallback):
- `adain_vgg`, `adain_decoder`: paths to pytorch-AdaIN's `vgg_normalised.pth` and `decoder.pth` (give both);
- `style_images`: a folder searched recursively for *.png / *.jpg / *.jpeg (any letter case), a single image file,
  or a list of image files (the reference uses Painter-by-Numbers `train/`);
- `adain_device`: torch device for AdaIN (default "cpu"; "cuda" is much faster but its bytes may differ by GPU).

Modes (meta["mode"]):
- "adain" with weights and style images: faithful. The style is `sorted(paths)[rng.integers(n)]` (the reference
  picks `random.choice` over an unsorted rglob; sorting makes the pick reproducible); resized so its shorter side is
  512; every uniform frame at native resolution goes through f = alpha*AdaIN(enc(c), enc(s)) + (1-alpha)*enc(c),
  out = clip(dec(f), 0, 1), uint8 by truncation. An unreadable style image falls back to the first image in the
  list, as the reference does (meta["style_fallback"]). The decoder output (8*ceil(H/8) x 8*ceil(W/8)) is cropped to
  its top-left H x W.
- "adain" with weights but no style images: the AdaIN network with a built-in procedural style -> not faithful.
- "proxy" without weights: statistics transfer, not faithful (see `proxy_stylize`), with the given style images or
  the built-in procedural "paintings" (`builtin_styles()`).
alpha = [0.2, 0.4, 0.6, 0.8, 1.0] by severity in every mode.

Costs: content and style features are memoised per clip (ClipContext.memo), so render_many over 5 severities encodes
once and decodes five times. Loaded networks are cached per process by `adain.load_adain`.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import cv2
import numpy as np

from workloads.perturbations.video._registry import (AssetNeeds, ClipContext, find_files, frame_chunks, register,
                                                     to_float, to_uint8)
from workloads.seeding import digest, file_digest, path_version

ALPHAS = (0.2, 0.4, 0.6, 0.8, 1.0)
STYLE_EXTENSIONS = (".png", ".jpg", ".jpeg")
BUILTIN_STYLE_SIZE = 256
_FEATURE_MEMO_LIMIT = 256 << 20  # bytes of relu4_1 content features kept per clip for reuse across severities


# ----------------------------------------------------------------------------------------------- style image sets

def list_style_images(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Style image paths, sorted: a folder is searched recursively for .png/.jpg/.jpeg (case-insensitive)."""
    if isinstance(source, (str, os.PathLike)):
        return list(_list_style_folder(str(source)))
    paths = [str(p) for p in source]
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"style image(s) not found (asset style_images): {missing[:3]}")
    if not paths:
        raise ValueError("asset style_images is an empty list")
    return sorted(paths)


@functools.lru_cache(maxsize=8)
def _list_style_folder(source: str) -> tuple[str, ...]:
    p = Path(source)
    if p.is_file():
        return (str(p),)
    if not p.is_dir():
        raise FileNotFoundError(f"style image folder not found (asset style_images): {source}")
    found = find_files(source, STYLE_EXTENSIONS)
    if not found:
        raise ValueError(f"no .png/.jpg/.jpeg style images under {source} (asset style_images)")
    return found


@functools.lru_cache(maxsize=1)
def builtin_styles() -> tuple[tuple[str, np.ndarray], ...]:
    """Six deterministic procedurally generated "paintings" (uint8 RGB 256x256), used when no style set is given:
    brush strokes, colour bands, a rotated checker, a stained-glass mosaic, pointillism and a colour swirl."""
    s = BUILTIN_STYLE_SIZE
    yy, xx = np.mgrid[0:s, 0:s].astype(np.float32) / s
    out = []

    # 1. brush strokes along a smooth flow field, warm palette
    rng = np.random.default_rng(101)
    palette = np.array([[200, 60, 30], [240, 170, 40], [90, 30, 20], [250, 230, 180], [160, 90, 40]], np.uint8)
    img = np.full((s, s, 3), (120, 50, 30), np.uint8)
    for _ in range(900):
        x, y = rng.uniform(0, s, 2)
        ang = np.sin(3 * x / s * np.pi) + np.cos(2 * y / s * np.pi)
        length = rng.uniform(8, 24)
        dx, dy = np.cos(ang) * length, np.sin(ang) * length
        col = palette[rng.integers(len(palette))].astype(int) + rng.integers(-20, 21, 3)
        cv2.line(img, (int(x - dx), int(y - dy)), (int(x + dx), int(y + dy)),
                 tuple(int(c) for c in np.clip(col, 0, 255)), int(rng.integers(2, 7)), cv2.LINE_AA)
    out.append(("strokes", img))

    # 2. diagonal colour bands (blue/magenta gradient with sinusoidal ripples)
    t = np.sin((xx + yy) * 9 * np.pi + 2 * np.sin(yy * 7)) * 0.5 + 0.5
    img = np.stack([80 + 150 * t, 20 + 60 * (1 - t) * xx, 120 + 120 * (1 - t)], -1)
    out.append(("bands", np.clip(img, 0, 255).astype(np.uint8)))

    # 3. rotated checker in two contrasting colours with grain
    rng = np.random.default_rng(103)
    u, v = (xx - yy) * 8, (xx + yy) * 8
    chk = ((np.floor(u) + np.floor(v)) % 2).astype(np.float32)[..., None]
    img = chk * np.array([20, 120, 60], np.float32) + (1 - chk) * np.array([240, 220, 90], np.float32)
    img += rng.normal(0, 12, img.shape)
    out.append(("checker", np.clip(img, 0, 255).astype(np.uint8)))

    # 4. stained-glass mosaic: Voronoi cells with dark leading
    rng = np.random.default_rng(104)
    seeds = rng.uniform(0, s, (60, 2)).astype(np.float32)
    cols = rng.integers(30, 256, (60, 3)).astype(np.float32)
    grid = np.stack([xx * s, yy * s], -1)
    d = np.linalg.norm(grid[:, :, None, :] - seeds[None, None], axis=-1)
    order = np.argsort(d, axis=-1)
    nearest, second = order[..., 0], order[..., 1]
    d1 = np.take_along_axis(d, nearest[..., None], -1)[..., 0]
    d2 = np.take_along_axis(d, second[..., None], -1)[..., 0]
    img = cols[nearest] * (np.clip((d2 - d1) / 3.0, 0, 1)[..., None] * 0.85 + 0.15)
    out.append(("mosaic", np.clip(img, 0, 255).astype(np.uint8)))

    # 5. pointillism: dense dots over a pale ground
    rng = np.random.default_rng(105)
    img = np.full((s, s, 3), (235, 230, 210), np.uint8)
    palette = np.array([[40, 90, 200], [60, 170, 80], [230, 200, 40], [220, 80, 60], [120, 60, 160]])
    for _ in range(2500):
        x, y = rng.integers(0, s, 2)
        c = palette[rng.integers(len(palette))] + rng.integers(-25, 26, 3)
        cv2.circle(img, (int(x), int(y)), int(rng.integers(2, 5)), tuple(int(v) for v in np.clip(c, 0, 255)), -1)
    out.append(("pointillism", img))

    # 6. colour swirl
    r = np.hypot(xx - 0.5, yy - 0.5)
    th = np.arctan2(yy - 0.5, xx - 0.5) + 10 * r
    img = np.stack([128 + 127 * np.sin(3 * th), 128 + 127 * np.sin(3 * th + 2.1), 128 + 127 * np.sin(3 * th + 4.2)], -1)
    out.append(("swirl", np.clip(img, 0, 255).astype(np.uint8)))
    for _, im in out:
        im.setflags(write=False)
    return tuple(out)


def read_style_image(path: str) -> np.ndarray:
    """uint8 RGB of an image file (PIL, like the reference); raises OSError/ValueError naming the path."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.verify()
        with Image.open(path) as img:
            return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()
    except Exception as err:
        raise ValueError(f"cannot read style image {path}: {type(err).__name__}: {err}") from err


# ----------------------------------------------------------------------------------------------- the proxy

def _lab(x: np.ndarray) -> np.ndarray:
    """float RGB [..., H, W, 3] in [0, 1] -> CIE Lab (float32; L 0..100)."""
    flat = x.reshape(-1, x.shape[-2], 3).astype(np.float32)
    return cv2.cvtColor(flat, cv2.COLOR_RGB2LAB).reshape(x.shape)


def _rgb(lab: np.ndarray) -> np.ndarray:
    flat = lab.reshape(-1, lab.shape[-2], 3).astype(np.float32)
    return cv2.cvtColor(flat, cv2.COLOR_LAB2RGB).reshape(lab.shape)


def _cover(image: np.ndarray, h: int, w: int) -> np.ndarray:
    """Resize (aspect kept) so the image covers h x w, then centre-crop."""
    ih, iw = image.shape[:2]
    scale = max(h / ih, w / iw)
    nh, nw = max(h, int(np.ceil(ih * scale))), max(w, int(np.ceil(iw * scale)))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    img = cv2.resize(image, (nw, nh), interpolation=interp)
    top, left = (nh - h) // 2, (nw - w) // 2
    return img[top:top + h, left:left + w]


def proxy_stylize(frames: np.ndarray, style: np.ndarray, alpha: float, texture: float = 1.0,
                  stylized: np.ndarray | None = None) -> np.ndarray:
    """Non-faithful stand-in for AdaIN, deterministic and model-free. uint8 [T, H, W, 3] -> uint8 same shape.
    Steps 1-3 do not depend on alpha: pass their result (`proxy_stylized`) as `stylized` to share it across
    severities.

    1. Colour statistics transfer (Reinhard et al.) in CIE Lab, a decorrelated colour space: per channel,
       (x - mean_clip) / std_clip * std_style + mean_style, statistics over the whole clip so frames stay consistent
       (AdaIN matches first/second moments of deep features in the same spirit).
    2. Painterly abstraction: an edge-preserving bilateral filter on the transferred frame.
    3. Texture overlay: the style image's high-pass luminance (L - GaussianBlur(L, 2)), resized to cover the frame,
       added to L with weight `texture` (same texture on every frame, like a canvas).
    4. out = alpha * stylised + (1 - alpha) * content (alpha = the reference's per-severity AdaIN alpha)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    styl = proxy_stylized(frames, style, texture) if stylized is None else stylized
    frames = np.asarray(frames)
    out = np.empty(frames.shape, np.uint8)
    for part in frame_chunks(*frames.shape[:3]):  # a few frames' float temporaries at a time at HD
        out[part] = to_uint8(alpha * styl[part] + (1.0 - alpha) * to_float(frames[part]))
    return out


def proxy_stylized(frames: np.ndarray, style: np.ndarray, texture: float = 1.0) -> np.ndarray:
    """Steps 1-3 of `proxy_stylize` (alpha = 1), float RGB [T, H, W, 3] in [0, 1]. The clip's Lab statistics need
    every frame's Lab values at once; everything else runs a chunk of frames at a time (frame_chunks), the same
    per-pixel arithmetic as on the whole clip."""
    frames = np.asarray(frames)
    t, h, w, _ = frames.shape
    chunks = frame_chunks(t, h, w)
    lab_c = np.empty(frames.shape, np.float32)
    for part in chunks:
        lab_c[part] = _lab(to_float(frames[part]))
    style_f = to_float(np.asarray(style, dtype=np.uint8))
    lab_s = _lab(style_f)
    mu_c, sd_c = lab_c.reshape(-1, 3).mean(0), lab_c.reshape(-1, 3).std(0)
    mu_s, sd_s = lab_s.reshape(-1, 3).mean(0), lab_s.reshape(-1, 3).std(0)
    sigma_space = max(2.0, min(h, w) / 48.0)
    if texture:
        lab_tex = _lab(to_float(_cover(np.asarray(style, dtype=np.uint8), h, w)))
        detail = lab_tex[..., 0] - cv2.GaussianBlur(lab_tex[..., 0], (0, 0), 2.0)
    styl = np.empty(frames.shape, np.float32)
    for part in chunks:
        lab_t = (lab_c[part] - mu_c) / (sd_c + 1e-3) * sd_s + mu_s
        lab_t[..., 0] = np.clip(lab_t[..., 0], 0.0, 100.0)
        out = np.clip(_rgb(lab_t), 0.0, 1.0)
        out = np.stack([cv2.bilateralFilter(f, d=-1, sigmaColor=0.12, sigmaSpace=sigma_space) for f in out])
        if texture:
            lab_o = _lab(out)
            lab_o[..., 0] = np.clip(lab_o[..., 0] + texture * detail[None], 0.0, 100.0)
            out = np.clip(_rgb(lab_o), 0.0, 1.0)
        styl[part] = out
    return styl


# ----------------------------------------------------------------------------------------------- the perturbation

def _pick_style(ctx: ClipContext, rng: np.random.Generator) -> dict[str, Any]:
    """Choose the clip's one style. Returns {"name", "path"|None, "image"|None, "fallback"|None}."""
    src = ctx.assets.get("style_images")
    if src is None:
        styles = builtin_styles()
        name, image = styles[int(rng.integers(len(styles)))]
        return {"name": f"builtin:{name}", "path": None, "image": np.asarray(image), "given": False}
    paths = list_style_images(src)
    path = paths[int(rng.integers(len(paths)))]
    info = {"name": path, "path": path, "given": True}
    try:
        info["image"] = read_style_image(path)
    except ValueError as err:  # the reference falls back to the first image of the list
        info.update(image=read_style_image(paths[0]), path=paths[0], name=paths[0], style_fallback=str(err))
    return info


def _adain_assets(ctx: ClipContext) -> tuple[str, str] | None:
    vgg, dec = ctx.assets.get("adain_vgg"), ctx.assets.get("adain_decoder")
    if vgg is None and dec is None:
        return None
    if vgg is None or dec is None:
        raise ValueError("AdaIN needs both assets adain_vgg (vgg_normalised.pth) and adain_decoder (decoder.pth); "
                         f"got adain_vgg={vgg!r}, adain_decoder={dec!r}")
    for asset, p in (("adain_vgg", vgg), ("adain_decoder", dec)):
        if not Path(p).is_file():
            raise FileNotFoundError(f"AdaIN weights not found (asset {asset}): {p}")
    return str(vgg), str(dec)


def _assets_version(paths: Mapping[str, str | None], context: Mapping[str, str]) -> str:
    styles = path_version(paths["style_images"]) if paths.get("style_images") else "builtin"
    if not paths.get("adain_vgg"):
        return "proxy:" + styles
    return "adain:" + digest([file_digest(paths["adain_vgg"]), file_digest(paths["adain_decoder"]), styles])


@register("style_transfer", order=9, level="high",
          assets=AssetNeeds(("adain_vgg", "adain_decoder", "style_images"), _assets_version))
def style_transfer(ctx: ClipContext, severity: int, rng: np.random.Generator):
    """AdaIN style transfer with one style per clip; alpha 0.2..1.0. Proxy without weights."""
    alpha = ALPHAS[severity - 1]
    weights = _adain_assets(ctx)
    # one style per clip: with a clip seed every severity draws the same style (and shares its encoding)
    style = _pick_style(ctx, ctx.clip_rng("style_transfer", rng))
    frames = ctx.sampled
    meta: dict[str, Any] = {"alpha": alpha, "style": style["name"]}
    if "style_fallback" in style:
        meta["style_fallback"] = style["style_fallback"]

    if weights is not None:
        from workloads.perturbations.video import adain

        device = str(ctx.assets.get("adain_device", "cpu"))
        model = adain.load_adain(weights[0], weights[1], device)
        model_key = (weights, device)
        feat_bytes = frames.shape[0] * 512 * (-(-frames.shape[1] // 8)) * (-(-frames.shape[2] // 8)) * 4
        if feat_bytes <= _FEATURE_MEMO_LIMIT:
            content_feats = ctx.memo(("style_transfer.content", model_key), lambda: model.content_features(frames))
        else:
            content_feats = None
        style_feat = ctx.memo(("style_transfer.style", model_key, style["name"]),
                              lambda: model.encode(adain.style_tensor_from_array(style["image"])))
        out = model.stylize(frames, style_feat, alpha, content_feats=content_feats)
        meta.update(mode="adain", device=device)
        if style["given"]:
            meta["faithful"] = True
        else:
            meta.update(faithful=False, fallback="AdaIN with real weights but a built-in procedural style image "
                                                 "(no style_images asset; the reference uses Painter-by-Numbers)")
        return out, meta

    stylized = ctx.memo(("style_transfer.proxy", style["name"]), lambda: proxy_stylized(frames, style["image"]))
    out = proxy_stylize(frames, style["image"], alpha, stylized=stylized)
    what = "the given style images" if style["given"] else "built-in procedural style images"
    meta.update(mode="proxy", faithful=False,
                fallback=f"no AdaIN weights: Lab mean/std transfer + bilateral smoothing + style texture overlay, "
                         f"blended with alpha, using {what}")
    return out, meta


__all__ = ["ALPHAS", "style_transfer", "proxy_stylize", "proxy_stylized", "builtin_styles", "list_style_images",
           "read_style_image"]
