"""The embedded default dataset: synthetic video-text pairs, generated deterministically from a seed, written as real
H.264 .mp4 files plus annotation files in MSRVTT's layout, so the MSRVTT loader and the decord decode path run on it
unchanged. Registered as `synthetic` (domain A), `synthetic_b` (domain B) and `synthetic_c` (domain C, the
zero-shot pretraining style: its frames and captions train the embedded default's "pretrained CLIP").

What a clip shows
    `num_frames` frames (default 16 at 8 fps, 64x64) of one or two objects over a textured background. Each object
    has a shape (circle, square, triangle, cross), a colour (red, orange, yellow, green, blue, purple, pink, white),
    a size (small, large) and a motion (left, right, up, down: constant speed in a straight line; still). The
    background is a pattern (striped, checkered, dotted, wavy) in a colour (gray, brown, teal, navy). Per-clip
    jitter keeps retrieval from being trivial: start position, speed, radius (+-10%), rotation (+-20 degrees),
    object colour (+-12 per channel), background colour (+-8), pattern period and phase.
    Motion cue in every frame: mean pooling over frames ignores their order, so each frame also shows faint copies
    of every object where it was 2 frames (opacity 0.4) and 4 frames (opacity 0.2) earlier: a trail that points
    away from the direction of motion. Positions before the first frame are extrapolated, so frame 0 has its trail
    too; a still object's trail hides under it. Two objects in a clip never share (colour, shape) and are placed so
    their centres stay apart.

Caption grammar (OBJ = "a {size} {colour} {shape} {motion phrase}")
    domain A  motion phrases: moves left / moves right / moves up / moves down / stays still
              test + 1st train caption: "OBJ on a {bg colour} {pattern} background"
                                        "OBJ1 and OBJ2 on a {bg colour} {pattern} background"
              2nd train caption:        "a {bg colour} {pattern} background where OBJ"
                                        "OBJ2 and OBJ1 on a {bg colour} {pattern} background" (objects swapped)
    domain B  motion phrases: drifts left / drifts right / drifts up / drifts down / stays in place
              test + 1st train caption: "on a {pattern} {bg colour} backdrop, OBJ"
                                        "on a {pattern} {bg colour} backdrop, OBJ1 while OBJ2"
              2nd train caption:        "OBJ over a {pattern} {bg colour} backdrop"
                                        "OBJ2 while OBJ1 over a {pattern} {bg colour} backdrop"
    domain C  motion phrases: heading left / heading right / heading up / heading down / not moving
              (OBJ without its article) test + 1st train caption: "OBJ; {pattern} {bg colour} scene"
                                        "OBJ1; OBJ2; {pattern} {bg colour} scene"
              2nd train caption:        "a {pattern} {bg colour} scene with OBJ" / "... with OBJ2 and OBJ1"
    e.g. A: "a large blue triangle moves left and a small white cross stays still on a teal dotted background"
         B: "on a wavy gray backdrop, a small orange square drifts up"
         C: "small yellow square heading down; wavy navy scene"

How the domains differ (same attribute words, different look and phrasing)
    A: filled shapes with hard anti-aliased edges; saturated palette; axis-aligned high-contrast patterns (vertical
       stripes, square checks, dot grid, horizontal wavy bands).
    B: outlined shapes (thick outline, faintly tinted inside); softer, shifted palette; low-contrast patterns drawn
       differently (thin diagonal stripes, diamond checks, ring lattice, concentric ripples); static film grain and a
       vignette; captions name the background first and use other verbs ("drifts", "while", "backdrop").
    C: soft-edged filled shapes; a darker palette; line patterns (horizontal stripes, a grid of thin lines, sparse
       polka dots, zigzag bands) with faint grain; terse captions ("heading", "scene", ";").

Splits and compositional generalisation
    Test: `n_test` videos, one caption each (the first template), all distinct. Train: `n_train` videos with
    `captions_per_train_video` captions each (1 or 2; the second is the paraphrase above). No train video shows a
    test combination (background + set of objects with all their attributes), in any phrasing, so every test
    caption is a combination never seen in training. The first train videos are drawn to cover every attribute value
    and object count the test captions use (at most 29; with the default sizes random draws already do), so every
    word of the test captions occurs in training (checked at generation).

Files (MSRVTT's names, so `create_dataset("msrvtt", root=<dir>)` also reads them)
    videos/<video_id>.mp4          H.264 (libx264, CRF 18, yuv420p; deterministic: see video_io.write_mp4)
    MSRVTT_JSFUSION_test.csv       key,vid_key,video_id,sentence; test videos in order
    MSRVTT_train.9k.csv            video_id; train videos in order
    MSRVTT_data.json               {"sentences": [{"caption", "video_id", "sen_id"}], "videos": [...]}: train only
    attributes.jsonl               one JSON object per video (test first): attributes, geometry, captions
    README.txt, manifest.json      manifest (config, digest, file sizes) is written last, atomically

Caching: `create_dataset("synthetic", root=DIR, seed=0, ...)` generates on first use into
`DIR/<name>-<digest of config + GENERATOR_VERSION>/` (root=None: `$MLVP_CACHE_DIR/datasets`, default
`~/.cache/mlvp/datasets`). Generation runs in a temporary sibling directory that is renamed into place when
complete, under a file lock, so concurrent callers generate once and a crash never leaves a directory that looks
complete; a directory whose manifest is missing or disagrees with its files is regenerated. Output is byte-identical
for a seed whatever the number of worker processes (each clip is rendered from its own pre-sampled parameters).
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from workloads.atomic import atomic_write_text
from workloads.datasets.base import DatasetError, Split, VideoTextPair, read_jsonl, register_dataset
from workloads.datasets.msrvtt import MSRVTTDataset
from workloads.seeding import digest, stable_seed
from workloads.video_io import write_mp4

# Bump when anything changes what generate() writes for a given config: it is part of the cache directory name.
GENERATOR_VERSION = 1

SHAPES = ("circle", "square", "triangle", "cross")
COLOURS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "white")
SIZES = ("small", "large")
MOTIONS = ("left", "right", "up", "down", "still")
PATTERNS = ("striped", "checkered", "dotted", "wavy")
BG_COLOURS = ("gray", "brown", "teal", "navy")

DIRECTIONS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0), "still": (0.0, 0.0)}
# (lag in frames, opacity) of the motion trail, oldest first
TRAIL = ((4, 0.2), (2, 0.4))
MAX_LAG = max(lag for lag, _ in TRAIL)

TEST_CSV = "MSRVTT_JSFUSION_test.csv"
TRAIN_CSV = "MSRVTT_train.9k.csv"
DATA_JSON = "MSRVTT_data.json"
ATTRIBUTES = "attributes.jsonl"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class DomainStyle:
    key: str
    id_prefix: str
    palette: dict[str, tuple[int, int, int]]
    backgrounds: dict[str, tuple[int, int, int]]
    motion_phrases: dict[str, str]
    outline: bool
    contrast: tuple[float, float]  # background brightness factor range (pattern off, pattern on)
    period: float  # pattern period as a fraction of the frame size
    grain: float  # std of static per-clip noise (0-255 scale)
    vignette: float  # corner darkening, 0 = none
    edge: float = 1.0  # width of a filled shape's anti-aliased edge in pixels (larger = softer)

    def object_phrase(self, obj: dict) -> str:
        return f"a {obj['size']} {obj['colour']} {obj['shape']} {self.motion_phrases[obj['motion']]}"

    def caption(self, clip: dict, variant: int = 0) -> str:
        bg = clip["background"]
        objs = [self.object_phrase(o) for o in clip["objects"]]
        if variant == 1 and len(objs) == 2:
            objs = objs[::-1]
        if self.key == "a":
            if len(objs) == 1 and variant == 1:
                return f"a {bg['colour']} {bg['pattern']} background where {objs[0]}"
            return f"{' and '.join(objs)} on a {bg['colour']} {bg['pattern']} background"
        if self.key == "c":
            objs = [o.removeprefix("a ") for o in objs]
            scene = f"{bg['pattern']} {bg['colour']} scene"
            return f"{'; '.join(objs)}; {scene}" if variant == 0 else f"a {scene} with {' and '.join(objs)}"
        place = f"a {bg['pattern']} {bg['colour']} backdrop"
        body = " while ".join(objs)
        return f"on {place}, {body}" if variant == 0 else f"{body} over {place}"


DOMAINS: dict[str, DomainStyle] = {
    "a": DomainStyle(
        key="a", id_prefix="syna",
        palette={"red": (225, 35, 35), "orange": (245, 140, 20), "yellow": (240, 225, 40), "green": (40, 190, 60),
                 "blue": (40, 90, 235), "purple": (140, 50, 200), "pink": (245, 120, 190),
                 "white": (245, 245, 245)},
        backgrounds={"gray": (105, 105, 105), "brown": (115, 75, 45), "teal": (25, 105, 105), "navy": (30, 40, 95)},
        motion_phrases={"left": "moves left", "right": "moves right", "up": "moves up", "down": "moves down",
                        "still": "stays still"},
        outline=False, contrast=(0.72, 1.18), period=1 / 6, grain=0.0, vignette=0.0),
    "b": DomainStyle(
        key="b", id_prefix="synb",
        palette={"red": (205, 60, 80), "orange": (235, 125, 55), "yellow": (230, 215, 95), "green": (75, 175, 105),
                 "blue": (75, 125, 225), "purple": (165, 95, 215), "pink": (240, 155, 205),
                 "white": (230, 230, 220)},
        backgrounds={"gray": (135, 135, 130), "brown": (140, 100, 70), "teal": (50, 130, 125),
                     "navy": (50, 62, 125)},
        motion_phrases={"left": "drifts left", "right": "drifts right", "up": "drifts up", "down": "drifts down",
                        "still": "stays in place"},
        outline=True, contrast=(0.86, 1.12), period=1 / 8, grain=5.0, vignette=0.3),
    # domain C: the zero-shot "pretraining" style (image-caption pairs of single frames; never a retrieval target):
    # soft-edged filled shapes, a darker palette, line patterns, terse captions in a third phrasing
    "c": DomainStyle(
        key="c", id_prefix="sync",
        palette={"red": (190, 40, 50), "orange": (215, 115, 30), "yellow": (215, 200, 60), "green": (50, 150, 70),
                 "blue": (55, 85, 190), "purple": (120, 60, 170), "pink": (215, 110, 170),
                 "white": (225, 225, 230)},
        backgrounds={"gray": (90, 92, 95), "brown": (100, 70, 50), "teal": (30, 95, 100), "navy": (35, 45, 85)},
        motion_phrases={"left": "heading left", "right": "heading right", "up": "heading up", "down": "heading down",
                        "still": "not moving"},
        outline=False, contrast=(0.8, 1.15), period=1 / 5, grain=2.0, vignette=0.0, edge=2.5),
}


@dataclass(frozen=True)
class SyntheticConfig:
    """Everything that determines the generated files (the worker count does not)."""

    domain: str = "a"
    seed: int = 0
    n_train: int = 3000  # train videos
    n_test: int = 256  # test videos = test pairs
    size: int = 64  # frame height = width, even; decord 0.6 rejects 16/24/48/72 px (video_io falls back to PyAV)
    num_frames: int = 16
    fps: int = 8
    captions_per_train_video: int = 2  # 1 or 2 (the second is a paraphrase)
    two_object_prob: float = 0.5

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int):
                if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                    object.__setattr__(self, f.name, int(value))
                    continue
                try:  # 64.0 from a YAML file is fine, 2.5 or "abc" are not
                    ok = not isinstance(value, bool) and float(value).is_integer()
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    raise DatasetError(f"synthetic dataset: {f.name} must be an integer, got {value!r}")
                object.__setattr__(self, f.name, int(float(value)))
        try:
            object.__setattr__(self, "two_object_prob", float(self.two_object_prob))
        except (TypeError, ValueError):
            raise DatasetError(f"synthetic dataset: two_object_prob must be a number, got {self.two_object_prob!r}")
        if self.domain not in DOMAINS:
            raise DatasetError(f"synthetic dataset: unknown domain {self.domain!r}; domains: {sorted(DOMAINS)}")
        if self.size < 16 or self.size % 2:
            raise DatasetError(f"synthetic dataset: size must be an even number >= 16, got {self.size}")
        if self.num_frames < 1 or self.fps < 1:
            raise DatasetError("synthetic dataset: num_frames and fps must be >= 1")
        if self.n_train < 1 or self.n_test < 1:
            raise DatasetError(f"synthetic dataset: need n_train >= 1 and n_test >= 1, got n_train={self.n_train}, "
                               f"n_test={self.n_test}")
        if self.captions_per_train_video not in (1, 2):
            raise DatasetError("synthetic dataset: captions_per_train_video must be 1 or 2")
        if not 0.0 <= self.two_object_prob <= 1.0:
            raise DatasetError("synthetic dataset: two_object_prob must be in [0, 1]")


def config_digest(config: SyntheticConfig) -> str:
    return digest({"generator_version": GENERATOR_VERSION, "config": asdict(config)}, length=12)


def default_root() -> Path:
    return Path(os.path.expanduser(os.environ.get("MLVP_CACHE_DIR", "~/.cache/mlvp"))) / "datasets"


# ---------------------------------------------------------------------------------------------------------------
# Sampling: attributes (with the test/train constraints), then per-clip geometry and jitter. Pure and cheap; done
# in full by every process so workers need only the config.


def _combo_key(attrs: dict) -> tuple:
    objs = tuple(sorted((o["size"], o["colour"], o["shape"], o["motion"]) for o in attrs["objects"]))
    return attrs["background"]["pattern"], attrs["background"]["colour"], objs


CATEGORIES = (("shape", SHAPES), ("colour", COLOURS), ("size", SIZES), ("motion", MOTIONS),
              ("pattern", PATTERNS), ("bg", BG_COLOURS))


def _values(attrs: dict) -> set[tuple[str, str]]:
    """The (category, value) pairs a clip's caption names."""
    out = {("pattern", attrs["background"]["pattern"]), ("bg", attrs["background"]["colour"])}
    for o in attrs["objects"]:
        out |= {("shape", o["shape"]), ("colour", o["colour"]), ("size", o["size"]), ("motion", o["motion"])}
    out.add(("n_objects", str(len(attrs["objects"]))))
    return out


