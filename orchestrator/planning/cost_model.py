"""What a grid costs, from a few per-unit figures: one place for `plan`'s GPU-hours estimate and for
`benchmarks/cluster_sim.py` (which sleeps each render row and trial for its cost here, scaled down).

The units are the plan's own (orchestrator/planning/plan.py):
- a **render set** is one (dataset, perturbation, severity): every test clip of the dataset rendered once on a CPU;
- a **trial** streams its dataset's queries in batches of `runtime.batch_size` through adaptation and scoring on its
  GPU slot (`runtime.gpus_per_trial` of a GPU, so `trials_per_gpu` = 1 / gpus_per_trial share one GPU). Packed trials
  share the GPU's throughput, they do not multiply it: K trials on one GPU each take K / `packed_throughput` times as
  long as one alone (docs/notes/2026-11-results-history.md §6: 0.91-0.93x the throughput of one trial at K = 2, 4, 8);
- a **gallery encoding** is one unadapted pass over the gallery, done once per (model, dataset, direction) and cached
  (workloads/trial.py `encode_gallery`);
- a **checkpoint** is fine-tuned once (`models.finetune.steps` steps) unless given.

GPU-hours count GPU time, not slot time: a trial on a quarter of a GPU for an hour is 0.25 GPU-hours.

Default figures and where they come from (replace them with measurements of the target cluster; every field is a
plain number):
- `render_s_per_clip` 0.24 CPU s: docs/notes/2026-11-results-history.md §10, the 60 renderings of a 30 s clip took
  14.33 s of one core (H.264 79% of it); shorter clips cost less, ActivityNet's minutes-long ones more.
- `text_s_per_caption` 0.002 CPU s: character/word-level text perturbation of one caption
  (docs/notes/2026-11-results-history.md §8 is well below this; sentence-level types with their models cost more).
- `trial_s_per_batch` 0.28 s (fp32) and `trial_s_per_batch_bf16` 0.07 s, one trial alone on a whole GPU, and
  `packed_throughput` 0.92: measured on an NVIDIA H200 for ViT-B/32 at 224 px, 12 frames, batch 16, Tent and HAT-VTR,
  both backbones (docs/notes/2026-11-results-history.md §6: 17.7-18.1 ms per query in fp32, 4.2-5.8 in bf16); older GPUs
  are slower.
- `gallery_s_per_clip` 0.003 s: the same run's Source, one forward pass of a 12-frame clip (2.6 ms per query);
  a caption gallery costs less (1,000 captions in 0.3 s).
- `finetune_s_per_step` 1.0 s on a whole GPU: an **assumption** for ViT-B/32 (the GPU run fine-tuned only the
  embedded default's small model; benchmarks/gpu_trial.py's table 3 measures it).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class CostModel:
    """Per-unit costs (seconds). `trials_per_gpu` None: from the grid's runtime.gpus_per_trial."""

    render_s_per_clip: float = 0.24        # CPU s to render one clip at one (perturbation, severity)
    text_s_per_caption: float = 0.002      # CPU s to perturb one caption of a text set
    trial_s_per_batch: float = 0.28        # GPU s per query batch (adapt + score) of one fp32 trial alone on a GPU
    trial_s_per_batch_bf16: float = 0.07   # the same in bf16 autocast (runtime.precision: bf16)
    packed_throughput: float = 0.92        # throughput of K >= 2 trials sharing one GPU over one trial alone
    gallery_s_per_clip: float = 0.003      # GPU s to encode one gallery clip (once per model, dataset, direction)
    finetune_s_per_step: float = 1.0       # GPU s per fine-tuning step
    trials_per_gpu: float | None = None    # trial slots per GPU (None: 1 / runtime.gpus_per_trial)

    def slots_per_gpu(self, gpus_per_trial: float) -> float:
        if self.trials_per_gpu is not None:
            return self.trials_per_gpu
        return 1.0 / gpus_per_trial if gpus_per_trial > 0 else 1.0

    def render_seconds(self, clips: int) -> float:
        """CPU seconds of one render set of `clips` clips."""
        return clips * self.render_s_per_clip

    def trial_gpu_seconds(self, queries: int, batch_size: int, precision: str = "fp32", slots: float = 1.0) -> float:
        """GPU seconds of one trial of `queries` queries (its gallery is encoded separately) with `slots` trials per
        GPU: the same work whether or not it shares the GPU, plus what sharing loses."""
        per_batch = self.trial_s_per_batch_bf16 if precision == "bf16" else self.trial_s_per_batch
        shared = self.packed_throughput if slots > 1 else 1.0
        return math.ceil(queries / max(batch_size, 1)) * per_batch / shared

    def trial_seconds(self, queries: int, batch_size: int, precision: str = "fp32", slots: float = 1.0) -> float:
        """Seconds one trial holds its GPU slot: its GPU seconds times the trials it shares the GPU with."""
        return self.trial_gpu_seconds(queries, batch_size, precision, slots) * max(slots, 1.0)

    def describe(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in asdict(self).items() if v is not None)


@dataclass
class Estimate:
    """What a plan costs under a CostModel; `unknown` lists the datasets whose clip counts are not known (their
    work is not in the figures)."""

    render_sets: int = 0
    render_clips: int = 0
    render_cpu_h: float = 0.0
    text_cpu_h: float = 0.0
    trial_gpu_h: float = 0.0
    gallery_gpu_h: float = 0.0
    finetune_gpu_h: float = 0.0
    unknown: list[str] = field(default_factory=list)

    @property
    def gpu_h(self) -> float:
        return self.trial_gpu_h + self.gallery_gpu_h + self.finetune_gpu_h

    def line(self) -> str:
        return (f"estimated {self.gpu_h:,.1f} GPU-hours (trials {self.trial_gpu_h:,.1f}, gallery encodings "
                f"{self.gallery_gpu_h:,.1f}, fine-tuning {self.finetune_gpu_h:,.1f}) and {self.render_cpu_h:,.1f} CPU "
                f"core-hours of rendering ({self.render_clips:,} clips)"
                + (f" + {self.text_cpu_h:,.2f} of text sets" if self.text_cpu_h else ""))


def estimate(plan, work, cost: CostModel | None = None) -> Estimate:
    """The cost of `work` (orchestrator/planning/work.py: every unit of the plan, or only what remains to run) under
    `cost`; datasets whose clip counts are unknown are listed, not counted."""
    cost = cost or CostModel()
    rt = plan.grid.runtime
    slots = cost.slots_per_gpu(rt.gpus_per_trial)
    sizes = plan.clip_counts()
    out = Estimate(unknown=[d for d, n in sizes.items() if n is None])
    for ds, _, _ in work.render_sets:
        out.render_sets += 1
        if sizes.get(ds) is not None:
            out.render_clips += sizes[ds]
    out.render_cpu_h = cost.render_seconds(out.render_clips) / 3600
    for job in work.text_sets:
        n = sizes.get(job.key.dataset)
        out.text_cpu_h += (n or 0) * cost.text_s_per_caption / 3600
    for t in work.trials:
        n = sizes.get(t.dataset)
        if n is not None:
            out.trial_gpu_h += cost.trial_gpu_seconds(n, t.batch_size, t.precision, slots) / 3600
    for key in work.gallery_encodings:
        n = sizes.get(key[2])
        if n is not None:
            out.gallery_gpu_h += n * cost.gallery_s_per_clip / 3600
    for m in work.checkpoints:
        out.finetune_gpu_h += m.finetune.steps * cost.finetune_s_per_step / 3600
    return out
