"""What a grid costs: the project's only cost model. `plan` and `submit --dry-run` sum it into their estimate
(`estimate`, printed by orchestrator/planning/describe.py), `submit` orders the render sets by it
(orchestrator/planning/render_sets.py `cost_ordered_sets`), and benchmarks/cluster_sim.py sleeps every render set and
trial for the seconds it gives here (scaled down), so the simulated cluster's totals equal `plan`'s estimate for the
same grid to the second (tests/test_cost_model.py checks it on grids/full_mlvp.yaml and on a small
generated grid).

The units are the plan's own (orchestrator/planning/plan.py):
- a **render set** is one (dataset, perturbation, severity): every test clip of the dataset rendered once on a CPU.
  One rendering is priced by its perturbation type's own line, fixed + per-pixel-frame x width x height x frames of
  its *source* clip (the decode, and H.264's full-length encode, grow with the source; the 12 frames written do not),
  through that type's two measured clips (`RENDER_POINTS`: CPU seconds of one rendering alone on one core, decode
  included, the mean over severities, as the render stage renders one key: benchmarks/render_bench.py (c)). A clean
  set has its own measured line (the uniform sample decoded, nothing perturbed). A type with no measured points (one
  registered since) is priced at the mean of the measured types' lines, and `describe()` (`plan --verbose`) says so;
  the types are the perturbation registry's (workloads/perturbations/video). The render stage renders a video's
  severities of one type from one decode, so for the types whose cost is mostly decode a set costs less than priced;
- a **trial** streams its dataset's queries in batches of `runtime.batch_size` through adaptation and scoring on its
  GPU slot (`runtime.gpus_per_trial` of a GPU, so `trials_per_gpu` = 1 / gpus_per_trial share one GPU). Packed trials
  share the GPU's throughput, they do not multiply it: K trials on one GPU each take K / `packed_throughput` times as
  long as one alone (docs/notes/2026-11-results-history.md §6). A batch costs the measured batch of 16 scaled by its
  queries. Every method is priced as Tent (SAR's second step and Source's lack of one are not told apart), every
  backbone as ViT-B/32 at 12 frames of 224 px (what was measured);
- a **gallery encoding** is one unadapted pass over the gallery, once per (model, dataset, direction), cached
  (workloads/trial.py `encode_gallery`);
- a **checkpoint** is fine-tuned once unless given: `models.finetune.steps` steps (quick recipe), or a published
  recipe's epochs over the train split's pairs (FinetuneConfig.step_count); a step's cost is linear in the images it
  puts through the model (FinetuneConfig.images_per_step), from a measured step of 64 clips x 4 frames.

GPU-hours count GPU time, not slot time: a trial on a quarter of a GPU for an hour is 0.25 GPU-hours.

Every figure is data (a field of `CostModel`: a plain number, or for rendering a (type, RenderLine) pair per measured
type and clean) with where it was measured in its `source`; `describe()` lists them, one line per registered type for
rendering, and `mlvp plan --verbose` prints that list. Another cluster's figures go in as CostModel(field=value)
(`python -m benchmarks.cluster_sim --cost field=value,...` for the numbers; `render_lines=uniform_render_lines(...)`
prices every type alike); a grid has no key for them yet.

A dataset's source clip size comes from its videos where they are on disk (the mean over up to `SAMPLE_VIDEOS` test
videos, read from the container headers only), from its generator config for a generated dataset, and otherwise from
`TYPICAL_CLIPS` (lengths from each dataset's published totals, resolution and frame rate assumed); `plan` says which
it used. Every figure is an estimate from the machines named in its source (an NVIDIA H200; a 2-core AMD EPYC dev
machine for rendering), not a measurement of the user's cluster.
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING

from workloads.perturbations.video import VIDEO_PERTURBATIONS
from workloads.spec import CLEAN

if TYPE_CHECKING:
    from orchestrator.planning.keys import RenderSet
    from orchestrator.planning.plan import DatasetPlan, ModelPlan, Plan
    from workloads.spec import TrialSpec

# The two measured clips each type's render line passes through: {type or clean: ((source width x height x frames,
# CPU s of one rendering), (the same at the second clip))}, copied from the "Cost model rows" that
# `python -m benchmarks.render_bench` prints (part (c), "ours alone": each (type, severity) rendered alone from the
# file as the render stage renders one key, decode included, one core, the mean over severities 1-5 of the median
# of repeats; style transfer without AdaIN weights, i.e. its proxy, what a render actor runs without them).
# Caveats, so that the figures are read as estimates: the machine ran another job (load average 11-13 on its 2 cores),
# which inflates CPU time too (the frame-level types took ~1.15-1.2x their figures of benchmarks/RESULTS.md's earlier
# run on the same kind of machine). The decode-bound types' cost follows the source's bitrate: the measured clips are
# crf 18 with grain (~1 Mbit/s); on a 10 s stand-in of benchmarks/dress_rehearsal.py (crf 23, ~0.23 Mbit/s) gaussian
# noise alone took 0.04 s against 0.10 s on the measured 10 s clip, H.264 alone 1.10-1.14 s against 1.21-1.25 s (the
# two clips run in turn, 2026-11-28). A row renders a video's severities of one type from one decode (render_video),
# so a decode-bound type costs less per rendering there than alone (the dress rehearsal, d6003f8, measured gaussian
# noise at 0.065 s a 20 s MSRVTT-size clip, against 0.21 here); but it measured H.264 at 3.97 s a rendering in its Ray
# tasks, against 2.35 here and ~2.2 s alone on its own stand-ins: not explained yet. A 180 s 720p clip is 216x the
# larger point (H.264's line predicts 247 s a rendering there, benchmarks/RESULTS.md "Rendering" measured 212 s:
# docs/notes/2026-11-27-long-video-memory.md).
RENDER_SOURCE = ("`python -m benchmarks.render_bench --repeats 3 --authors-repeats 2` (benchmarks/render_results.md "
                 "(c)), commit 34364ba, a 2-core AMD EPYC dev machine (AVX-512) shared with another job, one core, "
                 "2026-11-28; at 64 frames 224x224 and 300 frames 240x320 (10 s at 30 fps)")
RENDER_POINTS: dict[str, tuple[tuple[int, float], tuple[int, float]]] = {
    "gaussian_noise": ((3211264, 0.0226), (23040000, 0.1099)),
    "impulse_noise": ((3211264, 0.0219), (23040000, 0.1086)),
    "fog": ((3211264, 0.0240), (23040000, 0.1063)),
    "snow": ((3211264, 0.0322), (23040000, 0.1185)),
    "elastic_distortion": ((3211264, 0.0501), (23040000, 0.1498)),
    "h264_compression": ((3211264, 0.1994), (23040000, 1.1837)),
    "motion_blur": ((3211264, 0.1906), (23040000, 0.3107)),
    "video_defocus": ((3211264, 0.2306), (23040000, 0.4117)),
    "main_object_occlusion": ((3211264, 0.0827), (23040000, 0.1440)),
    "style_transfer": ((3211264, 0.2390), (23040000, 0.4882)),
    "event_insertion": ((3211264, 0.0235), (23040000, 0.1066)),
    "temporal_scrambling": ((3211264, 0.0155), (23040000, 0.0648)),
    "clean": ((3211264, 0.0224), (23040000, 0.0996)),
}


@dataclass(frozen=True)
class RenderLine:
    """CPU seconds of one rendering on one core: `fixed` + `per_pixel_frame` x source width x height x frames."""

    fixed: float
    per_pixel_frame: float

    @classmethod
    def through(cls, points: tuple[tuple[float, float], tuple[float, float]]) -> RenderLine:
        (x0, y0), (x1, y1) = points
        slope = (y1 - y0) / (x1 - x0)
        return cls(y0 - slope * x0, slope)

    def seconds(self, pixel_frames: float) -> float:
        return self.fixed + self.per_pixel_frame * pixel_frames


def measured_render_lines(points: dict[str, tuple] = RENDER_POINTS) -> tuple[tuple[str, RenderLine], ...]:
    """Each measured type's (and clean's) line through its two points, as CostModel holds them."""
    return tuple((name, RenderLine.through(p)) for name, p in points.items())


def uniform_render_lines(fixed: float, per_pixel_frame: float = 0.0) -> tuple[tuple[str, RenderLine], ...]:
    """One line for every registered type and clean (another cluster's single figure, or a test's)."""
    return tuple((name, RenderLine(fixed, per_pixel_frame)) for name in (*VIDEO_PERTURBATIONS.names(), CLEAN))


# The fine-tuning step that was measured: FinetuneConfig's default batch (workloads/backbones/finetune_config.py).
MEASURED_STEP_CLIPS, MEASURED_STEP_FRAMES = 64, 4
_H200_RUN = "NVIDIA H200, 2026-11-27, benchmarks/gpu_trial.py (benchmarks/RESULTS.md \"On a GPU\")"


def _figure(value, source: str):
    """A CostModel field: its default and where it was measured (`CostModel.describe`)."""
    return field(default=value, metadata={"source": source})


@dataclass(frozen=True)
class CostModel:
    """Per-unit costs in seconds, each with its source (`describe`). `trials_per_gpu` None: from the grid's
    runtime.gpus_per_trial."""

    render_lines: tuple[tuple[str, RenderLine], ...] = _figure(
        measured_render_lines(), "CPU s of one rendering (one type at one severity) on one core, per type and for "
        "clean: fixed + per source width x height x frame, the line through that type's two measured clips (this "
        "module's RENDER_POINTS: " + RENDER_SOURCE + "); a type without its own line: the mean of the measured types' "
        "lines")
    ocr_s_per_frame: float = _figure(
        0.063, "CPU s for an OCR engine to read one frame of a clip (the render stage, per engine a grid's OCR "
        "backbones read): rapidocr on a clean 128 px scene-text frame, one thread, a loaded 2-core AMD EPYC "
        "(docs/notes/2026-11-27-ocr-engines.md; an upper figure: 11-58 ms on perturbed frames, tesseract 250-1800)")
    text_s_per_caption: float = _figure(
        0.002, "CPU s to perturb one caption of a text set: character and word level (history §8 measured less; "
        "sentence-level types with their models cost more); an upper figure, not a measurement")
    trial_s_per_batch: float = _figure(
        0.288, "GPU s per query batch of 16 (adapt + score), fp32, one trial alone on the GPU: 16 x 18.0 ms "
        "(17.9-18.1 ms per query on " + _H200_RUN + "; 17.7-18.1 on 2026-11-26, benchmarks/gpu_trial_results.md "
        "run 1), ViT-B/32, 12 frames at 224 px, Tent and HAT-VTR, both backbones")
    trial_s_per_batch_bf16: float = _figure(
        0.0912, "the same in bf16 autocast (runtime.precision: bf16): 16 x 5.7 ms (5.1-6.3 ms per query on "
        + _H200_RUN + "; 4.1-5.8 on 2026-11-26, benchmarks/gpu_trial_results.md runs 1 and 2)")
    trial_batch_measured: int = _figure(
        16, "queries per measured batch (benchmarks/gpu_trial.py's batch, runtime.batch_size's default): a batch of "
        "runtime.batch_size queries costs that over this, times the measured batch")
    packed_throughput: float = _figure(
        0.92, "throughput of K >= 2 trials sharing one GPU over one trial alone: 0.91-0.93 at K = 2, 4, 8, NVIDIA "
        "H200, 2026-11-26 (history §6)")
    gallery_s_per_clip: float = _figure(
        0.003, "GPU s to encode one gallery item (once per model, dataset, direction): Source's 2.59 ms per 12-frame "
        "query, NVIDIA H200, 2026-11-26 (history §6); a caption costs less")
    finetune_s_per_step: float = _figure(
        0.198, "GPU s per fine-tuning step in fp32: ViT-B/32 `train_step` of 64 clips x 4 frames alone on the GPU, "
        + _H200_RUN + " table 3; peak 10.4 GiB")
    finetune_s_per_step_bf16: float = _figure(0.088, "the same in bf16 autocast; peak 7.1 GiB")
    finetune_images_per_step: int = _figure(
        MEASURED_STEP_CLIPS * MEASURED_STEP_FRAMES, "images per measured step (64 clips x 4 frames): a checkpoint's "
        "step costs its batch_size x frames_per_clip over this, times the measured step (linear in images)")
    trials_per_gpu: float | None = _figure(None, "trial slots per GPU (None: 1 / runtime.gpus_per_trial)")

    def slots_per_gpu(self, gpus_per_trial: float) -> float:
        if self.trials_per_gpu is not None:
            return self.trials_per_gpu
        return 1.0 / gpus_per_trial if gpus_per_trial > 0 else 1.0

    def render_line(self, perturbation: str) -> tuple[RenderLine, bool]:
        """(the line that prices one rendering of `perturbation` (a registered type or clean), whether it was
        measured): a type without its own line gets the mean of the perturbed types' lines."""
        lines = dict(self.render_lines)
        if perturbation in lines:
            return lines[perturbation], True
        return self.mean_render_line(), False

    def mean_render_line(self) -> RenderLine:
        """The mean of the perturbed types' lines (clean, which perturbs nothing, left out)."""
        measured = [line for name, line in self.render_lines if name != CLEAN]
        if not measured:
            raise ValueError("CostModel.render_lines holds no perturbation type's line to price a new type by")
        return RenderLine(statistics.fmean(m.fixed for m in measured),
                          statistics.fmean(m.per_pixel_frame for m in measured))

    def rendering_seconds(self, pixel_frames: float, perturbation: str) -> float:
        """CPU seconds of one rendering of `perturbation` (one type at one severity, or clean) of a source clip of
        `pixel_frames` = width x height x frames."""
        return self.render_line(perturbation)[0].seconds(pixel_frames)

    def trial_gpu_seconds(self, queries: int, batch_size: int, precision: str = "fp32", slots: float = 1.0) -> float:
        """GPU seconds of one trial of `queries` queries (its gallery is encoded separately) with `slots` trials per
        GPU: the same work whether or not it shares the GPU, plus what sharing loses."""
        per_batch = self.trial_s_per_batch_bf16 if precision == "bf16" else self.trial_s_per_batch
        per_batch *= max(batch_size, 1) / self.trial_batch_measured   # linear in the queries a batch adapts on
        shared = self.packed_throughput if slots > 1 else 1.0
        return math.ceil(queries / max(batch_size, 1)) * per_batch / shared

    def trial_seconds(self, queries: int, batch_size: int, precision: str = "fp32", slots: float = 1.0) -> float:
        """Seconds one trial holds its GPU slot: its GPU seconds times the trials it shares the GPU with."""
        return self.trial_gpu_seconds(queries, batch_size, precision, slots) * max(slots, 1.0)

    def finetune_step_seconds(self, batch_size: int, frames_per_clip: int, precision: str) -> float:
        """GPU seconds of one fine-tuning step of `batch_size` clips x `frames_per_clip` frames: the measured step
        scaled by images per step. "auto" (workloads/backbones/finetune_config.py: bf16 where the device computes it
        natively) is counted as bf16: fine-tuning runs on a GPU, and the GPUs this estimate is for have it."""
        per_step = self.finetune_s_per_step if precision == "fp32" else self.finetune_s_per_step_bf16
        return per_step * batch_size * frames_per_clip / self.finetune_images_per_step

    def describe(self) -> list[str]:
        """One line per figure: its name, value and where it was measured; the render lines one per registered
        type and clean, each said to be measured or the mean of the measured ones."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "render_lines":
                out.append(f"{f.name}: {f.metadata['source']}")
                measured = sum(1 for name, _ in value if name != CLEAN)
                for name in (*VIDEO_PERTURBATIONS.names(), CLEAN):
                    line, known = self.render_line(name)
                    out.append(f"  render {name} = {line.fixed:.4g} + {line.per_pixel_frame:.4g} x pixel-frames: "
                               + ("measured" if known else f"no measured points: the mean of the {measured} "
                                  "measured types' lines"))
                continue
            shown = "None" if value is None else f"{value:.4g}"
            out.append(f"{f.name} = {shown}: {f.metadata['source']}")
        return out


@dataclass(frozen=True)
class ClipSize:
    """A dataset's source clips as the render cost sees them: mean width, height, frame rate and length, and the mean
    of width x height x frames (the mean of the products where measured, not the product of the means), with where
    it comes from."""

    width: float
    height: float
    fps: float
    seconds: float
    pixel_frames: float
    source: str

    @classmethod
    def of(cls, width: float, height: float, fps: float, seconds: float, source: str) -> ClipSize:
        return cls(width, height, fps, seconds, width * height * fps * seconds, source)

    def line(self) -> str:
        return f"{self.width:.0f}x{self.height:.0f}, {self.seconds:.1f} s at {self.fps:.0f} fps ({self.source})"


# Typical source clips of the real datasets, for when their videos are not on disk (docs/cluster.md, "What plan's
# estimate assumes"). The lengths come from each dataset's published totals (or, for MSVD, its test ids); the
# resolutions and frame rates are assumptions (the files vary), and every source says so.
TYPICAL_CLIPS = {
    "msrvtt": ClipSize.of(320, 240, 30, 14.8, "typical: 41.2 h in 10,000 clips (the MSR-VTT paper) = 14.8 s; "
                          "320x240 at 30 fps assumed"),
    "msvd": ClipSize.of(320, 240, 30, 10.1, "typical: the mean of end - start over the 670 test ids of MSVD's "
                        "test_list.txt (<youtube id>_<start>_<end>, seconds) = 10.1 s; 320x240 at 30 fps assumed"),
    "lsmdc": ClipSize.of(1920, 1080, 24, 4.2, "typical: ~150 h in 128,118 clips (the LSMDC paper) = 4.2 s; "
                         "1920x1080 at 24 fps assumed (films differ)"),
    "activitynet": ClipSize.of(640, 360, 30, 152.8, "typical: 849 h in 20,000 videos (the ActivityNet Captions "
                               "paper; a test item is a whole video) = 152.8 s; 640x360 at 30 fps assumed"),
    "didemo": ClipSize.of(640, 360, 30, 27.5, "typical: 25-30 s videos (the DiDeMo paper), 27.5 s taken; 640x360 "
                          "at 30 fps assumed"),
}
SAMPLE_VIDEOS = 16   # test videos whose headers `plan` reads per dataset: enough for a mean, quick to open


def _other_dataset(name: str) -> ClipSize:
    m = TYPICAL_CLIPS["msrvtt"]
    return ClipSize.of(m.width, m.height, m.fps, m.seconds, f"typical, assumed: no size known for {name}, MSR-VTT's")


def sample_paths(paths: list[str], k: int = SAMPLE_VIDEOS) -> list[str]:
    """Up to `k` of `paths` (distinct, in order), evenly spaced: the same sample on every run."""
    unique = list(dict.fromkeys(paths))
    if len(unique) <= k:
        return unique
    return [unique[i * len(unique) // k] for i in range(k)]


def measure_clips(paths: list[str]) -> ClipSize | None:
    """The mean size of the video files among `paths` that exist, from their container headers (nothing decoded);
    None when none can be read."""
    existing = [p for p in paths if os.path.isfile(p)]
    if not existing:
        return None
    # imported here, not at the top: planning stays light, and only a dataset whose videos are on disk needs PyAV
    import av

    sizes = []   # (width, height, frames per second, seconds, frames) of each readable file
    for path in existing:
        try:
            with av.open(path) as container:
                stream = container.streams.video[0]
                rate = float(stream.average_rate or stream.guessed_rate or 0)
                seconds = (float(stream.duration * stream.time_base) if stream.duration is not None
                           else (container.duration or 0) / 1e6)
                frames = stream.frames or seconds * rate
                width, height = stream.codec_context.width, stream.codec_context.height
        except (av.error.FFmpegError, IndexError, OSError, ValueError):   # a damaged file: its render fails later
            continue
        if frames and width and height and (rate or seconds):
            rate = rate or frames / seconds
            sizes.append((width, height, rate, seconds or frames / rate, frames))
    if not sizes:
        return None
    n = len(sizes)
    width, height, rate, seconds = (sum(s[i] for s in sizes) / n for i in range(4))
    return ClipSize(width, height, rate, seconds, sum(w * h * f for w, h, _, _, f in sizes) / n,
                    f"measured on {n} of your videos")


def clip_size(name: str, dataset: DatasetPlan) -> ClipSize:
    """The source clip size of a dataset's test videos: measured on a sample of them where they are on disk, from its
    generator config for a generated dataset, else typical (TYPICAL_CLIPS)."""
    if not dataset.unavailable:
        config = getattr(dataset.dataset, "config", None)
        if config is not None and hasattr(config, "num_frames"):   # generated (workloads/datasets/synthetic)
            return ClipSize.of(config.size, config.size, config.fps, config.num_frames / config.fps,
                               "from its generator config")
        measured = measure_clips(sample_paths([p.video_path for p in dataset.test.pairs]))
        if measured is not None:
            return measured
    return TYPICAL_CLIPS.get(name) or _other_dataset(name)


class PlanCosts:
    """The cost of every unit of one plan under a CostModel: what `estimate` sums, what `submit` orders render sets by
    and what benchmarks/cluster_sim.py sleeps. None where a dataset's clip count is unknown (no annotations)."""

    def __init__(self, plan: Plan, cost: CostModel | None = None, clips: dict[str, ClipSize] | None = None,
                 precision: str | None = None):
        """`precision`: price every trial and fine-tune at it ("fp32" or "bf16") instead of the grid's (`plan
        --gpus` prints both)."""
        self.plan, self.cost, self.precision = plan, cost or CostModel(), precision
        self.counts = plan.clip_counts()
        self.slots = self.cost.slots_per_gpu(plan.grid.runtime.gpus_per_trial)
        if clips is not None:
            self.clips = clips

    @cached_property
    def clips(self) -> dict[str, ClipSize]:
        """Each target dataset's source clip size (`clip_size`), read once."""
        return {d: clip_size(d, self.plan.datasets[d]) for d in self.counts}

    def rendering_seconds(self, dataset: str, perturbation: str) -> float:
        """CPU seconds of one rendering of `perturbation` (a type, or clean) of one of `dataset`'s clips."""
        return self.cost.rendering_seconds(self.clips[dataset].pixel_frames, perturbation)

    def render_set_seconds(self, render_set: RenderSet) -> float | None:
        """CPU seconds of one render set: its dataset's clips at every seed of the grid (`Plan.seeds`) x one rendering
        each, and the OCR of each of its frames per engine the grid's OCR backbones read (`Plan.ocr_engines`)."""
        n = self.counts.get(render_set.dataset)
        if n is None:
            return None
        ocr = len(self.plan.ocr_engines.get(render_set.dataset, ())) * self.plan.grid.runtime.num_frames \
            * self.cost.ocr_s_per_frame
        return n * len(self.plan.seeds) * (self.rendering_seconds(render_set.dataset, render_set.perturbation) + ocr)

    def trial_gpu_seconds(self, spec: TrialSpec) -> float | None:
        n = self.counts.get(spec.dataset)
        return None if n is None else self.cost.trial_gpu_seconds(n, spec.batch_size, self.precision or spec.precision,
                                                                  self.slots)

    def trial_slot_seconds(self, spec: TrialSpec) -> float | None:
        """Seconds the trial holds its GPU slot (what it takes on a cluster, and what the simulated cluster sleeps)."""
        n = self.counts.get(spec.dataset)
        return None if n is None else self.cost.trial_seconds(n, spec.batch_size, self.precision or spec.precision,
                                                              self.slots)

    def gallery_gpu_seconds(self, encoding: tuple) -> float | None:
        """A gallery encoding, keyed as Plan.gallery_encodings: (backbone, model version, dataset, ...)."""
        n = self.counts.get(encoding[2])
        return None if n is None else n * self.cost.gallery_s_per_clip

    def text_set_seconds(self, job) -> float:
        """A text set (orchestrator/planning/versions.py TextSetJob): every caption of its dataset perturbed once."""
        return (self.counts.get(job.key.dataset) or 0) * self.cost.text_s_per_caption

    def train_pairs(self, dataset: str) -> int | None:
        """(video, caption) pairs of a dataset's train split (what a published recipe's epochs pass over), or None
        where its annotations cannot be read."""
        plan = self.plan.datasets.get(dataset)
        return None if plan is None else train_pairs(plan)

    def checkpoint_gpu_seconds(self, model: ModelPlan) -> float | None:
        """GPU seconds of fine-tuning one checkpoint: its steps (a published recipe's: epochs over the train split's
        pairs) x the measured step scaled by images per step; None where a recipe's train split cannot be counted."""
        ft = model.finetune
        pairs = self.train_pairs(model.train_dataset) if ft.published is not None else 0
        if pairs is None:
            return None
        per_image = self.cost.finetune_step_seconds(1, 1, self.precision or ft.precision)
        return ft.step_count(pairs) * ft.images_per_step() * per_image

    def clip_lines(self) -> list[str]:
        """Where each dataset's clip size comes from (`plan` prints them beside the estimate)."""
        return [f"{d} {c.line()}" for d, c in self.clips.items() if self.counts.get(d) is not None]


