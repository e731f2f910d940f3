"""Content of generator version 2 (the calibrated default, issue #12): sampling and drawing. The package docstring
(workloads/datasets/synthetic/__init__.py, "Version 2") describes what a clip shows and the caption grammar.

Geometry is stored in frame-relative units (positions and radii as fractions of the frame side, speeds in frame
sides per second, times in seconds), so one clip description renders at any size and frame rate: the test clips at
their native size / rate, the train clips at `train_size` / `train_fps` (the same scene, fewer pixels and frames).
"""
from __future__ import annotations

import numpy as np

from workloads.datasets.base import DatasetError
from workloads.datasets.synthetic.config import (BG_COLOURS, COLOURS, DOMAINS, PATTERNS, SHAPES, SIZES,
                                                 SyntheticConfig)
from workloads.datasets.synthetic.drawing import _background, _sdf
from workloads.datasets.synthetic.scenes import draw_clips
from workloads.seeding import stable_seed

TEXTURES = ("plain", "striped")
DIRS = ("left", "right", "up", "down")
MOTIONS2 = DIRS + ("still",)
STRUCTURES = ("one", "turn", "pair", "appear")
DIRECTIONS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0), "still": (0.0, 0.0)}
# (lag in seconds, opacity) of the motion trail, oldest first: the same lags in time as version 1's (2 and 4 frames
# at 8 fps), so direction is readable in every frame
TRAIL_S = ((0.5, 0.2), (0.25, 0.4))
MOTION_PHRASES = {"left": "moves left", "right": "moves right", "up": "moves up", "down": "moves down",
                  "still": "stays still"}
LIGHTING = (0.8, 1.15)  # per-clip gain range (scene brightness)
CONTRAST = (0.75, 1.1)  # per-clip contrast range around the clip's mean
VEIL = (0.0, 0.1)       # per-clip haze: blend towards a light grey (VEIL_GREY) by this fraction (mean over the frame;
                        # it varies linearly across the frame by +-`slope` x veil, in a random direction)
VEIL_GREY = 215.0
PAN = (0.02, 0.05)      # camera pan speed (frame sides per second; the background slides, the objects do not)
GRAIN = (1.0, 4.0)      # per-clip sensor noise std (grey levels) as seen at 64 px; drawn per pixel and frame


# ------------------------------------------------------------------------------------------------------ sampling

def _object_phrase(o: dict) -> str:
    tex = "striped " if o["texture"] == "striped" else ""
    return f"a {o['size']} {tex}{o['colour']} {o['shape']}"


def caption(clip: dict, variant: int = 0) -> str:
    """The caption of a version-2 clip (domain A phrasing); variant 1 is the train paraphrase."""
    bg = clip["background"]
    place = f"a {bg['colour']} {bg['pattern']} background"
    objs = clip["objects"]
    st = clip["structure"]
    o1 = objs[0]
    if st == "one":
        body = f"{_object_phrase(o1)} {MOTION_PHRASES[o1['motion'][0]]}"
    elif st == "turn":
        body = (f"first {_object_phrase(o1)} {MOTION_PHRASES[o1['motion'][0]]}, "
                f"then it {MOTION_PHRASES[o1['motion'][1]]}")
    elif st == "pair":
        parts = [f"{_object_phrase(o)} {MOTION_PHRASES[o['motion'][0]]}" for o in objs]
        body = " and ".join(parts[::-1] if variant == 1 else parts)
    else:  # appear: the second object enters halfway
        o2 = objs[1]
        body = (f"first {_object_phrase(o1)} {MOTION_PHRASES[o1['motion'][0]]}, "
                f"then {_object_phrase(o2)} appears and {MOTION_PHRASES[o2['motion'][0]]}")
    if variant == 1 and st != "pair":
        return f"{place} where {body}"
    return f"{body} on {place}"


def _combo_key(attrs: dict) -> tuple:
    objs = tuple((o["size"], o["texture"], o["colour"], o["shape"], tuple(o["motion"])) for o in attrs["objects"])
    if attrs["structure"] == "pair":
        objs = tuple(sorted(objs))
    return attrs["structure"], attrs["background"]["pattern"], attrs["background"]["colour"], objs


CATEGORIES = (("shape", SHAPES), ("colour", COLOURS), ("size", SIZES), ("texture", TEXTURES), ("motion", MOTIONS2),
              ("pattern", PATTERNS), ("bg", BG_COLOURS), ("structure", STRUCTURES))


