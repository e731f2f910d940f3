"""What determines a fine-tuned checkpoint (its content key and file name), apart from the fine-tuning code in
workloads/backbones/finetune.py: the plan computes every checkpoint's path from this without importing torch.

A fine-tune follows a recipe (`FinetuneConfig.recipe`, the data in RECIPES; docs/finetuning.md gives each setting's
source):
- "quick": this tool's short schedule for the embedded default and quick looks (one learning rate, distinct videos
  per batch, `steps` steps): every setting is a FinetuneConfig field, as before recipes existed;
- "xpool": the X-Pool trainer (layer6ai-labs/xpool `train.py`, `config/all_config.py`, `trainer/trainer.py`,
  `datasets/model_transforms.py`), which the HAT-VTR authors trained both of their backbones with;
- "clip4clip": ArrowLuo/CLIP4Clip's `main_task_retrieval.py` with its README's MSRVTT command.
For "xpool" and "clip4clip" the recipe's numbers replace `steps`, `batch_size`, `lr`, `weight_decay`, `warmup`,
`train_frames` and `frames_per_clip`, which then take no part in the key; `epochs` (None: the recipe's) shortens a
run on purpose.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workloads import FINETUNE_VERSION
from workloads.backbones.registry import BACKBONES   # names and registrations read from the source: no torch
from workloads.seeding import digest


@dataclass(frozen=True)
class Recipe:
    """A published trainer's schedule, as data (docs/finetuning.md: where each number comes from)."""

    name: str
    epochs: float                # passes over the train split's (video, caption) pairs
    batch_size: int              # (video, caption) pairs per step, drawn at random: a video can appear twice
    clip_lr: float               # CLIP's parameters
    head_lr: float               # the layers added on top of CLIP (X-Pool's pooling head)
    weight_decay: float
    no_decay: tuple[str, ...]    # parameter-name substrings exempt from weight decay
    warmup: float                # fraction of the steps with a linear warm-up
    schedule: str                # "cosine": cosine from the end of warm-up to 0 (transformers'); "cosine_progress":
                                 # 0.5 (1 + cos(pi x)) of the whole run's progress x after warm-up (BertAdam's)
    betas: tuple[float, float]
    eps: float
    frames: int                  # frames per clip, uniform rule, every step
    augment: str                 # "crop_flip": RandomResizedCrop(scale 0.5-1) + horizontal flip per clip; "none"
    grad_clip: float
    loss: str = "symmetric_infonce"  # CLIP's loss with its logit scale (clamped at ln 100), both directions
    head_lr_by_dataset: tuple[tuple[str, float], ...] = ()  # the README commands' per-dataset head rates

    def head_lr_for(self, dataset: str) -> float:
        return dict(self.head_lr_by_dataset).get(dataset, self.head_lr)


RECIPES: dict[str, Recipe] = {
    # layer6ai-labs/xpool: config/all_config.py defaults; README's MSRVTT-9k command sets --noclip_lr=3e-5
    "xpool": Recipe("xpool", epochs=5, batch_size=32, clip_lr=1e-6, head_lr=1e-5, weight_decay=0.2, no_decay=(),
                    warmup=0.1, schedule="cosine", betas=(0.9, 0.999), eps=1e-6, frames=12, augment="crop_flip",
                    grad_clip=1.0, head_lr_by_dataset=(("msrvtt", 3e-5),)),
    # ArrowLuo/CLIP4Clip: README's MSRVTT command (--epochs 5 --batch_size 128 --lr 1e-4 --coef_lr 1e-3
    # --max_frames 12) and main_task_retrieval.py's prep_optimizer (BertAdam, warmup_cosine, b2 0.98, wd 0.2 except
    # biases)
    "clip4clip": Recipe("clip4clip", epochs=5, batch_size=128, clip_lr=1e-7, head_lr=1e-4, weight_decay=0.2,
                        no_decay=("bias", "LayerNorm.bias", "LayerNorm.weight"), warmup=0.1,
                        schedule="cosine_progress", betas=(0.9, 0.98), eps=1e-6, frames=12, augment="none",
                        grad_clip=1.0),
}
RECIPE_NAMES = ("quick", *RECIPES)
# how an OCR backbone's (TCD's) train clips meet their OCR windows, part of its checkpoints' keys only: "2", each
# batch takes the windows of the very frames it feeds the model, read at the train clips' own frames
# (workloads/backbones/finetune.py `batch_side`); before (no marker), every window was read at the evaluation's frames
OCR_WINDOWS = "2"
# the evaluation after training used `eval_frames` frames, which were part of the key until issue #36: every key made
# before then held this value (the grid default runtime.num_frames), so the quick recipe's keys keep it as a constant
LEGACY_EVAL_FRAMES = 12