@dataclass
class Estimate:
    """What a plan's work costs, in seconds; `unknown` lists the datasets whose clip counts are not known (their
    work is not in the figures)."""

    render_sets: int = 0
    render_clips: int = 0
    render_cpu_s: float = 0.0
    text_cpu_s: float = 0.0
    trial_gpu_s: float = 0.0
    gallery_gpu_s: float = 0.0
    finetune_gpu_s: float = 0.0
    unknown: list[str] = field(default_factory=list)

    render_cpu_h = property(lambda self: self.render_cpu_s / 3600)
    text_cpu_h = property(lambda self: self.text_cpu_s / 3600)
    trial_gpu_h = property(lambda self: self.trial_gpu_s / 3600)
    gallery_gpu_h = property(lambda self: self.gallery_gpu_s / 3600)
    finetune_gpu_h = property(lambda self: self.finetune_gpu_s / 3600)

    @property
    def gpu_h(self) -> float:
        return self.trial_gpu_h + self.gallery_gpu_h + self.finetune_gpu_h

    def line(self) -> str:
        return (f"estimated {self.gpu_h:,.1f} GPU-hours (trials {self.trial_gpu_h:,.1f}, gallery encodings "
                f"{self.gallery_gpu_h:,.1f}, fine-tuning {self.finetune_gpu_h:,.1f}) and {self.render_cpu_h:,.1f} CPU "
                f"core-hours of rendering ({self.render_clips:,} clips)"
                + (f" + {self.text_cpu_h:,.2f} of text sets" if self.text_cpu_s else ""))