def _values(attrs: dict) -> set[tuple[str, str]]:
    out = {("pattern", attrs["background"]["pattern"]), ("bg", attrs["background"]["colour"]),
           ("structure", attrs["structure"])}
    for o in attrs["objects"]:
        out |= {("shape", o["shape"]), ("colour", o["colour"]), ("size", o["size"]), ("texture", o["texture"])}
        out |= {("motion", m) for m in o["motion"]}
    return out


def _random_object(rng, taken: set, motions: list[str], force=None) -> dict:
    for _ in range(1000):
        obj = {"shape": SHAPES[rng.integers(len(SHAPES))], "colour": COLOURS[rng.integers(len(COLOURS))],
               "size": SIZES[rng.integers(len(SIZES))], "texture": TEXTURES[rng.integers(len(TEXTURES))],
               "motion": motions}
        if force is not None and force[0] in ("shape", "colour", "size", "texture"):
            obj[force[0]] = force[1]
        if (obj["colour"], obj["shape"]) not in taken:
            return obj
    raise DatasetError("synthetic dataset: cannot draw two distinct objects")  # pragma: no cover


def _random_attrs(rng, cfg: SyntheticConfig, force=None) -> dict:
    p2 = cfg.two_object_prob
    probs = np.array([(1 - p2) / 2, (1 - p2) / 2, p2 / 2, p2 / 2])
    st = STRUCTURES[rng.choice(4, p=probs / probs.sum())]
    if force is not None and force[0] == "structure":
        st = force[1]
    bg = {"pattern": PATTERNS[rng.integers(len(PATTERNS))], "colour": BG_COLOURS[rng.integers(len(BG_COLOURS))]}
    if force is not None and force[0] in ("pattern", "bg"):
        bg["pattern" if force[0] == "pattern" else "colour"] = force[1]
    forced_motion = force[1] if force is not None and force[0] == "motion" else None
    if st == "turn":
        if forced_motion == "still":
            st = "one"
        else:
            a = DIRS[rng.integers(4)] if forced_motion is None else forced_motion
            b = DIRS[rng.integers(4)]
            while b == a:
                b = DIRS[rng.integers(4)]
            motions = [a, b]
    if st != "turn":
        motions = [MOTIONS2[rng.integers(5)] if forced_motion is None else forced_motion]
    objs = [_random_object(rng, set(), motions, force)]
    if st in ("pair", "appear"):
        objs.append(_random_object(rng, {(objs[0]["colour"], objs[0]["shape"])}, [MOTIONS2[rng.integers(5)]]))
    return {"structure": st, "background": bg, "objects": objs}


def duration(cfg: SyntheticConfig) -> float:
    return cfg.num_frames / cfg.fps


def _path(obj: dict, ts: np.ndarray, half: float) -> tuple[np.ndarray, np.ndarray]:
    """Centre (x, y) in frame units at times ts (seconds since the clip start)."""
    v1, v2 = obj["velocity"]
    t1 = np.minimum(ts, half) if len(obj["motion"]) == 2 else ts
    t2 = np.maximum(ts - half, 0.0) if len(obj["motion"]) == 2 else 0.0 * ts
    if obj["appear"] > 0:  # enters at `appear`, moving from there on
        t1 = np.maximum(ts - obj["appear"], 0.0)
    return obj["start"][0] + v1[0] * t1 + v2[0] * t2, obj["start"][1] + v1[1] * t1 + v2[1] * t2