@dataclass(frozen=True)
class FinetuneConfig:
    backbone: str = "clip4clip"
    clip_model: str = "mlvp-tiny"
    init: str = ""                      # identity of the starting weights ("" = random init), part of the key
    steps: int = 500
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.2
    warmup: float = 0.1                 # fraction of steps
    train_frames: int = 16              # frames decoded per train video (uniform rule; all 16 of a synthetic clip)
    frames_per_clip: int = 4            # of those, random frames per clip per step, in order (1 = image-caption)
    eval_frames: int = 12               # frames of the clean evaluation after training: not in the key (it does not
                                        # change the weights; docs/finetuning.md)
    precision: str = "auto"             # "fp32", "bf16" (autocast), or "auto": bf16 where the device computes it
                                        # natively, else fp32 (see resolve_precision)
    seed: int = 0
    pooling_kwargs: dict = field(default_factory=dict)
    recipe: str = "quick"               # "quick" | "xpool" | "clip4clip" (module docstring)
    epochs: float | None = None         # xpool / clip4clip: passes over the train pairs (None: the recipe's)
    workers: int = 0                    # DataLoader worker processes assembling batches (not in the key: the
                                        # batches are the same for any count)

    def __post_init__(self):
        if self.recipe not in RECIPE_NAMES:
            raise ValueError(f"unknown fine-tuning recipe {self.recipe!r}; known: {list(RECIPE_NAMES)}")

    @property
    def published(self) -> Recipe | None:
        """The published trainer's recipe, or None for "quick"."""
        return RECIPES.get(self.recipe)

    def step_count(self, n_pairs: int) -> int:
        """Optimiser steps on a train split of `n_pairs` (video, caption) pairs: `steps` (quick), else the recipe's
        epochs (or `epochs`) over every pair in batches of its size, the last batch of an epoch shorter."""
        recipe = self.published
        if recipe is None:
            return self.steps
        epochs = recipe.epochs if self.epochs is None else self.epochs
        return max(1, round(epochs * math.ceil(max(n_pairs, 1) / recipe.batch_size)))

    def images_per_step(self) -> int:
        """Frames one step puts through the model: batch x frames per clip (the recipe's where published)."""
        recipe = self.published
        return recipe.batch_size * recipe.frames if recipe else self.batch_size * self.frames_per_clip

    def key_fields(self) -> dict:
        """What the key is made of: the settings that change the weights, nothing else."""
        fields = asdict(self)
        for name in ("recipe", "epochs", "workers"):
            fields.pop(name)
        fields["eval_frames"] = LEGACY_EVAL_FRAMES  # not a weight setting (issue #36); constant keeps old keys
        if self.recipe == "quick":
            return fields
        for name in ("steps", "batch_size", "lr", "weight_decay", "warmup", "train_frames", "frames_per_clip"):
            fields.pop(name)  # the recipe's own numbers replace them
        fields.pop("eval_frames")
        return {**fields, "recipe": asdict(self.published), "epochs": self.epochs}

    def key(self, dataset: str, data_version: str) -> str:
        """Content key: the weight settings (`key_fields`), the init weights' identity, data version, code version
        (and for an OCR backbone how its windows are read: OCR_WINDOWS)."""
        ocr = {"ocr_windows": OCR_WINDOWS} if self.backbone in BACKBONES \
            and BACKBONES.static_info(self.backbone).get("ocr") else {}
        return digest({"config": self.key_fields(), "dataset": dataset, "data": data_version,
                       "code": FINETUNE_VERSION, **ocr})


def checkpoint_path(config: FinetuneConfig, dataset: str, data_version: str, cache_dir: str | Path) -> Path:
    return Path(cache_dir) / f"{config.backbone}-{config.clip_model}-{dataset}-{config.key(dataset, data_version)}.pt"