def estimate(costs: PlanCosts, work) -> Estimate:   # work: orchestrator/planning/work.py Work (it imports us)
    """The cost of `work` (orchestrator/planning/work.py: every unit of the plan, or only what remains to run) under
    `costs`; datasets whose clip counts are unknown are listed, not counted."""
    out = Estimate(unknown=[d for d, n in costs.counts.items() if n is None])
    for rs in work.render_sets:
        out.render_sets += 1
        seconds = costs.render_set_seconds(rs)
        if seconds is not None:
            out.render_clips += costs.counts[rs.dataset] * len(costs.plan.seeds)
            out.render_cpu_s += seconds
    out.text_cpu_s = sum(costs.text_set_seconds(job) for job in work.text_sets)
    out.trial_gpu_s = sum(s for t in work.trials if (s := costs.trial_gpu_seconds(t)) is not None)
    out.gallery_gpu_s = sum(s for g in work.gallery_encodings if (s := costs.gallery_gpu_seconds(g)) is not None)
    finetunes = [(m, costs.checkpoint_gpu_seconds(m)) for m in work.checkpoints]
    out.finetune_gpu_s = sum(s for _, s in finetunes if s is not None)
    out.unknown += [f"fine-tuning {m.backbone}/{m.train_dataset} (no train annotations)" for m, s in finetunes
                    if s is None]
    return out