def _random_object(rng: np.random.Generator, taken: set, force: tuple[str, str] | None = None) -> dict:
    while True:
        obj = {"shape": SHAPES[rng.integers(len(SHAPES))], "colour": COLOURS[rng.integers(len(COLOURS))],
               "size": SIZES[rng.integers(len(SIZES))], "motion": MOTIONS[rng.integers(len(MOTIONS))]}
        if force is not None and force[0] in obj:
            obj[force[0]] = force[1]
        if (obj["colour"], obj["shape"]) not in taken:
            return obj


def _random_attrs(rng: np.random.Generator, cfg: SyntheticConfig, force: tuple[str, str] | None = None) -> dict:
    """Random attributes of one clip; `force=(category, value)` makes the clip name that value (category
    "n_objects" fixes the object count)."""
    n_obj = 2 if rng.random() < cfg.two_object_prob else 1
    bg = {"pattern": PATTERNS[rng.integers(len(PATTERNS))], "colour": BG_COLOURS[rng.integers(len(BG_COLOURS))]}
    if force is not None:
        if force[0] == "n_objects":
            n_obj = int(force[1])
        elif force[0] == "pattern":
            bg["pattern"] = force[1]
        elif force[0] == "bg":
            bg["colour"] = force[1]
    objs = [_random_object(rng, set(), force)]
    if n_obj == 2:
        objs.append(_random_object(rng, {(objs[0]["colour"], objs[0]["shape"])}))
    return {"background": bg, "objects": objs}


