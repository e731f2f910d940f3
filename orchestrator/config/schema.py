"""The grid schema: typed dataclasses for every section but the scenarios' own (orchestrator/config/scenarios), each
field with its range (`opt`), and the generic conversion of YAML data into them (`build`), which names the key of
every value it refuses. docs/grid_reference.md is generated from these dataclasses."""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.errors import GridError, did_you_mean, short_repr
from workloads.options import Option, OptionError


def opt(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, **rule: Any):
    """A grid field with its range: opt(16, min=1), opt(0.0, min=0), opt("auto", choices=("fp32", ...)). The rule
    (workloads.options.Option's min / max / above / choices) is checked when the grid loads."""
    kw = {"default": default} if factory is dataclasses.MISSING else {"default_factory": factory}
    return field(metadata={"rule": rule}, **kw)


# -- the schema ------------------------------------------------------------------------------------------------
@dataclass
class DatasetAssets:
    """Per-dataset perturbation assets (local paths)."""
    main_objects: str | None = None          # boxes JSON of the authors' get_main_objects.py (occlusion, captions)
    distractor_pool: str | None = None       # event-insertion pool for this dataset (overrides assets.distractor_pool)
    # text perturbation -> JSON of its perturbed test captions in the authors' format (a list of [video_id, text]
    # in annotation order, checked against the split): how sentence-level types run without their seq2seq models
    text_precomputed: dict[str, str] = field(default_factory=dict)


@dataclass
class DatasetEntry:
    """One dataset: where it lives and its loader's options (workloads/datasets/)."""
    root: str | None = None                  # where the dataset lives; None for generated ones (synthetic)
    options: dict[str, Any] = field(default_factory=dict)  # loader options (file names, sizes of synthetic data)
    assets: DatasetAssets = field(default_factory=DatasetAssets)


@dataclass
class AssetsSpec:
    """Heavy perturbation assets, all local paths. Absent ones fall back to documented built-ins; every rendered
    clip records whether it was faithful and what was substituted."""
    adain_vgg: str | None = None             # style transfer: vgg_normalised.pth (pytorch-AdaIN)
    adain_decoder: str | None = None         # style transfer: decoder.pth
    style_images: str | None = None          # style transfer: folder of style images (Painter by Numbers)
    distractor_pool: str | None = None       # event insertion: folder of videos (default: the dataset's train split)
    # text (t2v) perturbations (workloads/perturbations/text): all optional; see docs/text_queries.md
    wordnet: str | None = None               # WordNet 3.0 data folder (default: Debian's /usr/share/wordnet)
    sentence_encoder: str | None = None      # similarity retry: paraphrase-mpnet-base-v2 folder (else a stand-in)
    back_translation_models: list[str] | None = None   # [en->de folder, de->en folder] (facebook/wmt19-*)
    styleformer_models: str | None = None    # folder with the Styleformer T5 models (formal, casual, passive, active)


@dataclass
class FinetuneSpec:
    """Source fine-tuning for checkpoints the grid does not supply (the embedded default trains mlvp-tiny)."""
    steps: int = opt(500, min=1)             # optimiser steps
    batch_size: int = opt(64, min=2)         # contrastive: a batch of one has no negatives
    lr: float = opt(1e-3, above=0)           # AdamW learning rate
    weight_decay: float = opt(0.2, min=0)    # AdamW weight decay
    train_frames: int = opt(16, min=1)       # frames decoded per train video (uniform rule)
    frames_per_clip: int = opt(4, min=1)     # of those, random frames per clip per training step
    precision: str = opt("auto", choices=("fp32", "bf16", "auto"))  # auto: bf16 on GPUs; CPUs: native bf16, 50M+ params
    xpool_init_from_clip4clip: bool = True   # start X-Pool from the fine-tuned mean-pooling model (faster)
    xpool_steps: int | None = opt(150, min=1)  # steps for X-Pool when initialised from clip4clip (None: steps)
    # "quick": the keys above; "xpool" / "clip4clip": a published trainer's schedule, whose numbers replace steps,
    # batch_size, lr, weight_decay, train_frames and frames_per_clip (docs/finetuning.md; both start from CLIP)
    recipe: str = opt("quick", choices=("quick", "xpool", "clip4clip"))
    epochs: float | None = opt(None, above=0)   # a published recipe shortened or lengthened (None: its own 5)
    workers: int = opt(0, min=0, max=64)     # processes decoding the split and assembling batches (not in the key)