# the overlapped hand-off's makespan over its lower bound on the simulated full matrix, render sets in Johnson's order
# (benchmarks/cluster_sim.py; docs/notes/2026-11-results-history.md §11)
MEASURED_OVER_BOUND = 1.14


@dataclass(frozen=True)
class WallTime:
    """A plan's wall time on `gpus` GPUs and `cpus` CPUs, from its `Estimate`: no schedule beats `bound_s`, the largest
    of the GPU work spread over every GPU (trials, gallery encodings, fine-tunes), the rendering spread over every CPU,
    and the longest single fine-tune (a checkpoint's trials wait for it); `expected_s` is the bound times what the
    simulated cluster measured for this project's schedule (MEASURED_OVER_BOUND)."""

    gpus: int
    cpus: int
    gpu_s: float
    render_s: float
    finetune_s: float

    @property
    def bound_s(self) -> float:
        return max(self.gpu_s / self.gpus, self.render_s / self.cpus, self.finetune_s)

    @property
    def expected_s(self) -> float:
        return self.bound_s * MEASURED_OVER_BOUND

    @property
    def limit(self) -> str:
        """What sets the bound: "GPUs", "rendering" or "the longest fine-tune"."""
        parts = {"GPUs": self.gpu_s / self.gpus, "rendering": self.render_s / self.cpus,
                 "the longest fine-tune": self.finetune_s}
        return max(parts, key=parts.get)


