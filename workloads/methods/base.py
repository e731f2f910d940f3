"""The online test-time adaptation loop every method shares (vtr_tta_study s1.1).

One trial = one stream of query batches (annotation order, batch 16) against a gallery encoded once with the
unadapted model. For each batch a method runs `steps` (3) times: forward -> loss -> backward -> AdamW step, updating
only the LayerNorm weights and biases of the query tower. The batch is scored with the LAST step's forward output,
i.e. after 2 updates on that batch and before the 3rd (whose update only reaches later batches). Adaptation is
continual: the model is reset once, at the start of the stream.

A method is a subclass of `TTAMethod` overriding a few hooks:
- `loss(out, batch, step)`      the objective on one forward output (most methods need only this);
- `step(batch, step)`           one forward/backward/update (SAR overrides it for SAM's two passes);
- `forward_output(batch)`       how features and scores are computed (HAT-VTR normalises differently);
- `score(out, batch)`           the scores returned for ranking (HAT-VTR re-ranks them);
- `reset_memory()`              clear method state kept across batches.
"""
from __future__ import annotations

import copy
import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from workloads.backbones.model import VideoTextModel, cosine_similarity

DIRECTIONS = ("v2t", "t2v")


class NonFiniteError(RuntimeError):
    """Scores, loss or parameters became NaN/inf during adaptation; carries the batch index."""

    def __init__(self, what: str, batch_index: int, step: int | None = None):
        where = f"batch {batch_index}" + (f", step {step}" if step is not None else "")
        super().__init__(f"non-finite {what} at {where}")
        self.what = what
        self.batch_index = batch_index
        self.step = step

    def __reduce__(self):  # picklable across Ray workers
        return type(self), (self.what, self.batch_index, self.step)


@dataclass
class Gallery:
    """Gallery features computed once with the unadapted model (s1.1 item 7). v2t: raw text features [G, D];
    t2v: raw per-frame video features [G, T, D]."""

    direction: str
    features: torch.Tensor

    def __post_init__(self):
        want = 2 if self.direction == "v2t" else 3
        if self.direction not in DIRECTIONS or self.features.dim() != want:
            raise ValueError(f"{self.direction} gallery needs a {want}-d feature tensor, got "
                             f"{tuple(self.features.shape)}")

    def __len__(self) -> int:
        return self.features.shape[0]


@dataclass
class QueryBatch:
    """One batch of the query stream: normalised frames [B, T, 3, H, W] (v2t) or token ids [B, L] (t2v)."""

    index: int
    inputs: torch.Tensor

    def __len__(self) -> int:
        return self.inputs.shape[0]


@dataclass
class ForwardOutput:
    """What one forward pass gives a method. `scores` are cosine similarities [B, G] (no temperature).
    `query_feat` / `gallery_feat`: the features TCR-style losses consume (see `TTAMethod.forward_output`)."""

    scores: torch.Tensor
    query_feat: torch.Tensor | None = None
    gallery_feat: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)


_SCALARS = (bool, int, float, str, type(None))


def check_option_values(method: str, options: Mapping[str, Any], spec: Mapping[str, tuple[type, Any]]
                        ) -> dict[str, Any]:
    """Validate `options` against a method's option table `spec` {name: (kind, default)} and return the full option
    dict with defaults filled in. `kind` is bool, int or float; a default of None means "depends on `faithful`"
    (the method resolves it). Unknown names are rejected with the allowed list; values must be JSON scalars of the
    right kind (ints are accepted for floats and integral floats for ints, as JSON round-trips give them; null means
    the default)."""
    unknown = sorted(set(options) - set(spec))
    if unknown:
        raise ValueError(f"method {method!r} does not take option(s) {unknown}; allowed options: "
                         f"{', '.join(sorted(spec))}")
    out = {name: default for name, (_, default) in spec.items()}
    for name, value in options.items():
        kind = spec[name][0]
        if value is None:  # null = the default
            continue
        if not isinstance(value, _SCALARS):
            raise ValueError(f"option {name!r} of method {method!r} must be a JSON scalar, got "
                             f"{type(value).__name__}")
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"option {name!r} of method {method!r} must be true/false, got {value!r}")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or float(value) != int(value):
                raise ValueError(f"option {name!r} of method {method!r} must be an integer, got {value!r}")
            value = int(value)
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"option {name!r} of method {method!r} must be a finite number, got {value!r}")
            value = float(value)
        out[name] = value
    return out


def softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Row entropy H_i = -sum_j p_ij log p_ij of softmax(logits) along dim 1 (summed, unlike the reference's
    elementwise helper; SAR's faithful mode uses `elementwise_entropy`)."""
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def elementwise_entropy(logits: torch.Tensor) -> torch.Tensor:
    return -(logits.softmax(1) * logits.log_softmax(1))


class TTAMethod:
    """Base class: the shared online loop. Class attributes are the reference's per-method settings (s1.2)."""

    name: ClassVar[str] = ""
    # learning rate per direction (config_tta/msrvtt/*, s1.2)
    lr: ClassVar[dict[str, float]] = {"v2t": 3e-5, "t2v": 3e-5}
    adapts: ClassVar[bool] = True
    # method-specific options {name: (kind, default)}; see check_option_values
    OPTIONS: ClassVar[dict[str, tuple[type, Any]]] = {}
    # options every method takes (they are constructor arguments, not method state)
    COMMON_OPTIONS: ClassVar[dict[str, tuple[type, Any]]] = {"lr": (float, None), "weight_decay": (float, 1e-4),
                                                              "temperature": (float, 0.02)}

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> None:
        """Check option names and kinds without building the method (a grid is checked before anything runs)."""
        check_option_values(cls.name, options, {**cls.COMMON_OPTIONS, **cls.OPTIONS})

    def __init__(self, model: VideoTextModel, direction: str, gallery: Gallery, *, steps: int = 3,
                 lr: float | None = None, weight_decay: float = 1e-4, temperature: float = 0.02,
                 faithful: bool = True, precision: str = "fp32", **options: Any):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if gallery.direction != direction:
            raise ValueError(f"gallery was encoded for {gallery.direction}, the method runs {direction}")
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
        self.model = model
        self.direction = direction
        self.gallery = gallery
        self.steps = int(steps)
        self.learning_rate = float(lr if lr is not None else self.lr[direction])
        self.weight_decay = float(weight_decay)
        self.temperature = float(temperature)
        self.faithful = bool(faithful)
        self.precision = precision
        self.options = self.check_options(options)
        self.device = gallery.features.device
        self.params: list[nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer | None = None
        self.setup()

    # -- set-up -------------------------------------------------------------------------------------------------
    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Validate method-specific options against `OPTIONS` and fill in defaults; override to resolve defaults
        that depend on `faithful` or the gallery."""
        return check_option_values(self.name, options, self.OPTIONS)

    def setup(self) -> None:
        """Freeze everything, then train only the query tower's LayerNorm weights and biases (s1.1 item 4)."""
        self.model.eval()  # dropout off everywhere; LayerNorm is unaffected by train/eval
        self.model.requires_grad_(False)
        self.params = []
        if self.adapts:
            for ln in self.model.query_layernorms(self.direction):
                for p in ln.parameters():
                    p.requires_grad_(True)
                    self.params.append(p)
            if not self.params:
                raise RuntimeError(f"no LayerNorm parameters found in the {self.direction} query tower")
            self.optimizer = self.make_optimizer(self.params)
        self.reset_memory()
        self._initial_state = (copy.deepcopy(self.model.state_dict()),
                               copy.deepcopy(self.optimizer.state_dict()) if self.optimizer else None)

    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=self.learning_rate, weight_decay=self.weight_decay)

    def reset(self) -> None:
        """Restore the model and optimizer to their state at set-up and clear method memory."""
        model_state, opt_state = self._initial_state
        self.model.load_state_dict(model_state)
        if self.optimizer is not None and opt_state is not None:
            self.optimizer.load_state_dict(opt_state)
        self.reset_memory()

    def reset_memory(self) -> None:
        """Clear state a method keeps across batches (queues, memories)."""

    def autocast(self):
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    # -- forward ------------------------------------------------------------------------------------------------
    def forward_output(self, batch: QueryBatch) -> ForwardOutput:
        """The reference harness's `TTABase.forward_output` (s1.1 item 9): pooling on UNnormalised features, cosine
        scores [B, G]. query_feat / gallery_feat as TCR consumes them: v2t -> mean of unnormalised query frame
        features and normalised gallery texts; t2v -> normalised query texts and the mean of unnormalised gallery
        frame features."""
        g = self.gallery.features
        with self.autocast():
            if self.direction == "v2t":
                frames = self.model.encode_frames(batch.inputs)              # [B, T, D]
                pooled = self.model.pool(g, frames)                           # [B, D] or [B, G, D]
                scores = cosine_similarity(g, pooled).t()                     # [B, G]
                query_feat, gallery_feat = frames.mean(1), F.normalize(g, dim=-1)
            else:
                text = self.model.encode_text(batch.inputs)                   # [B, D]
                pooled = self.model.pool(text, g)                             # [G, D] or [G, B, D]
                scores = cosine_similarity(text, pooled)                      # [B, G]
                query_feat, gallery_feat = F.normalize(text, dim=-1), g.mean(1)
        return ForwardOutput(scores.float(), query_feat.float(), gallery_feat.float())

    # -- adaptation ---------------------------------------------------------------------------------------------
    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor | None:
        raise NotImplementedError(f"{type(self).__name__} must implement loss()")

    def step(self, batch: QueryBatch, step: int) -> ForwardOutput:
        out = self.forward_output(batch)
        loss = self.loss(out, batch, step)
        if loss is not None:
            self._check_finite(loss, "loss", batch, step)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        return out

    def score(self, out: ForwardOutput, batch: QueryBatch) -> torch.Tensor:
        return out.scores

    def adapt_and_score(self, batch: QueryBatch) -> torch.Tensor:
        """Adapt on one batch (`steps` updates) and return its scores [B, G] from the last step's forward."""
        out = None
        for s in range(self.steps):
            out = self.step(batch, s)
        scores = self.score(out, batch).detach()
        self._check_finite(scores, "scores", batch)
        if self.params and not all(torch.isfinite(p).all() for p in self.params):
            raise NonFiniteError("LayerNorm parameters", batch.index)
        return scores

    @staticmethod
    def _check_finite(x: torch.Tensor, what: str, batch: QueryBatch, step: int | None = None) -> None:
        if not torch.isfinite(x).all():
            raise NonFiniteError(what, batch.index, step)

    # -- helpers for losses -------------------------------------------------------------------------------------
    def logits(self, out: ForwardOutput) -> torch.Tensor:
        return out.scores / self.temperature


class NoAdaptation(TTAMethod):
    """Base for methods that only score (Source)."""

    adapts = False

    def adapt_and_score(self, batch: QueryBatch) -> torch.Tensor:
        with torch.no_grad():
            scores = self.score(self.forward_output(batch), batch)
        self._check_finite(scores, "scores", batch)
        return scores


def run_stream(method: TTAMethod, batches: Iterable[QueryBatch], progress=None) -> torch.Tensor:
    """Run the online stream; returns the concatenated scores [N_query, G] on the CPU (float32).
    `progress`, if given, is called with (batches_done, queries_done) after every batch."""
    method.reset()
    rows, n = [], 0
    for i, batch in enumerate(batches):
        rows.append(method.adapt_and_score(batch).float().cpu())
        n += len(batch)
        if progress is not None:
            progress(i + 1, n)
    if not rows:
        raise ValueError("empty query stream")
    return torch.cat(rows)


def iter_batches(inputs: torch.Tensor, batch_size: int = 16) -> Iterator[QueryBatch]:
    """Split query inputs into batches in order (shuffle=False, drop_last=False)."""
    for i, start in enumerate(range(0, inputs.shape[0], batch_size)):
        yield QueryBatch(i, inputs[start:start + batch_size])