def _geometry(rng: np.random.Generator, cfg: SyntheticConfig, attrs: dict) -> dict:
    """Add positions, speeds, radii, rotations and jittered colours to `attrs` (values rounded, so the JSON record
    is exactly what is rendered)."""
    dom = DOMAINS[cfg.domain]
    S, T = cfg.size, cfg.num_frames
    scale = S / 64.0
    r3 = lambda x: round(float(x), 3)  # noqa: E731
    for _ in range(40):
        objects = []
        for o in attrs["objects"]:
            radius = (5.5 if o["size"] == "small" else 9.5) * scale * rng.uniform(0.9, 1.1)
            speed = rng.uniform(1.2, 1.8) * scale
            lo, hi = radius + 1.0, S - radius - 1.0
            if T > 1:
                speed = min(speed, 0.95 * (hi - lo) / (T - 1))
            travel = speed * (T - 1)
            dx, dy = DIRECTIONS[o["motion"]]
            start = []
            for d in (dx, dy):
                if d > 0:
                    start.append(rng.uniform(lo, hi - travel))
                elif d < 0:
                    start.append(rng.uniform(lo + travel, hi))
                else:
                    start.append(rng.uniform(lo, hi))
            if o["motion"] == "still":
                speed = 0.0
            rotation = 0.0 if o["shape"] == "circle" else rng.uniform(-20.0, 20.0)
            rgb = np.clip(np.array(dom.palette[o["colour"]]) + rng.integers(-12, 13, 3), 0, 255)
            objects.append({**o, "radius": r3(radius), "speed": r3(speed), "start": [r3(start[0]), r3(start[1])],
                            "velocity": [r3(dx * speed), r3(dy * speed)], "rotation": r3(rotation),
                            "rgb": [int(c) for c in rgb]})
        if len(objects) < 2 or _min_distance(objects, T) >= 0.8 * (objects[0]["radius"] + objects[1]["radius"]):
            break
    bg_rgb = np.clip(np.array(dom.backgrounds[attrs["background"]["colour"]]) + rng.integers(-8, 9, 3), 0, 255)
    background = {**attrs["background"], "rgb": [int(c) for c in bg_rgb],
                  "period": r3(S * dom.period * rng.uniform(0.85, 1.15)),
                  "phase": [r3(rng.uniform()), r3(rng.uniform())]}
    return {"background": background, "objects": objects, "noise_seed": int(rng.integers(2**31 - 1))}


