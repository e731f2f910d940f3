"""Sampling the clips of a synthetic dataset: attributes (with the test/train constraints), then per-clip geometry
and jitter. Pure and cheap; done in full by every process so workers need only the config."""
from __future__ import annotations

import numpy as np

from workloads.datasets.base import DatasetError
from workloads.datasets.synthetic.config import (BG_COLOURS, COLOURS, DIRECTIONS, DOMAINS, MOTIONS,
                                                 PATTERNS, SHAPES, SIZES, SyntheticConfig)
from workloads.seeding import stable_seed


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


def sample_clips_v1(config: SyntheticConfig) -> list[dict]:
    """The full description of every version-1 clip, test first then train, in file order. Each is a JSON-able dict
    with video_id, split, background, objects, noise_seed and captions."""
    cfg = config
    rng = np.random.default_rng(stable_seed("mlvp-synthetic", 1, cfg.domain, cfg.seed))
    dom = DOMAINS[cfg.domain]
    order = [(c, v) for c, vals in CATEGORIES for v in vals] + [("n_objects", "1"), ("n_objects", "2")]
    return draw_clips(cfg, rng, random_attrs=_random_attrs, combo_key=_combo_key, values=_values, order=order,
                      geometry=_geometry, caption=dom.caption,
                      hint=f" (two_object_prob={cfg.two_object_prob})")


def draw_clips(cfg: SyntheticConfig, rng: np.random.Generator, *, random_attrs, combo_key, values, order, geometry,
               caption, forced_value_named: bool = False, hint: str = "", test: list[dict] | None = None
               ) -> list[dict]:
    """The clips of a config, test first then train, from a generator version's own pieces (version 1 here,
    version 2 in workloads/datasets/synthetic/v2.py): `n_test` distinct test combinations; then the train clips,
    first one per (category, value) of `order` that the test captions use and no earlier train clip names (so every
    test word is seen in training), then random ones, none repeating a test combination; then each clip's geometry
    and captions. `forced_value_named`: a coverage clip must also name its forced value (`random_attrs` may not
    honour it). `test`: the test attributes drawn by the caller (version 3 draws its groups itself), distinct
    combinations."""
    dom = DOMAINS[cfg.domain]
    test_keys: set = {combo_key(a) for a in test or ()}
    test = list(test or ())
    attempts = 0
    while len(test) < cfg.n_test:
        attempts += 1
        if attempts > 200 * cfg.n_test + 1000:
            raise DatasetError(f"synthetic dataset: cannot draw {cfg.n_test} distinct test combinations{hint}; "
                               f"lower n_test")
        attrs = random_attrs(rng, cfg)
        key = combo_key(attrs)
        if key not in test_keys:
            test_keys.add(key)
            test.append(attrs)

    def draw(force=None) -> dict:
        for _ in range(10_000):
            attrs = random_attrs(rng, cfg, force)
            if combo_key(attrs) not in test_keys and (
                    not forced_value_named or force is None or force in values(attrs)):
                return attrs
        raise DatasetError("synthetic dataset: cannot draw a train clip outside the test combinations")

    needed = set().union(*(values(a) for a in test))
    train: list[dict] = []
    covered: set = set()
    for value in order:
        if value in needed and value not in covered:
            train.append(draw(value))
            covered |= values(train[-1])
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
                    **geometry(rng, cfg, attrs)}
            clip["captions"] = [caption(clip, v) for v in range(n_caps)]
            clips.append(clip)
    _check_vocabulary(clips)
    return clips


def _check_vocabulary(clips: list[dict]) -> None:
    words = lambda c: c.replace(",", " ").split()  # noqa: E731
    train_words = {w for c in clips if c["split"] == "train" for cap in c["captions"] for w in words(cap)}
    unseen = {w for c in clips if c["split"] == "test" for w in words(c["captions"][0])} - train_words
    if unseen:  # pragma: no cover - guaranteed by the coverage clips
        raise DatasetError(f"synthetic dataset: test words never seen in training: {sorted(unseen)}")