@dataclass
class PretrainSpec:
    """Image-text pretraining of the zero-shot CLIP for the embedded default (real grids give models.pretrained):
    single frames of a generated dataset with its own caption style, never the video retrieval fine-tune."""
    dataset: str = "synthetic_c"
    options: dict[str, Any] = field(default_factory=dict)   # options of that generated dataset
    steps: int = opt(400, min=1)
    batch_size: int = opt(128, min=2)
    lr: float = opt(1e-3, above=0)
    weight_decay: float = opt(0.2, min=0)
    precision: str = opt("auto", choices=("fp32", "bf16", "auto"))


@dataclass
class ModelsSpec:
    """The models: CLIP weights to start from, fine-tuned checkpoints given, and how missing ones are made here."""
    clip_model: str = "mlvp-tiny"            # open_clip config name (mlvp-tiny, mlvp-micro, ViT-B-32, ...)
    pretrained: str | None = None            # CLIP weights (local file): fine-tuning start and zero-shot model
    checkpoints: dict[str, dict[str, str]] = field(default_factory=dict)  # backbone -> dataset -> checkpoint
    finetune: FinetuneSpec = field(default_factory=FinetuneSpec)
    zero_shot_pretrain: PretrainSpec | None = None   # without `pretrained`: pretrain the zero-shot CLIP here


@dataclass
class VariantSpec:
    """A named variant of a method (an ablation row): the method, its options, and optionally its own `faithful`."""
    method: str                              # the registered method it varies
    options: dict[str, Any] = field(default_factory=dict)   # its options (as method_options)
    faithful: bool | None = None             # None: the grid's `faithful`


@dataclass
class BackboneVariantSpec:
    """A named variant of a backbone (a table row of its own, beside the backbone): the backbone and its options."""
    backbone: str                            # the registered backbone it varies
    options: dict[str, Any] = field(default_factory=dict)   # its options (as backbone_options)


SEARCH_ALGORITHMS = ("grid", "random", "tpe")
# the label-free signals a search can optimise (TPE) and the selection protocols pick by: trial metric -> whether
# higher is better (orchestrator/config/search.py says what each is; workloads/selection.py computes them)
SURROGATES = {"pred_entropy": False, "hub_skewness": False, "snd": True, "uniformity_adapted": True,
              "modality_gap_adapted": False, "source_R1": True}


@dataclass
class SearchSpec:
    """Hyperparameter search: per method, options (and `steps`) as lists or distributions; each sampled
    configuration runs as its own trial in every cell and seed, beside the grid's own configuration, and the
    selection tables pick one per cell by test R@1 (the oracle, an upper bound) or by a label-free signal."""
    # method or variant of the grid -> option -> a list of values, or {uniform | loguniform | randint: [low, high]}
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)
    algorithm: str = opt("random", choices=SEARCH_ALGORITHMS)   # grid: every combination of the lists
    budget: int = opt(8, min=1)              # configurations per (method, cell, seed), the grid's own not counted
    seed: int = opt(0, min=0)                # the sampler's seed (configurations are drawn when the grid is planned)
    # tpe only: the signal Optuna's TPE maximises (a label-free one: see SURROGATES; R1 is the oracle)
    objective: str = opt("source_R1", choices=(*SURROGATES, "R1"))
    # clean pairs of the source train split each trial retrieves after adapting ("source accuracy"); 0: none
    source_pairs: int = opt(128, min=0)


# Ray Tune trials per `Tuner.fit` (None: all of a submission in one). Tune keeps a `Trial` object per trial on the
# driver until its `fit` ends; a number splits a submission into waves, which bounds that at the cost of a barrier
# and fresh trial actors at each wave's end (orchestrator/run/tune.py "Waves").
TRIALS_PER_WAVE: int | None = None


