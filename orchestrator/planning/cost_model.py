"""What a grid costs: the project's only cost model. `plan` and `submit --dry-run` sum it into their estimate
(`estimate`, printed by orchestrator/planning/describe.py), `submit` orders the render sets by it
(orchestrator/planning/render_sets.py `cost_ordered_sets`), and benchmarks/cluster_sim.py sleeps every render set and
trial for the seconds it gives here (scaled down), so the simulated cluster's totals equal `plan`'s estimate for the
same grid to the second (tests/test_cost_model.py checks it on orchestrator/grids/full_mlvp.yaml and on a small
generated grid).

The units are the plan's own (orchestrator/planning/plan.py):
- a **render set** is one (dataset, perturbation, severity): every test clip of the dataset rendered once on a CPU.
  One rendering costs `render_s_fixed` + `render_s_per_pixel_frame` x width x height x frames of its *source* clip
  (the decode and H.264's five full-length encodes grow with the source; the 12 frames written do not), fitted to two
  measured clips (`RENDER_POINTS`). A clean set is priced as a perturbed one (an upper bound: it only decodes);
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

Every figure is a plain number (a field of `CostModel`) with where it was measured in its `source`; `describe()`
lists them and `mlvp plan --verbose` prints that list. Another cluster's figures go in as CostModel(field=value)
(`python benchmarks/cluster_sim.py --cost field=value,...`); a grid has no key for them yet.

A dataset's source clip size comes from its videos where they are on disk (the mean over up to `SAMPLE_VIDEOS` test
videos, read from the container headers only), from its generator config for a generated dataset, and otherwise from
`TYPICAL_CLIPS` (lengths from each dataset's published totals, resolution and frame rate assumed); `plan` says which
it used. Every figure is an estimate from the machines named in its source (an NVIDIA H200; 2-core AMD EPYC dev
machines for rendering), not a measurement of the user's cluster.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING
import os

if TYPE_CHECKING:
    from orchestrator.planning.plan import DatasetPlan, ModelPlan, Plan
    from workloads.spec import TrialSpec

# The two measured renderings the render cost is fitted to: (source width x height x frames, CPU seconds of one
# rendering), each the CPU time of all 60 (type, severity) renderings of one source clip on one core, over 60.
# - docs/notes/2026-11-results-history.md §3 (b) (benchmarks/RESULTS.md "Rendering"): a 64-frame 224x224 H.264 clip,
#   1.02 s for the 60 (machine A, an AMD EPYC with AVX-512: the history's header; `python benchmarks/render_bench.py`);
# - §10 "Render": a 30 s 320x240 clip at 30 fps (900 frames), 14.33 s for the 60 (a 2-core AMD EPYC dev machine;
#   `python benchmarks/real_video.py --part render`; H.264 79% of it).
# The line through them:
#   coefficient = (14.33 / 60 - 1.02 / 60) / (320 x 240 x 900 - 224 x 224 x 64)
#               = (0.238833 - 0.017000) / (69,120,000 - 3,211,264) = 0.221833 / 65,908,736
#               = 3.366e-9 CPU s per pixel-frame
#   fixed       = 0.017000 - 3.366e-9 x 3,211,264 = 0.017000 - 0.010808 = 0.00619 CPU s per rendering
# Caveats, so that the figure is read as an estimate: the first point predates the faithful yuv444p H.264 of §9 (§10:
# the 30 s clip took 8.96 s with the earlier yuv420p encoder against 14.33 s), so small clips are priced a little low;
# machine B (AVX2 only) took 1.8x as long for the first point (§3), so a slower cluster CPU scales both figures.
RENDER_POINTS = ((224 * 224 * 64, 1.02 / 60), (320 * 240 * 900, 14.33 / 60))
_RENDER_SLOPE = (RENDER_POINTS[1][1] - RENDER_POINTS[0][1]) / (RENDER_POINTS[1][0] - RENDER_POINTS[0][0])
_RENDER_FIXED = RENDER_POINTS[0][1] - _RENDER_SLOPE * RENDER_POINTS[0][0]

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

    render_s_fixed: float = _figure(
        _RENDER_FIXED, "CPU s of one rendering (one type at one severity) whatever its size, on one core: the line "
        "through two measured clips (this module's RENDER_POINTS: docs/notes/2026-11-results-history.md §3 (b), "
        "a 64-frame 224x224 clip, and §10, a 30 s 320x240 30 fps clip; 2-core AMD EPYC dev machines)")
    render_s_per_pixel_frame: float = _figure(
        _RENDER_SLOPE, "CPU s of one rendering per source width x height x frame: the same fit (a slower CPU: "
        "machine B took 1.8x as long, history §3)")
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

    def rendering_seconds(self, pixel_frames: float) -> float:
        """CPU seconds of one rendering (one perturbation at one severity) of a source clip of `pixel_frames` =
        width x height x frames."""
        return self.render_s_fixed + self.render_s_per_pixel_frame * pixel_frames

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
        """One line per figure: its name, value and where it was measured."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
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

    def __init__(self, plan: Plan, cost: CostModel | None = None, clips: dict[str, ClipSize] | None = None):
        self.plan, self.cost = plan, cost or CostModel()
        self.counts = plan.clip_counts()
        self.slots = self.cost.slots_per_gpu(plan.grid.runtime.gpus_per_trial)
        if clips is not None:
            self.clips = clips

    @cached_property
    def clips(self) -> dict[str, ClipSize]:
        """Each target dataset's source clip size (`clip_size`), read once."""
        return {d: clip_size(d, self.plan.datasets[d]) for d in self.counts}

    def rendering_seconds(self, dataset: str) -> float:
        """CPU seconds of one rendering of one of `dataset`'s clips."""
        return self.cost.rendering_seconds(self.clips[dataset].pixel_frames)

    def render_set_seconds(self, render_set: tuple[str, str, int]) -> float | None:
        """CPU seconds of one render set: its dataset's clips at every seed of the grid (`Plan.seeds`) x one rendering
        each, and the OCR of each of its frames per engine the grid's OCR backbones read (`Plan.ocr_engines`)."""
        n = self.counts.get(render_set[0])
        if n is None:
            return None
        ocr = len(self.plan.ocr_engines.get(render_set[0], ())) * self.plan.grid.runtime.num_frames \
            * self.cost.ocr_s_per_frame
        return n * len(self.plan.seeds) * (self.rendering_seconds(render_set[0]) + ocr)

    def trial_gpu_seconds(self, spec: TrialSpec) -> float | None:
        n = self.counts.get(spec.dataset)
        return None if n is None else self.cost.trial_gpu_seconds(n, spec.batch_size, spec.precision, self.slots)

    def trial_slot_seconds(self, spec: TrialSpec) -> float | None:
        """Seconds the trial holds its GPU slot (what it takes on a cluster, and what the simulated cluster sleeps)."""
        n = self.counts.get(spec.dataset)
        return None if n is None else self.cost.trial_seconds(n, spec.batch_size, spec.precision, self.slots)

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
        per_image = self.cost.finetune_step_seconds(1, 1, ft.precision)
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
            out.render_clips += costs.counts[rs[0]] * len(costs.plan.seeds)
            out.render_cpu_s += seconds
    out.text_cpu_s = sum(costs.text_set_seconds(job) for job in work.text_sets)
    out.trial_gpu_s = sum(s for t in work.trials if (s := costs.trial_gpu_seconds(t)) is not None)
    out.gallery_gpu_s = sum(s for g in work.gallery_encodings if (s := costs.gallery_gpu_seconds(g)) is not None)
    finetunes = [(m, costs.checkpoint_gpu_seconds(m)) for m in work.checkpoints]
    out.finetune_gpu_s = sum(s for _, s in finetunes if s is not None)
    out.unknown += [f"fine-tuning {m.backbone}/{m.train_dataset} (no train annotations)" for m, s in finetunes
                    if s is None]
    return out


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