def _geometry(rng, cfg: SyntheticConfig, attrs: dict) -> dict:
    dom = DOMAINS[cfg.domain]
    D = duration(cfg)
    half = D / 2
    r3 = lambda x: round(float(x), 4)  # noqa: E731
    for _ in range(40):
        objects = []
        for i, o in enumerate(attrs["objects"]):
            radius = (0.095 if o["size"] == "small" else 0.15) * rng.uniform(0.9, 1.1)
            speed = rng.uniform(0.13, 0.18)  # frame sides per second
            appear = half if (attrs["structure"] == "appear" and i == 1) else 0.0
            legs = o["motion"] if len(o["motion"]) == 2 else [o["motion"][0]]
            lasting = [half, D - half] if len(legs) == 2 else [D - appear]
            lo, hi = radius + 0.02, 1.0 - radius - 0.02
            vel = [[DIRECTIONS[m][0] * speed, DIRECTIONS[m][1] * speed] for m in legs]
            # extents of the path relative to the start, including the trail before t = 0 (extrapolated)
            pts = [(0.0, 0.0), (-vel[0][0] * TRAIL_S[0][0], -vel[0][1] * TRAIL_S[0][0])]
            x, y = 0.0, 0.0
            for (vx, vy), dur in zip(vel, lasting):
                x, y = x + vx * dur, y + vy * dur
                pts.append((x, y))
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            room_x, room_y = (hi - lo) - (max(xs) - min(xs)), (hi - lo) - (max(ys) - min(ys))
            if room_x < 0 or room_y < 0:  # pragma: no cover - speeds above always fit
                raise DatasetError("synthetic dataset: object path does not fit the frame")
            start = [rng.uniform(lo - min(xs), lo - min(xs) + room_x), rng.uniform(lo - min(ys), lo - min(ys) + room_y)]
            rotation = 0.0 if o["shape"] == "circle" else rng.uniform(-20.0, 20.0)
            rgb = np.clip(np.array(dom.palette[o["colour"]]) + rng.integers(-12, 13, 3), 0, 255)
            v2 = vel[1] if len(vel) == 2 else [0.0, 0.0]
            objects.append({**o, "radius": r3(radius), "speed": r3(speed if legs[0] != "still" else 0.0),
                            "start": [r3(start[0]), r3(start[1])], "appear": r3(appear),
                            "velocity": [[r3(vel[0][0]), r3(vel[0][1])], [r3(v2[0]), r3(v2[1])]],
                            "rotation": r3(rotation), "stripe_period": r3(rng.uniform(0.45, 0.55) * radius),
                            "rgb": [int(c) for c in rgb]})
        if len(objects) < 2 or _min_distance(objects, D) >= 0.8 * (objects[0]["radius"] + objects[1]["radius"]):
            break
    bg_rgb = np.clip(np.array(dom.backgrounds[attrs["background"]["colour"]]) + rng.integers(-8, 9, 3), 0, 255)
    background = {**attrs["background"], "rgb": [int(c) for c in bg_rgb],
                  "period": r3(dom.period * rng.uniform(0.85, 1.15)), "phase": [r3(rng.uniform()), r3(rng.uniform())]}
    pan_angle = np.deg2rad(rng.uniform(0.0, 360.0))
    pan_speed = rng.uniform(*PAN)
    background["pan"] = [r3(pan_speed * np.cos(pan_angle)), r3(pan_speed * np.sin(pan_angle))]
    lighting = {"gain": r3(rng.uniform(*LIGHTING)), "contrast": r3(rng.uniform(*CONTRAST)),
                "veil": r3(rng.uniform(*VEIL)), "veil_slope": r3(rng.uniform(0.0, 0.8)),
                "veil_angle": r3(rng.uniform(0.0, 360.0)), "grain": r3(rng.uniform(*GRAIN))}
    return {"structure": attrs["structure"], "background": background, "objects": objects, "lighting": lighting,
            "duration": r3(D), "noise_seed": int(rng.integers(2**31 - 1))}


def _min_distance(objects: list[dict], D: float) -> float:
    ts = np.linspace(0, D, 25)
    ax, ay = _path(objects[0], ts, D / 2)
    bx, by = _path(objects[1], ts, D / 2)
    present = ts >= objects[1]["appear"]
    return float(np.min(np.hypot(ax - bx, ay - by)[present]))


def sample_clips(config: SyntheticConfig) -> list[dict]:
    """Every clip of a version-2 config, test first then train (see scenes.sample_clips for version 1)."""
    rng = np.random.default_rng(stable_seed("mlvp-synthetic", 2, config.domain, config.seed))
    return draw_clips(config, rng, random_attrs=_random_attrs, combo_key=_combo_key, values=_values,
                      order=[(c, v) for c, vals in CATEGORIES for v in vals], geometry=_geometry, caption=caption,
                      forced_value_named=True)


# ------------------------------------------------------------------------------------------------------- drawing

def clip_shape(config: SyntheticConfig, split: str) -> tuple[int, int, int]:
    """(frames, size, fps) a clip of `split` is rendered at: test clips at the native size / rate, train clips at
    train_size / train_fps (0: as the test clips; never above them)."""
    if split == "test":
        return config.num_frames, config.size, config.fps
    size = min(config.train_size or config.size, config.size)
    fps = min(config.train_fps or config.fps, config.fps)
    return max(1, round(config.num_frames * fps / config.fps)), size, fps