def _min_distance(objects: list[dict], T: int) -> float:
    t = np.arange(T)[:, None]
    a = np.array(objects[0]["start"]) + t * np.array(objects[0]["velocity"])
    b = np.array(objects[1]["start"]) + t * np.array(objects[1]["velocity"])
    return float(np.min(np.linalg.norm(a - b, axis=1)))


def sample_clips(config: SyntheticConfig) -> list[dict]:
    """The full description of every clip, test first then train, in file order. Each is a JSON-able dict with
    video_id, split, background, objects, noise_seed and captions."""
    cfg = config
    dom = DOMAINS[cfg.domain]
    rng = np.random.default_rng(stable_seed("mlvp-synthetic", GENERATOR_VERSION, cfg.domain, cfg.seed))
    test_keys: set = set()
    test: list[dict] = []
    attempts = 0
    while len(test) < cfg.n_test:
        attempts += 1
        if attempts > 200 * cfg.n_test + 1000:
            raise DatasetError(f"synthetic dataset: cannot draw {cfg.n_test} distinct test combinations "
                               f"(two_object_prob={cfg.two_object_prob}); lower n_test")
        attrs = _random_attrs(rng, cfg)
        key = _combo_key(attrs)
        if key not in test_keys:
            test_keys.add(key)
            test.append(attrs)
    # Train: first the coverage clips (each names a value that the test captions use and that no earlier train
    # clip names), then random clips; none may repeat a test combination.
    def draw(force=None) -> dict:
        for _ in range(10_000):
            attrs = _random_attrs(rng, cfg, force)
            if _combo_key(attrs) not in test_keys:
                return attrs
        raise DatasetError("synthetic dataset: cannot draw a train clip outside the test combinations")

    needed = set().union(*(_values(a) for a in test))
    order = [(c, v) for c, vals in CATEGORIES for v in vals] + [("n_objects", "1"), ("n_objects", "2")]
    train: list[dict] = []
    covered: set = set()
    for value in order:
        if value in needed and value not in covered:
            train.append(draw(value))
            covered |= _values(train[-1])
    if len(train) > cfg.n_train:
        raise DatasetError(f"synthetic dataset: n_train={cfg.n_train} is too small to show every attribute value "
                           f"used by the test captions (needs {len(train)})")
    while len(train) < cfg.n_train:
        train.append(draw())

    clips = []
    for split, items in (("test", test), ("train", train)):
        n_caps = 1 if split == "test" else cfg.captions_per_train_video
        for i, attrs in enumerate(items):
            clip = {"video_id": f"{dom.id_prefix}_{split}_{i:05d}", "split": split, "domain": cfg.domain,
                    **_geometry(rng, cfg, attrs)}
            clip["captions"] = [dom.caption(clip, v) for v in range(n_caps)]
            clips.append(clip)
    _check_vocabulary(clips)
    return clips