@dataclass
class RuntimeSpec:
    """How each trial runs and how the trials share the cluster."""
    batch_size: int = opt(16, min=1)         # queries per online stream batch
    steps: int = opt(3, min=1)               # adaptation steps per batch
    num_frames: int = opt(12, min=1, max=128)   # frames per clip (uniform rule; the papers use 12)
    resolution: int | None = opt(None, min=16)    # None: the model's input size
    precision: str = opt("fp32", choices=("fp32", "bf16"))   # trial compute
    hub_k: int = opt(10, min=1)              # at most the gallery size (checked by the plan)
    cpus_per_trial: float = opt(1.0, above=0)   # CPUs each trial asks Ray for (its torch threads)
    # GPUs each trial asks for, at most 1 (a trial computes on one device); fractions share a GPU and its
    # throughput (docs/cluster.md)
    gpus_per_trial: float = opt(0.0, min=0, max=1)
    max_failures: int = opt(1, min=0)        # Tune retries of a trial that crashed its worker
    max_concurrent_trials: int | None = opt(None, min=1)   # None: as many as the cluster's resources allow
    # trials per Ray Tune experiment (orchestrator/run/tune.py "Waves"; None: all in one, the default)
    trials_per_wave: int | None = opt(TRIALS_PER_WAVE, min=1)
    render_actors: int | None = opt(None, min=1)   # render tasks at once (Ray Data; None: the CPUs the trials leave)
    save_scores: bool = True                 # keep each trial's score matrix (fp16) for re-analysis
    # the order of the query stream: the authors' (annotation order) or shuffled by each trial's seed
    stream_order: str = opt("authors", choices=("authors", "shuffled"))


# the batch sizes a protocol may run at (the paper's 16; the small batches of the classification benchmarks)
BATCH_SIZES = (1, 4, 16, 64)


@dataclass
class ProtocolSpec:
    """One stream protocol of the query-shift trials (`query_shift.protocols`; docs/protocols.md): each entry
    multiplies the trials. A bare name is an entry with its defaults."""
    name: str = "reset_each_shift"           # a registered protocol (workloads/protocols)
    batch_size: int | None = opt(None, choices=BATCH_SIZES)   # None: runtime.batch_size
    # a multi-segment protocol's (perturbation, severity) sequence; None: its default (docs/protocols.md)
    segments: list[list[Any]] | None = None
    options: dict[str, Any] = field(default_factory=dict)   # the protocol's own (alpha, k, epochs, ...)


def protocol_entry(value: Any, where: str) -> ProtocolSpec:
    """A `query_shift.protocols` entry (a name or a mapping) as a checked ProtocolSpec: a registered name, options
    in range, segments only for a multi-segment protocol, each a [perturbation, severity] pair. The perturbations'
    names and which methods a batch size refuses are checked by the scenario, which knows them."""
    from workloads.protocols import PROTOCOLS

    spec = build(ProtocolSpec, {"name": value} if isinstance(value, str) else value, where)
    if spec.name not in PROTOCOLS:
        raise GridError(f"{where}.name: unknown protocol {spec.name!r}{did_you_mean(spec.name, PROTOCOLS.names())}; "
                        f"known protocols: {', '.join(PROTOCOLS.names())}")
    cls = PROTOCOLS.lookup(spec.name)
    try:
        cls.validate_options(spec.options)   # kept as given: a trial's key names only the options set
    except OptionError as err:
        raise GridError(f"{where}.options: {err}") from None
    if spec.segments is not None:
        if not cls.multi_segment:
            raise GridError(f"{where}.segments: protocol {spec.name!r} runs one cell per trial; segments are for "
                            "continual, gradual and mixed_domains")
        for i, seg in enumerate(spec.segments):
            if len(seg) != 2 or not isinstance(seg[0], str) or isinstance(seg[1], bool) or not isinstance(seg[1], int):
                raise GridError(f"{where}.segments[{i}]: expected [perturbation, severity], got {seg!r}")
        if not spec.segments:
            raise GridError(f"{where}.segments: list at least one segment, or leave the key out for the default")
    return spec


