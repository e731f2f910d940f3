"""Vocabulary, the three visual/caption domains and the generator config of the synthetic dataset (the package
docstring, workloads/datasets/synthetic/__init__.py, describes the content)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from workloads.datasets.base import DatasetError
from workloads.seeding import digest

# The generator versions: a config's `version` picks one. Version 1 is the 64 px / 8 fps default (`synthetic`, and
# domains B and C); version 2 the calibration attempt of issue #12 (`synthetic_v2`, not adopted); version 3 the
# scene-text domain (`synthetic_text`: version 1's scenes with a sign whose word the caption names, issue #35). The
# version is part of the config digest, hence of the cache directory name and every ledger key that names the data.
# Bump a version's number (add a new one) when anything changes what generate() writes for a given config.
GENERATOR_VERSIONS = (1, 2, 3)
GENERATOR_VERSION = 3  # the newest
TEXT_MIN_SIZE = 96     # version 3: below this the signs' words are too small to read at the source resolution
V2_ONLY_FIELDS = ("version", "train_size", "train_fps")

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
    # generator version (GENERATOR_VERSIONS); the dataclass defaults above are version 1's, the registered
    # datasets pass their own (workloads/datasets/synthetic/__init__.py)
    version: int = 1
    # version 2 only: size / frame rate of the train clips (0 = as the test clips; never above them). The test
    # clips are drawn at `size` and `fps`; train clips show the same scenes over the same duration
    train_size: int = 0
    train_fps: int = 0

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
        if self.version not in GENERATOR_VERSIONS:
            raise DatasetError(f"synthetic dataset: unknown generator version {self.version}; versions: "
                               f"{list(GENERATOR_VERSIONS)}")
        if self.version != 2 and (self.train_size or self.train_fps):
            raise DatasetError("synthetic dataset: train_size and train_fps need generator version 2")
        if self.version in (2, 3) and self.domain != "a":
            raise DatasetError(f"synthetic dataset: generator version {self.version} has domain A only")
        if self.version == 3 and self.size < TEXT_MIN_SIZE:
            raise DatasetError(f"synthetic dataset: the scene-text domain needs size >= {TEXT_MIN_SIZE} (legible "
                               f"signs at the source resolution), got {self.size}")
        if self.train_size < 0 or self.train_size % 2 or self.train_fps < 0:
            raise DatasetError("synthetic dataset: train_size must be 0 or even, train_fps >= 0")
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


def config_record(config: SyntheticConfig) -> dict:
    """The config as recorded (manifest, digest): version 1's exactly as before version 2 existed (without the
    version-2 fields, as version 3's), so version-1 digests, cache directories and manifests are unchanged. The digest
    (`config_digest`) names the generator version beside the record, so versions 1 and 3 never share one."""
    rec = asdict(config)
    if config.version != 2:
        for key in V2_ONLY_FIELDS:
            rec.pop(key)
    return rec


def config_digest(config: SyntheticConfig) -> str:
    return digest({"generator_version": config.version, "config": config_record(config)}, length=12)


def default_root() -> Path:
    return Path(os.path.expanduser(os.environ.get("MLVP_CACHE_DIR", "~/.cache/mlvp"))) / "datasets"