def _check_vocabulary(clips: list[dict]) -> None:
    words = lambda c: c.replace(",", " ").split()  # noqa: E731
    train_words = {w for c in clips if c["split"] == "train" for cap in c["captions"] for w in words(cap)}
    unseen = {w for c in clips if c["split"] == "test" for w in words(c["captions"][0])} - train_words
    if unseen:  # pragma: no cover - guaranteed by the coverage clips
        raise DatasetError(f"synthetic dataset: test words never seen in training: {sorted(unseen)}")


# ---------------------------------------------------------------------------------------------------------------
# Rendering


def _smooth(x: np.ndarray, k: float) -> np.ndarray:
    """A soft 0/1 step of x around 0 (k = sharpness)."""
    return np.clip(0.5 + k * x, 0.0, 1.0)


def _pattern(bg: dict, dom: DomainStyle, xx: np.ndarray, yy: np.ndarray, S: int) -> np.ndarray:
    """Pattern intensity in [0, 1], [S, S]."""
    P = bg["period"]
    px, py = bg["phase"]
    tau = 2 * np.pi
    name = bg["pattern"]
    if dom.key == "a":
        if name == "striped":  # vertical stripes
            return _smooth(np.sin(tau * (xx / P + px)), 2.0)
        if name == "checkered":  # square checks
            return _smooth(np.sin(tau * (xx / P + px)) * np.sin(tau * (yy / P + py)), 3.0)
        if name == "dotted":  # dot grid
            fx = (xx / P + px) % 1.0 - 0.5
            fy = (yy / P + py) % 1.0 - 0.5
            return _smooth(0.22 * P - np.hypot(fx, fy) * P, 1.0)
        # wavy: horizontal wavy bands
        return _smooth(np.sin(tau * (yy / P + 0.3 * np.sin(tau * (xx / (1.7 * P) + px)) + py)), 1.5)
    if dom.key == "c":
        if name == "striped":  # horizontal stripes
            return _smooth(np.sin(tau * (yy / P + py)), 2.0)
        if name == "checkered":  # a grid of thin lines
            fx, fy = (xx / P + px) % 1.0, (yy / P + py) % 1.0
            return np.clip(1.0 - np.minimum(np.minimum(fx, 1 - fx), np.minimum(fy, 1 - fy)) * P / 1.5, 0.0, 1.0)
        if name == "dotted":  # large sparse polka dots
            fx = (xx / (1.5 * P) + px) % 1.0 - 0.5
            fy = (yy / (1.5 * P) + py) % 1.0 - 0.5
            return _smooth(0.3 * P - np.hypot(fx, fy) * 1.5 * P, 1.0)
        # wavy: diagonal zigzag bands
        return _smooth(np.sin(tau * ((xx + 2 * np.abs(((yy / P + py) % 1.0) - 0.5) * P) / P + px)), 2.0)
    if name == "striped":  # thin diagonal stripes
        return _smooth(np.sin(tau * ((xx + yy) / (1.06 * P) + px)) - 0.55, 3.0)
    if name == "checkered":  # diamond checks
        u, v = (xx + yy) / 1.414, (xx - yy) / 1.414
        return _smooth(np.sin(tau * (u / (1.4 * P) + px)) * np.sin(tau * (v / (1.4 * P) + py)), 3.0)
    if name == "dotted":  # ring lattice, odd rows offset
        row = np.floor(yy / P + py)
        fx = (xx / P + px + 0.5 * (row % 2)) % 1.0 - 0.5
        fy = (yy / P + py) % 1.0 - 0.5
        return np.clip(1.2 - np.abs(np.hypot(fx, fy) * P - 0.28 * P) * 1.2, 0.0, 1.0)
    # wavy: concentric ripples around a point given by the phase
    r = np.hypot(xx - px * S, yy - py * S)
    return 0.5 + 0.5 * np.sin(tau * r / P)


