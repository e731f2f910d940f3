"""The online test-time adaptation loop every method shares (docs/faithfulness.md: The online loop).

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
- `reset_memory()`              clear method state kept across batches;
- `query_embedding(out)`        the L2-normalised query embedding [B, D] the trial's diagnostics read after scoring
                                (default: the mean of `out.query_feat` over frames, normalised);
- `source_pairs()` / `attach_source(features, reason)`  a method that learns from the source domain's train split
                                (TITAN's bias-correction head) asks the trial for that many encoded pairs;
- `stream_stats(gt, gallery_groups)`  after the stream, figures about the method's own working (how many queries
                                DeYO selected, how often TITAN's pseudo-labels were right), reported with the
                                trial's metrics; the ground truth comes only once every score is final.

After each batch the loop keeps `query_embedding` of the scoring forward (`query_embeddings`, on the CPU): the
adapted query features of docs/faithfulness.md "Diagnostics". `fallbacks` lists, in one line each, the stand-ins a
method uses and the components it switched off for want of their input; the trial records them with its result.
"""
from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from workloads.backbones.model import Features, VideoTextModel
from workloads.methods.reference_configs import reference_settings
from workloads.options import Option, check_options

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
    """Gallery features computed once with the unadapted model. `features`, the backbone's global embedding
    (workloads/backbones/model.py: the backbone contract): v2t raw text features [G, D]; t2v raw per-frame video
    features [G, T, D]. `parts`: what else the backbone's score reads of each item ({} for a cosine backbone)."""

    direction: str
    features: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self):
        want = 2 if self.direction == "v2t" else 3
        if self.direction not in DIRECTIONS or self.features.dim() != want:
            raise ValueError(f"{self.direction} gallery needs a {want}-d feature tensor, got "
                             f"{tuple(self.features.shape)}")
        Features(self.features, self.parts)  # every part has one row per item

    def __len__(self) -> int:
        return self.features.shape[0]

    @property
    def side(self) -> Features:
        """The gallery as the backbone's score reads it."""
        return Features(self.features, self.parts)


@dataclass
class QueryBatch:
    """One batch of the query stream: normalised frames [B, T, 3, H, W] (v2t) or token ids [B, L] (t2v). `texts`:
    the t2v queries' caption strings, in batch order, where the stream has them (workloads/trial.py fills them;
    TITAN's counterfactual masking reads the words); None for video queries. `side`: the video queries' per-clip
    inputs the backbone reads besides frames (`VideoTextModel.video_inputs`: {"ocr": [one list of windows per
    clip]}), None when it reads none."""

    index: int
    inputs: torch.Tensor
    texts: tuple[str, ...] | None = None
    side: dict[str, list] | None = None

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def with_inputs(self, inputs: torch.Tensor, rows=None) -> "QueryBatch":
        """Another batch of the same queries (`rows` of them: a list of positions) with `inputs` in their place
        (DeYO's transformed frames, TITAN's counterfactual captions), their side inputs carried along."""
        side = self.side
        if side is not None and rows is not None:
            side = {k: [v[int(i)] for i in rows] for k, v in side.items()}
        return QueryBatch(self.index, inputs, None, side)


@dataclass
class SourceFeatures:
    """Encoded pairs of the source domain's train split (the checkpoint's own training data), from the unadapted
    model: L2-normalised text features [N, D] and video features [N, D] (the mean of a clip's frame features,
    normalised), row i of each from the same pair."""

    text: torch.Tensor
    video: torch.Tensor

    def __post_init__(self):
        if self.text.dim() != 2 or self.text.shape != self.video.shape:
            raise ValueError(f"source text and video features must both be [N, D], got {tuple(self.text.shape)} and "
                             f"{tuple(self.video.shape)}")

    def __len__(self) -> int:
        return self.text.shape[0]


