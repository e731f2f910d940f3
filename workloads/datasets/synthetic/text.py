"""Content of generator version 3, the scene-text domain (`synthetic_text`, issue #35): version 1's scenes (domain
A: shapes moving over a textured background) with a sign whose word the caption names.

A clip: a version-1 scene at the source size (default 128 px, so the signs are legible there and only there: the
model sees 64 px), plus one sign for the whole clip: a light rectangle with one word of `WORDS` in dark capitals
(OpenCV's Hershey simplex font, anti-aliased), centred near the top or the bottom of the frame (+-4% jitter), its
cap height 11-13% of the frame side. The sign is drawn last, over the objects.

Captions: version 1's domain-A caption with the sign: "OBJ on a {bg colour} {pattern} background with a sign reading
WORD"; the train paraphrase "a sign reading WORD over a {bg colour} {pattern} background where OBJ" (objects swapped
as version 1's).

Test split: the scenes come in groups of `GROUP` (4) test clips that share the scene's attributes (background and
objects with all their attributes; the geometry and jitter are each clip's own) and differ in their word. A model
that cannot read the sign can tell a group's clips apart only by chance; reading it (OCR, or the pixels) tells them
apart. Train clips: as version 1 (random scenes with a random word, none repeating a test combination of scene and
word; the first ones cover every word and attribute value of the test captions).
"""
from __future__ import annotations

import numpy as np

from workloads.datasets.synthetic.config import DOMAINS, SyntheticConfig
from workloads.datasets.synthetic.drawing import render_clip_v1
from workloads.datasets.synthetic.scenes import CATEGORIES, _combo_key, _geometry, _random_attrs, _values, draw_clips
from workloads.seeding import stable_seed

GROUP = 4
# short words of everyday signs (at most 6 letters: a word fits the sign at a legible size)
WORDS = ("OPEN", "EXIT", "STOP", "SALE", "HOTEL", "CAFE", "BANK", "PARK", "TAXI", "POLICE", "PIZZA", "BOOKS",
         "MUSIC", "FRESH", "SHOP", "BAR", "BUS", "GYM", "ZOO", "CINEMA", "BAKERY", "MUSEUM", "MARKET", "GARAGE",
         "SCHOOL", "TOILET", "BEACH", "GARDEN", "OFFICE", "BRIDGE", "DANGER", "QUIET", "TICKET", "COFFEE", "BREAD",
         "FISH", "WINE", "MILK", "FRUIT", "TOYS", "SHOES", "GOLD", "PHONE", "PHOTO", "SPORT", "DENTAL", "FLOWER",
         "CLOSED")


def _attrs(rng: np.random.Generator, cfg: SyntheticConfig, force: tuple[str, str] | None = None) -> dict:
    attrs = _random_attrs(rng, cfg, None if force is not None and force[0] == "word" else force)
    word = force[1] if force is not None and force[0] == "word" else WORDS[rng.integers(len(WORDS))]
    return {**attrs, "sign": {"word": word}}


def _key(attrs: dict) -> tuple:
    return _combo_key(attrs), attrs["sign"]["word"]


def _named(attrs: dict) -> set[tuple[str, str]]:
    return _values(attrs) | {("word", attrs["sign"]["word"])}


def _test_groups(rng: np.random.Generator, cfg: SyntheticConfig) -> list[dict]:
    """`n_test` test attributes: distinct scenes, each repeated with GROUP distinct words (the last group cut)."""
    scenes, keys = [], set()
    while len(scenes) * GROUP < cfg.n_test:
        attrs = _random_attrs(rng, cfg)
        if _combo_key(attrs) not in keys:
            keys.add(_combo_key(attrs))
            scenes.append(attrs)
    test = [{**scene, "sign": {"word": WORDS[w]}}
            for scene in scenes for w in rng.choice(len(WORDS), GROUP, replace=False)]
    return test[:cfg.n_test]


def _geometry_with_sign(rng: np.random.Generator, cfg: SyntheticConfig, attrs: dict) -> dict:
    clip = _geometry(rng, cfg, attrs)
    top = bool(rng.random() < 0.5)
    clip["sign"] = {"word": attrs["sign"]["word"],
                    "cx": round(float(0.5 + rng.uniform(-0.04, 0.04)), 3),
                    "cy": round(float((0.2 if top else 0.8) + rng.uniform(-0.04, 0.04)), 3),
                    "height": round(float(rng.uniform(0.11, 0.13)), 3),
                    "paper": [int(c) for c in rng.integers(225, 251, 3)],
                    "ink": [int(c) for c in rng.integers(10, 45, 3)]}
    return clip


def caption(clip: dict, variant: int = 0) -> str:
    dom, word = DOMAINS["a"], clip["sign"]["word"]
    if variant == 1:
        return f"a sign reading {word} over {dom.caption(clip, 1)}"
    return f"{dom.caption(clip, 0)} with a sign reading {word}"


def sample_clips(config: SyntheticConfig) -> list[dict]:
    """Every version-3 clip, test first then train, in file order (as version 1's, with a `sign` each)."""
    rng = np.random.default_rng(stable_seed("mlvp-synthetic", 3, config.domain, config.seed))
    order = ([("word", w) for w in WORDS] + [(c, v) for c, vals in CATEGORIES for v in vals]
             + [("n_objects", "1"), ("n_objects", "2")])
    return draw_clips(config, rng, random_attrs=_attrs, combo_key=_key, values=_named, order=order,
                      geometry=_geometry_with_sign, caption=caption, forced_value_named=True,
                      hint=" (scene-text domain)", test=_test_groups(rng, config))


def draw_sign(frames: np.ndarray, sign: dict) -> np.ndarray:
    """Draw `sign` on every frame of uint8 [T, S, S, 3] (in place; returned)."""
    import cv2

    size = frames.shape[1]
    font, word = cv2.FONT_HERSHEY_SIMPLEX, sign["word"]
    (w1, h1), _ = cv2.getTextSize(word, font, 1.0, 2)
    scale = min(sign["height"] * size / h1, 0.82 * size / w1)
    thick = max(1, int(round(2.2 * scale)))
    (w, h), base = cv2.getTextSize(word, font, scale, thick)
    cx, cy = sign["cx"] * size, sign["cy"] * size
    pad = max(2, int(0.35 * h))
    x0, y0 = int(round(cx - w / 2)), int(round(cy + h / 2))
    canvas = frames[0].copy()
    cv2.rectangle(canvas, (x0 - pad, y0 - h - pad), (x0 + w + pad, y0 + base + pad // 2), tuple(sign["paper"]), -1)
    cv2.putText(canvas, word, (x0, y0), font, scale, tuple(sign["ink"]), thick, cv2.LINE_AA)
    ys = slice(max(0, y0 - h - pad), min(size, y0 + base + pad // 2 + 1))
    xs = slice(max(0, x0 - pad), min(size, x0 + w + pad + 1))
    frames[:, ys, xs] = canvas[ys, xs]
    return frames


def render_clip(clip: dict, config: SyntheticConfig) -> np.ndarray:
    """The frames of one version-3 clip, uint8 [num_frames, size, size, 3] RGB."""
    return draw_sign(render_clip_v1(clip, config), clip["sign"])