def _background(bg: dict, dom: DomainStyle, xx, yy, S: int) -> np.ndarray:
    lo, hi = dom.contrast
    m = _pattern(bg, dom, xx, yy, S)
    return np.asarray(bg["rgb"], np.float32) * (lo + (hi - lo) * m)[..., None].astype(np.float32)


def _sdf(shape: str, u: np.ndarray, w: np.ndarray, r: float) -> np.ndarray:
    """Signed distance (pixels, negative inside) of a shape of nominal radius r centred at the origin."""
    if shape == "circle":
        return np.hypot(u, w) - r
    if shape == "square":
        return _box(u, w, 0.85 * r, 0.85 * r)
    if shape == "triangle":  # pointing up (image y grows downwards); inradius 0.6 r
        d = w  # bottom edge normal (0, 1)
        d = np.maximum(d, -0.866 * u - 0.5 * w)
        d = np.maximum(d, 0.866 * u - 0.5 * w)
        return d - 0.6 * r
    # cross: union of two bars
    return np.minimum(_box(u, w, r, 0.34 * r), _box(u, w, 0.34 * r, r))


def _box(u, w, a, b):
    qx, qy = np.abs(u) - a, np.abs(w) - b
    outside = np.hypot(np.maximum(qx, 0.0), np.maximum(qy, 0.0))
    return outside + np.minimum(np.maximum(qx, qy), 0.0)


def _coverage(obj: dict, ts: np.ndarray, dom: DomainStyle, xx, yy) -> np.ndarray:
    """Anti-aliased opacity [len(ts), h, w] of the object at times ts, on the pixel grid (xx, yy) [h, w]."""
    cx = obj["start"][0] + obj["velocity"][0] * ts
    cy = obj["start"][1] + obj["velocity"][1] * ts
    dx = xx[None] - cx[:, None, None].astype(np.float32)
    dy = yy[None] - cy[:, None, None].astype(np.float32)
    th = np.deg2rad(obj["rotation"])
    c, s = np.float32(np.cos(th)), np.float32(np.sin(th))
    u, w = c * dx + s * dy, -s * dx + c * dy
    d = _sdf(obj["shape"], u, w, obj["radius"])
    if not dom.outline:
        return np.clip(0.5 - d / dom.edge, 0.0, 1.0)
    width = max(1.6, 0.3 * obj["radius"])
    ring = np.clip(width / 2 + 0.5 - np.abs(d), 0.0, 1.0)
    return np.maximum(ring, 0.25 * np.clip(0.5 - d, 0.0, 1.0))


def _bbox(obj: dict, T: int, S: int) -> tuple[int, int, int, int]:
    """Pixel box (y0, y1, x0, x1) holding the object and its trail over the whole clip."""
    reach = 1.05 * obj["radius"] + 3.0  # every shape fits in 1.05 r (cross/square corners); + AA and outline
    xs = [obj["start"][0] + obj["velocity"][0] * t for t in (-MAX_LAG, T - 1)]
    ys = [obj["start"][1] + obj["velocity"][1] * t for t in (-MAX_LAG, T - 1)]
    clamp = lambda v: int(min(max(v, 0), S))  # noqa: E731
    return (clamp(np.floor(min(ys) - reach)), clamp(np.ceil(max(ys) + reach)),
            clamp(np.floor(min(xs) - reach)), clamp(np.ceil(max(xs) + reach)))