def _coverage(obj: dict, ts: np.ndarray, D: float, S: int, xx, yy, edge: float):
    """Opacity [len(ts), h, w] and stripe shading (or None) of the object at times ts on the pixel grid."""
    cx, cy = _path(obj, ts, D / 2)
    dx = xx[None] - (cx * S)[:, None, None].astype(np.float32)
    dy = yy[None] - (cy * S)[:, None, None].astype(np.float32)
    th = np.deg2rad(obj["rotation"])
    c, s = np.float32(np.cos(th)), np.float32(np.sin(th))
    u, w = c * dx + s * dy, -s * dx + c * dy
    r = obj["radius"] * S
    d = _sdf(obj["shape"], u, w, r)
    cov = np.clip(0.5 - d / (edge * S / 64.0), 0.0, 1.0)
    cov[ts < obj["appear"] - 1e-6] = 0.0
    shade = None
    if obj["texture"] == "striped":  # diagonal stripes in the object's own frame, dark at 45% brightness
        P = obj["stripe_period"] * S
        shade = 0.45 + 0.55 * np.clip(0.5 + 2.0 * np.sin(2 * np.pi * (u + w) / (1.414 * P)), 0.0, 1.0)
    return cov, shade


def render_clip(clip: dict, config: SyntheticConfig) -> np.ndarray:
    """The frames of one version-2 clip at its split's size and rate, uint8 [T, S, S, 3]."""
    dom = DOMAINS[config.domain]
    T, S, fps = clip_shape(config, clip["split"])
    D = clip["duration"]
    yy, xx = (np.mgrid[0:S, 0:S].astype(np.float32) + 0.5)
    bg = {**clip["background"], "period": clip["background"]["period"] * S}
    ts = (np.arange(T, dtype=np.float32) + 0.5) * (D / T)  # frame centres in time: same instants at any rate
    # the camera pans: the background pattern slides by pan x t (the pattern shifted = its phase advanced)
    vx, vy = clip["background"]["pan"]
    px, py = clip["background"]["phase"]
    P = clip["background"]["period"]
    frames = np.stack([_background({**bg, "phase": [px - vx * t / P, py - vy * t / P]}, dom, xx, yy, S) for t in ts])
    rgb = np.asarray([o["rgb"] for o in clip["objects"]], np.float32)
    for k, obj in enumerate(clip["objects"]):
        keep = np.ones((T, S, S), np.float32)
        colour = np.broadcast_to(rgb[k], (T, S, S, 3)).copy()
        for lag, alpha in TRAIL_S:  # oldest first; trail copies are flat (no stripes)
            cov, _ = _coverage(obj, ts - lag, D, S, xx, yy, dom.edge)
            cov[(ts - lag) < obj["appear"] - 1e-6] = 0.0
            keep *= 1.0 - np.float32(alpha) * cov
        cov, shade = _coverage(obj, ts, D, S, xx, yy, dom.edge)
        if shade is not None:
            colour = colour * np.where(cov > 0, shade, 1.0)[..., None]
        # composite: trail (flat colour), then the body on top
        trail_a = 1.0 - keep
        frames += (rgb[k] - frames) * trail_a[..., None]
        frames += (colour - frames) * cov[..., None]
    light = clip["lighting"]
    mean = frames.mean()  # one level per clip: no flicker
    frames = (mean + (frames - mean) * light["contrast"]) * light["gain"]
    th = np.deg2rad(light["veil_angle"])
    ramp = ((xx / S - 0.5) * np.cos(th) + (yy / S - 0.5) * np.sin(th)) * 2.0  # -1.4 .. 1.4 across the frame
    veil = np.clip(light["veil"] * (1.0 + light["veil_slope"] * ramp), 0.0, 0.9).astype(np.float32)
    frames += (VEIL_GREY - frames) * veil[None, ..., None]
    # sensor grain, defined at the model's 64 px: std x (S / 64) at S px, so an area resize to 64 px (which averages
    # (S / 64)^2 pixels) leaves the same grain whatever size the clip is drawn at
    rng = np.random.default_rng([clip["noise_seed"], S])
    frames += rng.normal(0.0, light["grain"] * S / 64.0, frames.shape).astype(np.float32)
    return np.clip(np.rint(frames), 0, 255).astype(np.uint8)