def wall_time(costs: PlanCosts, work, gpus: int, cpus: int) -> WallTime:
    """`work`'s wall time on `gpus` GPUs and `cpus` CPUs under `costs` (its precision: the grid's, or the one it
    prices at); datasets whose clip counts are unknown count nothing, as in `estimate`."""
    if gpus < 1 or cpus < 1:
        raise ValueError(f"a cluster has at least one GPU and one CPU, got {gpus} GPUs and {cpus} CPUs")
    est = estimate(costs, work)
    longest = max((s for m in work.checkpoints if (s := costs.checkpoint_gpu_seconds(m)) is not None), default=0.0)
    return WallTime(gpus, cpus, est.gpu_h * 3600, est.render_cpu_s + est.text_cpu_s, longest)


def train_pairs(dataset: DatasetPlan) -> int | None:
    """(video, caption) pairs of a dataset's train split: a generated dataset's from its config (nothing is
    generated), a real one's from its annotations; None where they cannot be read."""
    config = getattr(dataset.dataset, "config", None)
    if config is not None and hasattr(config, "n_train"):
        return int(config.n_train) * int(getattr(config, "captions_per_train_video", 1))
    if dataset.unavailable:
        return None
    try:
        return len(dataset.dataset.train_split().pairs)
    except (OSError, ValueError, KeyError):
        return None
