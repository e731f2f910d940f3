"""The embedded default dataset: synthetic video-text pairs, generated deterministically from a seed, written as real
H.264 .mp4 files plus annotation files in MSRVTT's layout, so the MSRVTT loader and the decord decode path run on it
unchanged. Registered as
    `synthetic`     the embedded default: generator version 1 ("Version 1" below), domain A;
    `synthetic_v2`  generator version 2 (issue #12, "Version 2" below), domain A: native-size test clips with
                    ordered events, measured as a calibrated default and not adopted
                    (docs/notes/2026-11-results-history.md §5, "Calibration attempt": it ranks the perturbation types
                    further from the paper);
    `synthetic_b`   domain B, version 1; `synthetic_c` domain C, version 1 (the zero-shot pretraining style: its
                    frames and captions train the embedded default's "pretrained CLIP").
The generator version is part of the config digest, hence of the cache directory and of every key (checkpoints,
renders, ledger) that names the data's version: the two versions never mix.

Version 2 (`synthetic_v2`): realistic native size and rate, content beyond colour, ordered captions
    Test (query) clips: `size` 128 px, `fps` 24, `num_frames` 72 (3 s), perturbed at that size and rate by the render
    stage and only then resized to the model input, as real videos are (workloads/render_cache.py render_video). Train
    clips show the same kind of scene over the same 3 s, drawn at `train_size` 64 px and `train_fps` 8 (24 frames):
    fine-tuning resizes every clip to the model input (64 px) anyway, and a test clip drawn at 128 px and
    area-downsampled to 64 px differs from the same clip drawn at 64 px by 3-4 grey levels on average, the two draws'
    independent grain (docs/notes/2026-11-results-history.md §5, "Calibration attempt"). Geometry is in frame units and
    seconds, so one scene renders at any size / rate (workloads/datasets/synthetic/v2.py). A clip: a background (pattern
    x colour, as version 1) and one of four event structures:
        one     one object, one motion (left / right / up / down / still) for the whole clip;
        turn    one object that changes direction halfway (two different directions);
        pair    two objects, each with its own motion, both there from the start;
        appear  one object from the start, a second one that appears halfway (and then moves or stays still).
    Objects: shape (circle, square, triangle, cross), colour (8), size (small, large), texture (plain, striped:
    diagonal dark stripes in the object's own frame). Motion trail as version 1 (faint copies 0.25 s and 0.5 s
    earlier). Per clip, on top of version 1's jitter: lighting (gain 0.8-1.15, contrast 0.75-1.1 around the clip's
    mean, a light haze veil 0-0.1 with a gradient), a slow camera pan (the background slides at 0.02-0.05 frame
    sides per second; objects move in frame coordinates, as their captions say) and sensor grain (std 1-4 grey
    levels at 64 px, scaled with the size so a resize to 64 px leaves the same grain). Heavier haze was tried and
    measured (RESULTS section 5): it did not make fog milder and cost clean R@1. No two test clips share
    (structure, background, objects with all attributes and motions).
    Caption grammar (OBJ = "a {size} [striped ]{colour} {shape}", M = moves left / moves right / moves up /
    moves down / stays still, PLACE = "a {bg colour} {pattern} background"):
        one     "OBJ M on PLACE"
        turn    "first OBJ M1, then it M2 on PLACE"
        pair    "OBJ1 M1 and OBJ2 M2 on PLACE"
        appear  "first OBJ1 M1, then OBJ2 appears and M2 on PLACE"
    2nd train caption (paraphrase): "PLACE where ..." (one, turn, appear); pair: the two objects swapped.
    e.g. "first a large orange square moves left, then a small striped yellow circle appears and moves up on a teal
    checkered background". What each shift removes: fog / snow mainly colour and contrast (shape, motion, structure
    and pattern remain); occlusion part of the objects; temporal scrambling trims 60-95% of the clip, so one half of
    a turn or an appearance is often gone; H.264 at low bitrates the stripes and the pattern.

Version 1 (`synthetic`, `synthetic_b`, `synthetic_c`)

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
`DIR/<name>-<digest of config + generator version>/` (root=None: `$MLVP_CACHE_DIR/datasets`, default
`~/.cache/mlvp/datasets`). Generation runs in a temporary sibling directory that is renamed into place when
complete, under a file lock, so concurrent callers generate once and a crash never leaves a directory that looks
complete; a directory whose manifest is missing or disagrees with its files is regenerated. Output is byte-identical
for a seed whatever the number of worker processes (each clip is rendered from its own pre-sampled parameters).
"""
from __future__ import annotations

import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, ClassVar, Sequence