def render_clip(clip: dict, config: SyntheticConfig) -> np.ndarray:
    """The frames of one clip described by `sample_clips`, uint8 [num_frames, size, size, 3] RGB."""
    dom = DOMAINS[config.domain]
    S, T = config.size, config.num_frames
    yy, xx = (np.mgrid[0:S, 0:S].astype(np.float32) + 0.5)
    frames = np.repeat(_background(clip["background"], dom, xx, yy, S)[None], T, axis=0)
    ts = np.arange(-MAX_LAG, T, dtype=np.float32)
    for obj in clip["objects"]:
        y0, y1, x0, x1 = _bbox(obj, T, S)
        if y0 >= y1 or x0 >= x1:
            continue
        cov = _coverage(obj, ts, dom, xx[y0:y1, x0:x1], yy[y0:y1, x0:x1])
        # the trail copies and the object share one colour, so compositing them in turn (oldest first) equals one
        # composite with opacity 1 - prod(1 - a_k)
        keep = 1.0 - cov[MAX_LAG:]
        for lag, alpha in TRAIL:
            keep *= 1.0 - np.float32(alpha) * cov[MAX_LAG - lag:MAX_LAG - lag + T]
        region = frames[:, y0:y1, x0:x1]
        region += (np.asarray(obj["rgb"], np.float32) - region) * (1.0 - keep)[..., None]
    if dom.grain:
        frames += np.random.default_rng(clip["noise_seed"]).normal(0.0, dom.grain, (S, S, 1)).astype(np.float32)
    if dom.vignette:
        r2 = ((xx - S / 2) ** 2 + (yy - S / 2) ** 2) / (S * S / 2)
        frames *= (1.0 - dom.vignette * r2)[..., None]
    return np.clip(np.rint(frames), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------------------------
# Generation and caching


def _render_share(out_dir: Path, config: SyntheticConfig, clips: Sequence[dict], worker: int, workers: int) -> None:
    for clip in clips[worker::workers]:
        write_mp4(out_dir / "videos" / f"{clip['video_id']}.mp4", render_clip(clip, config), fps=config.fps)


# run in a fresh interpreter (not `-m`: the package __init__ already imports this module)
_WORKER_CODE = "import sys; from workloads.datasets.synthetic import _main; sys.exit(_main(sys.argv[1:]))"


def _default_workers(n_clips: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return 1 if n_clips < 400 else max(1, min(4, cpus))


def generate(out_dir: str | os.PathLike, config: SyntheticConfig, workers: int | None = None) -> dict:
    """Render every clip of `config` into `out_dir` (videos/ + annotation files) and write manifest.json last,
    atomically. Returns the manifest. `workers` > 1 renders in that many processes (fresh interpreters running
    this module, so no fork of the caller); the output does not depend on it."""
    out = Path(out_dir)
    (out / "videos").mkdir(parents=True, exist_ok=True)
    clips = sample_clips(config)
    workers = _default_workers(len(clips)) if workers is None else max(1, int(workers))
    if not sys.executable:  # embedded interpreter: no way to start workers
        workers = 1
    procs = []
    if workers > 1:
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([pkg_root, *filter(None, [env.get("PYTHONPATH")])])
        env.setdefault("OMP_NUM_THREADS", "1")
        for w in range(1, workers):
            cmd = [sys.executable, "-c", _WORKER_CODE, "render-share", str(out), json.dumps(asdict(config)), str(w),
                   str(workers)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    try:
        _render_share(out, config, clips, 0, workers)
    finally:
        errors = []
        for p in procs:
            _, err = p.communicate()
            if p.returncode:
                errors.append(err.decode(errors="replace")[-2000:])
    if errors:
        raise RuntimeError(f"synthetic dataset: a render worker failed:\n{errors[0]}")
    _write_annotations(out, config, clips)
    return _write_manifest(out, config, clips)


def _write_annotations(out: Path, config: SyntheticConfig, clips: list[dict]) -> None:
    test = [c for c in clips if c["split"] == "test"]
    train = [c for c in clips if c["split"] == "train"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["key", "vid_key", "video_id", "sentence"])
    for i, c in enumerate(test):
        w.writerow([f"ret{i}", c["video_id"], c["video_id"], c["captions"][0]])
    atomic_write_text(out / TEST_CSV, buf.getvalue())
    atomic_write_text(out / TRAIN_CSV, "video_id\n" + "".join(f"{c['video_id']}\n" for c in train))
    sentences = [{"caption": cap, "video_id": c["video_id"], "sen_id": 0} for c in train for cap in c["captions"]]
    for i, s in enumerate(sentences):
        s["sen_id"] = i
    videos = [{"video_id": c["video_id"], "split": "train", "id": i} for i, c in enumerate(train)]
    atomic_write_text(out / DATA_JSON, json.dumps({"sentences": sentences, "videos": videos}) + "\n")
    atomic_write_text(out / ATTRIBUTES, "".join(json.dumps(c, sort_keys=True) + "\n" for c in clips))
    atomic_write_text(out / "README.txt", (
        f"Synthetic video-text dataset (MLVP embedded default), domain {config.domain.upper()}.\n"
        f"Generated by workloads.datasets.synthetic (generator version {GENERATOR_VERSION}); its module docstring "
        f"describes the content.\nConfig: {json.dumps(asdict(config), sort_keys=True)}\n"
        f"Test: {len(test)} videos, one caption each ({TEST_CSV}). Train: {len(train)} videos ({TRAIN_CSV}), "
        f"{len(sentences)} captions ({DATA_JSON}). Per-video attributes: {ATTRIBUTES}.\n"
        f"Read it with create_dataset('msrvtt', root=<this directory>).\n"))


def _write_manifest(out: Path, config: SyntheticConfig, clips: list[dict]) -> dict:
    files = sorted([f"videos/{c['video_id']}.mp4" for c in clips]
                   + [TEST_CSV, TRAIN_CSV, DATA_JSON, ATTRIBUTES, "README.txt"])
    manifest = {
        "generator": "workloads.datasets.synthetic", "generator_version": GENERATOR_VERSION,
        "config": asdict(config), "digest": config_digest(config),
        "counts": {"test": sum(c["split"] == "test" for c in clips),
                   "train_videos": sum(c["split"] == "train" for c in clips),
                   "train_pairs": sum(len(c["captions"]) for c in clips if c["split"] == "train")},
        "files": {f: (out / f).stat().st_size for f in files},
    }
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def is_complete(data_dir: str | os.PathLike, config: SyntheticConfig) -> bool:
    """True when `data_dir` holds a finished generation of exactly `config`: its manifest matches the config and
    generator version and every listed file exists with its recorded size."""
    d = Path(data_dir)
    try:
        manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("generator_version") != GENERATOR_VERSION or manifest.get("config") != asdict(config):
            return False
        return all((d / f).stat().st_size == size for f, size in manifest["files"].items())
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return False


@contextlib.contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - non-POSIX: no cross-process lock
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def dataset_dir(config: SyntheticConfig, root: str | os.PathLike | None = None, name: str | None = None) -> Path:
    """Where `ensure_generated` puts (or finds) a config's files."""
    root = Path(os.path.abspath(os.path.expanduser(os.fspath(root)))) if root is not None else default_root()
    name = name or ("synthetic" if config.domain == "a" else f"synthetic_{config.domain}")
    return root / f"{name}-{config_digest(config)}"


def ensure_generated(config: SyntheticConfig, root: str | os.PathLike | None = None, name: str | None = None,
                     workers: int | None = None) -> Path:
    """The directory holding `config`'s files, generating it first unless a complete one is there."""
    final = dataset_dir(config, root, name)
    if is_complete(final, config):
        return final
    with _file_lock(final.with_name(f".{final.name}.lock")):
        if is_complete(final, config):  # another process finished it while we waited
            return final
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        try:
            generate(tmp, config, workers=workers)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


# ---------------------------------------------------------------------------------------------------------------
# Registered datasets


class SyntheticDataset(MSRVTTDataset):
    """The synthetic dataset of one domain, read through the MSRVTT loader. Options are SyntheticConfig's fields
    (except domain) plus `workers` (processes used when generating; does not change the output)."""

    domain: ClassVar[str] = "a"
    option_defaults = {**{f.name: f.default for f in fields(SyntheticConfig) if f.name != "domain"}, "workers": None}
    provide = "the synthetic dataset is generated automatically; this should not happen (file a bug)"

    def __init__(self, root: str | os.PathLike | None = None, **options):
        super().__init__(root=root, **options)
        cfg = {k: v for k, v in options.items() if k != "workers"}
        self.config = SyntheticConfig(domain=self.domain, **cfg)
        self._data_dir: Path | None = None

    def option(self, key: str) -> Any:
        if key in self.option_defaults:
            return self.options.get(key, self.option_defaults[key])
        return MSRVTTDataset.option_defaults[key]  # file names: MSRVTT's defaults

    @property
    def location(self) -> Path:
        """Where the files are (or will be); does not generate."""
        return dataset_dir(self.config, self.root, self.name)

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            self._data_dir = ensure_generated(self.config, self.root, self.name, workers=self.option("workers"))
        return self._data_dir

    def version(self) -> str:
        """Content key of the data, from the generator config and version alone (nothing is generated)."""
        return self.location.name

    def describe(self) -> dict:
        return {"name": self.name, "root": str(self.location.parent), "data_dir": str(self.location),
                "generator_version": GENERATOR_VERSION, "digest": config_digest(self.config),
                "config": asdict(self.config)}

    def _make_split(self, name: str, pairs: Sequence[VideoTextPair]) -> Split:
        fp = digest([self.name, name, config_digest(self.config), [(p.video_id, p.caption) for p in pairs]])
        return Split(dataset=self.name, name=name, pairs=tuple(pairs), fingerprint=fp)

    def attributes(self, split: str | None = None) -> list[dict]:
        """Per-video records from attributes.jsonl (test first, then train), optionally of one split."""
        path = self.data_dir / ATTRIBUTES
        rows = [obj for _, obj in read_jsonl(path, required=("video_id", "split"))]
        return [r for r in rows if split is None or r["split"] == split]


@register_dataset("synthetic")
class SyntheticA(SyntheticDataset):
    domain = "a"


@register_dataset("synthetic_b")
class SyntheticB(SyntheticDataset):
    domain = "b"


@register_dataset("synthetic_c")
class SyntheticC(SyntheticDataset):
    """The zero-shot pretraining domain of the embedded default (models.zero_shot_pretrain): its single frames and
    captions train the tiny "pretrained CLIP" that zero-shot query-gallery shift adapts."""
    domain = "c"


def _main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "render-share":
        out, cfg_json, worker, workers = argv[1:]
        config = SyntheticConfig(**json.loads(cfg_json))
        _render_share(Path(out), config, sample_clips(config), int(worker), int(workers))
        return 0
    print("usage: python -m workloads.datasets.synthetic render-share OUT CONFIG_JSON WORKER WORKERS "
          "(internal: one share of generate())", file=sys.stderr)
    return 2