@dataclass
class ForwardOutput:
    """What one forward pass gives a method. `scores` are cosine similarities [B, G] (no temperature).
    `query_feat` / `gallery_feat`: the features TCR-style losses consume (see `TTAMethod.forward_output`)."""

    scores: torch.Tensor
    query_feat: torch.Tensor | None = None
    gallery_feat: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def softmax_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Row entropy H_i = -sum_j p_ij log p_ij of softmax(logits) along dim 1 (summed, unlike the reference's
    elementwise helper; SAR's faithful mode uses `elementwise_entropy`)."""
    return -(logits.softmax(1) * logits.log_softmax(1)).sum(1)


def elementwise_entropy(logits: torch.Tensor) -> torch.Tensor:
    return -(logits.softmax(1) * logits.log_softmax(1))


class TTAMethod:
    """Base class: the shared online loop. Class attributes are the reference's per-method settings."""

    name: ClassVar[str] = ""
    # the paper's learning rate per direction (appendix C); faithful mode takes the authors' per-configuration
    # values from workloads.methods.reference_configs instead (equal for every shipped rate)
    lr: ClassVar[dict[str, float]] = {"v2t": 3e-5, "t2v": 3e-5}
    adapts: ClassVar[bool] = True
    # what `faithful: false` changes, in one line ("" when both modes are the same method); docs/faithfulness.md
    corrected: ClassVar[str] = ""
    # a method with no authors' code to be faithful to says here what was derived from its paper ("" otherwise):
    # its trials record method_faithful: false whatever the grid's flag (workloads/trial.py)
    paper_derived: ClassVar[str] = ""
    # method-specific options, checked when a grid loads (workloads.options.Option: kind, default, range)
    OPTIONS: ClassVar[dict[str, Option]] = {}
    # encoder passes of the query tower per step, (forwards, backwards), an upper bound where a step may skip some:
    # the budgeted protocol's relative cost (workloads/protocols/base.py method_cost; docs/protocols.md: budgeted)
    passes: ClassVar[tuple[int, int]] = (1, 1)
    # (the smallest batch, what the method computes over a batch): smaller batches are refused (docs/protocols.md)
    batch_statistic: ClassVar[tuple[int, str]] = (1, "")
    # options every method takes (they are constructor arguments, not method state)
    COMMON_OPTIONS: ClassVar[dict[str, Option]] = {
        "lr": Option(float, None, above=0, doc="learning rate; default: the method's rate for the direction"),
        "weight_decay": Option(float, 1e-4, min=0),
        "temperature": Option(float, 0.02, above=0, doc="softmax temperature of the entropy losses")}

    @classmethod
    def validate_options(cls, options: Mapping[str, Any], faithful: bool = True) -> dict[str, Any]:
        """Check option names, kinds and ranges without building the method (a grid checks every method entry when it
        loads); returns every option with its default (None = resolved when the method is built)."""
        o = check_options(f"method {cls.name!r}", options, {**cls.COMMON_OPTIONS, **cls.OPTIONS})
        cls.check_dependent(o, faithful)
        return o

    @classmethod
    def check_dependent(cls, options: dict[str, Any], faithful: bool) -> None:
        """Rules that involve several options or the `faithful` flag; raise OptionError with one line."""

    def resolve_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Fill in defaults left as None that depend on `faithful` or the gallery."""
        return options

    def __init__(self, model: VideoTextModel, direction: str, gallery: Gallery, *, steps: int = 3,
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
        self.faithful = bool(faithful)
        self.precision = precision
        self.fallbacks: list[str] = []
        self.query_embeddings: list[torch.Tensor] = []
        o = type(self).validate_options(options, self.faithful)
        if self.faithful:  # the authors' shipped setting for this (method, direction, backbone), unless overridden
            for key, value in reference_settings(self.name, direction, getattr(model, "backbone", "")).items():
                if options.get(key) is None:
                    o[key] = value
        lr = o.pop("lr")
        self.learning_rate = float(lr if lr is not None else self.lr[direction])
        self.weight_decay = float(o.pop("weight_decay"))
        self.temperature = float(o.pop("temperature"))
        self.options = self.resolve_options(o)
        self.device = gallery.features.device
        self.params: list[nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer | None = None
        self.setup()

    # -- set-up -------------------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Freeze everything, then train only the query tower's LayerNorm weights and biases."""
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
        self.query_embeddings = []
        self.reset_memory()

    def reset_memory(self) -> None:
        """Clear state a method keeps across batches (queues, memories)."""

    # -- the source domain (methods that learn from it) ---------------------------------------------------------
    def source_pairs(self) -> int:
        """How many pairs of the source train split the method wants encoded (0: none)."""
        return 0

    def attach_source(self, features: SourceFeatures | None, reason: str = "") -> None:
        """Receive the source pairs (`features`), or None with the one-line `reason` there are none. Called by the
        trial after construction and before the stream; a method that asks for pairs must accept None."""

    def stream_stats(self, gt, gallery_groups=None) -> dict[str, float]:
        """Figures about the finished stream, named `<method>_<what>` ({} by default). `gt`: each query's positive
        (a gallery index, or a group of `gallery_groups`), given only after the last batch is scored."""
        return {}

    def autocast(self):
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    # -- forward ------------------------------------------------------------------------------------------------
    def encode_queries(self, batch: QueryBatch) -> Features:
        """The batch's query features from the (adapting) model: videos with their side inputs, or texts."""
        if self.direction == "v2t":
            return self.model.video_features(batch.inputs, batch.side)       # main [B, T, D]
        return self.model.text_features(batch.inputs)                         # main [B, D]

    def score_queries(self, queries: Features, gallery: Features) -> torch.Tensor:
        """The backbone's scores [B, G] of queries against the gallery, whichever side is the text."""
        if self.direction == "v2t":
            return self.model.score(gallery, queries).t()
        return self.model.score(queries, gallery)

    def forward_output(self, batch: QueryBatch) -> ForwardOutput:
        """The reference harness's `TTABase.forward_output`: pooling on UNnormalised features, the backbone's scores
        [B, G] (cosine for CLIP4Clip and X-Pool). query_feat / gallery_feat as TCR consumes them, from the global
        embeddings: v2t -> mean of unnormalised query frame features and normalised gallery texts; t2v ->
        normalised query texts and the mean of unnormalised gallery frame features."""
        g = self.gallery.side
        with self.autocast():
            q = self.encode_queries(batch)
            scores = self.score_queries(q, g)                                 # [B, G]
            if self.direction == "v2t":
                query_feat, gallery_feat = q.main.mean(1), F.normalize(g.main, dim=-1)
            else:
                query_feat, gallery_feat = F.normalize(q.main, dim=-1), g.main.mean(1)
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

    def query_embedding(self, out: ForwardOutput) -> torch.Tensor:
        """The L2-normalised query embedding [B, D] of a forward: `query_feat` (frames averaged) normalised, i.e. the
        features TCR's losses consume (docs/faithfulness.md: Diagnostics)."""
        q = out.query_feat
        return F.normalize(q.mean(1) if q.dim() == 3 else q, dim=-1)

    def _keep_embedding(self, out: ForwardOutput) -> None:
        if out.query_feat is not None:
            self.query_embeddings.append(self.query_embedding(out).detach().float().cpu())

    def adapt_and_score(self, batch: QueryBatch) -> torch.Tensor:
        """Adapt on one batch (`steps` updates) and return its scores [B, G] from the last step's forward."""
        out = None
        for s in range(self.steps):
            out = self.step(batch, s)
        scores = self.score(out, batch).detach()
        self._check_finite(scores, "scores", batch)
        if self.params and not all(torch.isfinite(p).all() for p in self.params):
            raise NonFiniteError("LayerNorm parameters", batch.index)
        self._keep_embedding(out)
        return scores

    @torch.no_grad()
    def score_only(self, batch: QueryBatch) -> torch.Tensor:
        """Score one batch with the current weights, adapting nothing (a budgeted or offline stream's scoring
        batches; Source's every batch): one forward, the method's `score` (re-ranking memories still read and grow)."""
        out = self.forward_output(batch)
        scores = self.score(out, batch)
        self._check_finite(scores, "scores", batch)
        self._keep_embedding(out)
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
    passes = (1, 0)

    def adapt_and_score(self, batch: QueryBatch) -> torch.Tensor:
        return self.score_only(batch)


def run_stream(method: TTAMethod, batches: Iterable[QueryBatch], progress=None, plan=None) -> torch.Tensor:
    """Run the online stream; returns the concatenated scores [N_query, G] on the CPU (float32).
    `progress`, if given, is called with (batches_done, queries_done) after every batch.
    `plan` (a stream protocol's, workloads/protocols): one StreamBatch per batch, whose flags say whether to reset
    the method before it (`reset`; the queries' embeddings kept so far stay), adapt on it or only score it
    (`adapt`), and keep its scores (`score`: offline's adaptation pass drops them, and their embeddings). None is
    today's stream: reset once, adapt on and keep every batch."""
    method.reset()
    flags = iter(plan) if plan is not None else None
    rows, n = [], 0
    for i, batch in enumerate(batches):
        control = next(flags) if flags is not None else None
        if control is None:
            rows.append(method.adapt_and_score(batch).float().cpu())
        else:
            if control.reset and i > 0:   # before the first batch the method was just reset
                kept = method.query_embeddings
                method.reset()
                method.query_embeddings = kept
            seen = len(method.query_embeddings)
            scores = (method.adapt_and_score if control.adapt else method.score_only)(batch)
            if control.score:
                rows.append(scores.float().cpu())
            else:
                del method.query_embeddings[seen:]
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