from workloads.datasets.base import DatasetError, Split, VideoTextPair, read_jsonl, register_dataset
from workloads.datasets.msrvtt import MSRVTTDataset
from workloads.datasets.synthetic.config import (  # noqa: F401  (the package's public names)
    ATTRIBUTES, BG_COLOURS, COLOURS, DATA_JSON, DOMAINS, GENERATOR_VERSION, MANIFEST, MOTIONS, PATTERNS, SHAPES, SIZES,
    TEST_CSV, TRAIN_CSV, DomainStyle, SyntheticConfig, config_digest, default_root)
from workloads.datasets.synthetic.clips import render_clip, sample_clips  # noqa: F401
from workloads.datasets.synthetic.files import dataset_dir, ensure_generated, generate, is_complete  # noqa: F401
from workloads.datasets.synthetic.scenes import _combo_key  # noqa: F401
from workloads.datasets.synthetic import v2  # noqa: F401,E402  (version 2's sampling and drawing)
from workloads.seeding import digest


class SyntheticDataset(MSRVTTDataset):
    """The synthetic dataset of one domain, read through the MSRVTT loader. Options are SyntheticConfig's fields
    (except domain) plus `workers` (processes used when generating; does not change the output)."""

    domain: ClassVar[str] = "a"
    generator_version: ClassVar[int] = 1  # generator version (not an option: one dataset name per version)
    option_defaults = {**{f.name: f.default for f in fields(SyntheticConfig)
                          if f.name not in ("domain", "version", "train_size", "train_fps")}, "workers": None}
    provide = "the synthetic dataset is generated automatically; this should not happen (file a bug)"

    def __init__(self, root: str | os.PathLike | None = None, **options):
        super().__init__(root=root, **options)
        cfg = {**self.option_defaults, **options}
        cfg.pop("workers")
        self.config = SyntheticConfig(domain=self.domain, version=self.generator_version, **cfg)
        self._data_dir: Path | None = None

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """Names and kinds as every dataset, then SyntheticConfig's own ranges (sizes, counts)."""
        super().check_options(options)
        try:
            cfg = {**cls.option_defaults, **options}
            cfg.pop("workers")
            SyntheticConfig(domain=cls.domain, version=cls.generator_version, **cfg)
        except (TypeError, ValueError) as err:
            raise DatasetError(f"dataset {cls.name!r}: {err}") from None

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

    def planned_size(self, split: str = "test") -> int:
        """The pairs of the test split (one caption per test clip), known from the config without generating it:
        planning a grid writes nothing (orchestrator/planning/plan.py)."""
        if split != "test":
            raise ValueError(f"planned_size: only the test split's size is known before generation, not {split!r}")
        return self.config.n_test

    def describe(self) -> dict:
        return {"name": self.name, "root": str(self.location.parent), "data_dir": str(self.location),
                "generator_version": self.config.version, "digest": config_digest(self.config),
                "config": asdict(self.config)}

    def _make_split(self, name: str, pairs: Sequence[VideoTextPair]) -> Split:
        fp = digest([self.name, name, config_digest(self.config), [(p.video_id, p.caption) for p in pairs]])
        return Split(dataset=self.name, name=name, pairs=tuple(pairs), fingerprint=fp)

    def attributes(self, split: str | None = None) -> list[dict]:
        """Per-video records from attributes.jsonl (test first, then train), optionally of one split."""
        path = self.data_dir / ATTRIBUTES
        rows = [obj for _, obj in read_jsonl(path, required=("video_id", "split"))]
        return [r for r in rows if split is None or r["split"] == split]


V2_DEFAULTS = {"size": 128, "num_frames": 72, "fps": 24, "train_size": 64, "train_fps": 8}


@register_dataset("synthetic")
class SyntheticA(SyntheticDataset):
    """The embedded default: generator version 1, domain A (64 px, 16 frames at 8 fps)."""
    domain = "a"


@register_dataset("synthetic_v2")
class SyntheticV2(SyntheticDataset):
    """Generator version 2 (issue #12), domain A: test clips at 128 px, 24 fps, 3 s with ordered events. Measured as
    a candidate for the default and not adopted: it ranks the 12 perturbation types further from the paper than
    version 1 (docs/notes/2026-11-results-history.md §5, "Calibration attempt")."""
    domain = "a"
    generator_version = 2
    option_defaults = {**SyntheticDataset.option_defaults, **V2_DEFAULTS}


@register_dataset("synthetic_b")
class SyntheticB(SyntheticDataset):
    domain = "b"


@register_dataset("synthetic_c")
class SyntheticC(SyntheticDataset):
    """The zero-shot pretraining domain of the embedded default (models.zero_shot_pretrain): its single frames and
    captions train the tiny "pretrained CLIP" that zero-shot query-gallery shift adapts."""
    domain = "c"