@dataclass
class GridSpec:
    name: str                                # results go to results/<name>/, MLflow experiment mlvp/<name>
    datasets: dict[str, DatasetEntry]        # every dataset the grid uses, by registered name
    backbones: list[str]                     # registered backbones (clip4clip, xpool, ...) and backbone variants
    methods: list[str]                       # registered methods and variant names: the tables' rows
    description: str = ""                    # free text
    seed: int = opt(0, min=0)                # perturbation draws and every random choice of a method
    # seeds as an axis: every trial once per seed (perturbation draws, a method's random choices, a shuffled
    # stream); empty: [seed]. Checkpoints are fine-tuned once, with `seed`
    seeds: list[int] = field(default_factory=list)
    faithful: bool = True                    # reproduce the authors' code (false: the papers' behaviour)
    # per-method options (every method: lr, weight_decay, temperature; plus its own, checked when the grid loads)
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    variants: dict[str, VariantSpec] = field(default_factory=dict)   # named method variants: ablation rows
    # per-backbone options (the Options its head declares: TCD's ocr, engine, cycle_weight, ...; checked when the
    # grid loads); they reach its fine-tune, its galleries and its trials' keys
    backbone_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    # named backbone variants, listed in `backbones` by name: a backbone again with other options (TCD without OCR
    # beside TCD), a row of its own in every table
    backbone_variants: dict[str, BackboneVariantSpec] = field(default_factory=dict)
    models: ModelsSpec = field(default_factory=ModelsSpec)           # CLIP weights, checkpoints, fine-tuning
    assets: AssetsSpec = field(default_factory=AssetsSpec)           # perturbation assets (local paths)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)        # trial and scheduling knobs
    # hyperparameter search per method and label-free selection (orchestrator/config/search.py)
    search: SearchSpec | None = None
    # the scenario sections present (query_shift, query_gallery_shift.cross_dataset, ...), in registry order
    scenarios: dict[str, Any] = field(default_factory=dict)
    source: str = ""                         # the file it came from (set by load_grid)

    @property
    def trial_seeds(self) -> list[int]:
        """The seeds every trial runs at: `seeds`, else [`seed`]."""
        return list(self.seeds) or [self.seed]

    @property
    def query_shift(self):
        """The query-shift section's config (None when the grid has none)."""
        qs = self.scenarios.get("query_shift")
        return qs.config if qs is not None else None


# -- generic validation ----------------------------------------------------------------------------------------
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false"}


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_type_name(typing.get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a mapping"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return _TYPE_NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def _convert(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        real = [a for a in args if a is not type(None)]
        if len(real) == 1 and dataclasses.is_dataclass(real[0]):   # a section or null: its own error names the key
            return _convert(value, real[0], where)
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, where)
            except GridError:
                pass
        raise GridError(f"{where}: expected {_type_name(tp)}, got {short_repr(value)}")
    if dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise GridError(f"{where}: expected {_type_name(tp)}, got {short_repr(value)}")
        (item,) = typing.get_args(tp)
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise GridError(f"{where}: expected a mapping, got {short_repr(value)}")
        kt, vt = typing.get_args(tp)
        return {_convert(k, kt, where): _convert(v, vt, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise GridError(f"{where}: expected true/false, got {short_repr(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise GridError(f"{where}: expected an integer, got {short_repr(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GridError(f"{where}: expected a number, got {short_repr(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise GridError(f"{where}: expected a string, got {short_repr(value)}")
        return value
    raise TypeError(f"unsupported schema type {tp!r}")


def build(cls: type, data: Any, where: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise GridError(f"{where or 'grid'}: expected a mapping, got {short_repr(data)}")
    hints = typing.get_type_hints(cls)
    flds = {f.name: f for f in dataclasses.fields(cls) if f.name not in ("source", "scenarios")}
    unknown = [k for k in data if k not in flds]
    if unknown:
        raise GridError(f"{_join(where, unknown[0])}: unknown key{did_you_mean(unknown[0], flds)}; allowed keys: "
                        f"{', '.join(flds)}")
    kwargs = {}
    for name, f in flds.items():
        if name in data:
            value = _convert(data[name], hints[name], _join(where, name))
            rule = f.metadata.get("rule")
            if rule and value is not None:
                _check_rule(_join(where, name), value, rule)
            kwargs[name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise GridError(f"{_join(where, name)}: required key is missing")
    return cls(**kwargs)


def _check_rule(where: str, value: Any, rule: dict[str, Any]) -> None:
    try:
        Option(type(value), **rule).check(where, value)
    except OptionError as err:
        raise GridError(str(err)) from None


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


