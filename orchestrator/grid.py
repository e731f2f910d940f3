"""Grid files: YAML validated into typed dataclasses before anything runs.

Every key is checked: unknown keys, wrong types and unknown names (datasets, backbones, methods, perturbations)
fail with one line naming the key, the bad value and the allowed values. See README "Grid file format".
"""
from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class GridError(ValueError):
    """A grid file is invalid; the message is one line: where, what, and what is allowed."""


# -- names the grid may use (imported lazily: listing them must not start torch) -------------------------------
def known_datasets() -> list[str]:
    from workloads.datasets import DATASETS

    return list(DATASETS.names())


def known_backbones() -> list[str]:
    from workloads.backbones import BACKBONES

    return list(BACKBONES.names())


def known_methods() -> list[str]:
    from workloads.methods import METHODS

    return list(METHODS.names())


def known_video_perturbations() -> list[str]:
    from workloads.perturbations.video import VIDEO_PERTURBATIONS

    return list(VIDEO_PERTURBATIONS.names())


def known_text_perturbations() -> list[str]:
    from workloads.perturbations.text import TEXT_PERTURBATIONS

    return list(TEXT_PERTURBATIONS.names())


def scenario_classes() -> dict[str, type]:
    from orchestrator.scenarios import SCENARIOS

    return {name: SCENARIOS.lookup(name) for name in SCENARIOS.names()}


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
    steps: int = opt(500, min=1)
    batch_size: int = opt(64, min=2)         # contrastive: a batch of one has no negatives
    lr: float = opt(1e-3, above=0)
    weight_decay: float = opt(0.2, min=0)
    train_frames: int = opt(16, min=1)       # frames decoded per train video (uniform rule)
    frames_per_clip: int = opt(4, min=1)     # of those, random frames per clip per training step
    precision: str = opt("auto", choices=("fp32", "bf16", "auto"))   # auto: bf16 where the device has it natively
    xpool_init_from_clip4clip: bool = True   # start X-Pool from the fine-tuned mean-pooling model (faster)
    xpool_steps: int | None = opt(150, min=1)  # steps for X-Pool when initialised from clip4clip (None: steps)


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
    clip_model: str = "mlvp-tiny"            # open_clip config name (mlvp-tiny, mlvp-micro, ViT-B-32, ...)
    pretrained: str | None = None            # CLIP weights (local file): fine-tuning start and zero-shot model
    checkpoints: dict[str, dict[str, str]] = field(default_factory=dict)  # backbone -> dataset -> checkpoint
    finetune: FinetuneSpec = field(default_factory=FinetuneSpec)
    zero_shot_pretrain: PretrainSpec | None = None   # without `pretrained`: pretrain the zero-shot CLIP here


@dataclass
class VariantSpec:
    """A named variant of a method (an ablation row): the method, its options, and optionally its own `faithful`."""
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    faithful: bool | None = None             # None: the grid's `faithful`


# Ray Tune trials per `Tuner.fit` (None: all of a submission in one). Tune keeps a `Trial` object per trial on the
# driver until its `fit` ends; RecordingScheduler drops the finished ones as it goes (orchestrator/tune.py
# `_drop_finished`), so one `fit` keeps the driver flat (+32 MB at 4,270 trials) and no wave boundary (a cold start
# of the trial actors) is paid (benchmarks/RESULTS.md section 15). A number still splits a submission into waves.
TRIALS_PER_WAVE: int | None = None

@dataclass
class RuntimeSpec:
    batch_size: int = opt(16, min=1)
    steps: int = opt(3, min=1)
    num_frames: int = opt(12, min=1)
    resolution: int | None = opt(None, min=16)    # None: the model's input size
    precision: str = opt("fp32", choices=("fp32", "bf16"))   # trial compute
    hub_k: int = opt(10, min=1)              # at most the gallery size (checked by the plan)
    cpus_per_trial: float = opt(1.0, above=0)
    # at most 1: a trial computes on one device (workloads/trial.py); fractions share a GPU, and its throughput
    # (benchmarks/RESULTS.md section 6)
    gpus_per_trial: float = opt(0.0, min=0, max=1)
    max_failures: int = opt(1, min=0)        # Tune retries of a trial that crashed its worker
    max_concurrent_trials: int | None = opt(None, min=1)
    # trials per Ray Tune experiment (orchestrator/tune.py "Waves"; None: all in one, the default)
    trials_per_wave: int | None = opt(TRIALS_PER_WAVE, min=1)
    render_actors: int | None = opt(None, min=1)   # Ray Data actor pool size (None: one per CPU)
    save_scores: bool = True                 # keep each trial's score matrix (fp16) for re-analysis


@dataclass
class GridSpec:
    name: str
    datasets: dict[str, DatasetEntry]
    backbones: list[str]
    methods: list[str]
    description: str = ""
    seed: int = opt(0, min=0)
    faithful: bool = True
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    variants: dict[str, VariantSpec] = field(default_factory=dict)
    models: ModelsSpec = field(default_factory=ModelsSpec)
    assets: AssetsSpec = field(default_factory=AssetsSpec)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    # the scenario sections present (query_shift, query_gallery_shift.cross_dataset, ...), in registry order
    scenarios: dict[str, Any] = field(default_factory=dict)
    source: str = ""                         # the file it came from (set by load_grid)

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
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, where)
            except GridError:
                pass
        raise GridError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise GridError(f"{where}: expected {_type_name(tp)}, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise GridError(f"{where}: expected a mapping, got {value!r}")
        kt, vt = typing.get_args(tp)
        return {_convert(k, kt, where): _convert(v, vt, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise GridError(f"{where}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise GridError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GridError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise GridError(f"{where}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported schema type {tp!r}")


def _build(cls: type, data: Any, where: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise GridError(f"{where or 'grid'}: expected a mapping, got {data!r}")
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
    from workloads.options import Option, OptionError

    try:
        Option(type(value), **rule).check(where, value)
    except OptionError as err:
        raise GridError(str(err)) from None


def did_you_mean(word: str, candidates) -> str:
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def check_names(where: str, values: list, allowed: list, what: str) -> None:
    """Every value is one of `allowed` and none repeats; else a one-line GridError with a did-you-mean."""
    for i, v in enumerate(values):
        if v not in allowed:
            raise GridError(f"{where}[{i}]: unknown {what} {v!r}{did_you_mean(v, allowed)}; allowed: "
                            f"{', '.join(map(str, allowed))}")
    dupes = sorted({v for v in values if values.count(v) > 1}, key=str)
    if dupes:
        raise GridError(f"{where}: duplicate {what} {dupes[0]!r}")


def _check_choice(where: str, value: Any, allowed: list) -> None:
    if value not in allowed:
        raise GridError(f"{where}: {value!r} is not allowed{did_you_mean(value, allowed)}; allowed: "
                        f"{', '.join(map(str, allowed))}")


# -- scenario sections ------------------------------------------------------------------------------------------
def _sections() -> dict[str, dict[str | None, type]]:
    """Grid key -> {child key (None for a single-scenario section): scenario class}, from the scenario registry."""
    out: dict[str, dict[str | None, type]] = {}
    for cls in scenario_classes().values():
        root, _, child = cls.section.partition(".")
        out.setdefault(root, {})[child or None] = cls
    return out


def _build_scenarios(data: dict, sections: dict[str, dict[str | None, type]]) -> dict[str, Any]:
    """Scenario instances for the sections present. A grouped section (query_gallery_shift) holds one sub-mapping
    per scenario plus shared keys that apply to every scenario of the group that takes them (directions)."""
    built: dict[str, Any] = {}
    for root, children in sections.items():
        if root not in data:
            continue
        if None in children:
            cls = children[None]
            built[cls.name] = cls(_build(cls.Config, data[root], root))
            continue
        section = data[root] or {}
        if not isinstance(section, dict):
            raise GridError(f"{root}: expected a mapping, got {section!r}")
        fields_of = {c: {f.name for f in dataclasses.fields(cls.Config)} for c, cls in children.items()}
        shared_ok = set().union(*fields_of.values())
        for key in section:
            if key not in children and key not in shared_ok:
                allowed = [*children, *sorted(shared_ok)]
                raise GridError(f"{root}.{key}: unknown key{did_you_mean(key, allowed)}; allowed keys: "
                                f"{', '.join(allowed)}")
        present = [c for c in children if c in section]
        if not present:
            raise GridError(f"{root}: name at least one of {', '.join(children)}")
        shared = {k: v for k, v in section.items() if k not in children}
        for child in present:
            cls = children[child]
            own = section[child] or {}
            if not isinstance(own, dict):
                raise GridError(f"{root}.{child}: expected a mapping, got {own!r}")
            merged = {**{k: v for k, v in shared.items() if k in fields_of[child]}, **own}
            built[cls.name] = cls(_build(cls.Config, merged, f"{root}.{child}"))
    order = list(scenario_classes())
    return dict(sorted(built.items(), key=lambda kv: order.index(kv[0])))


def _build_grid(data: Any) -> GridSpec:
    if not isinstance(data, dict):
        raise GridError(f"grid: expected a mapping of keys (name, datasets, ...), got {data!r}")
    sections = _sections()
    static = [f.name for f in dataclasses.fields(GridSpec) if f.name not in ("source", "scenarios")]
    unknown = [k for k in data if k not in static and k not in sections]
    if unknown:
        allowed = [*static, *sections]
        raise GridError(f"{unknown[0]}: unknown key{did_you_mean(unknown[0], allowed)}; allowed keys: "
                        f"{', '.join(allowed)}")
    grid = _build(GridSpec, {k: v for k, v in data.items() if k in static}, "")
    grid.scenarios = _build_scenarios(data, sections)
    if not grid.scenarios:
        raise GridError(f"grid: no scenario: add one of {', '.join(sections)}")
    return grid


def validate(grid: GridSpec) -> GridSpec:
    """Name and range checks that need the registries or several keys at once."""
    if not grid.name or not all(c.isalnum() or c in "-_." for c in grid.name):
        raise GridError(f"name: {grid.name!r} must be non-empty letters, digits, '-', '_' or '.' (it names a folder)")
    check_names("datasets", list(grid.datasets), known_datasets(), "dataset")
    check_names("backbones", grid.backbones, known_backbones(), "backbone")
    methods = known_methods()
    for name, v in grid.variants.items():
        if name in methods:
            raise GridError(f"variants.{name}: a variant cannot take a method's name; methods: {', '.join(methods)}")
        _check_choice(f"variants.{name}.method", v.method, methods)
        _check_method_options(f"variants.{name}.options", v.method, v.options,
                              grid.faithful if v.faithful is None else v.faithful)
    check_names("methods", grid.methods, methods + list(grid.variants), "method or variant")
    if not grid.backbones:
        raise GridError("backbones: list at least one backbone")
    if not grid.methods:
        raise GridError("methods: list at least one method")
    for m, options in grid.method_options.items():
        if m not in grid.methods or m in grid.variants:
            raise GridError(f"method_options.{m}: not a method of this grid (variants carry their own options); "
                            f"grid methods: {', '.join(grid.methods)}")
        _check_method_options(f"method_options.{m}", m, options, grid.faithful)
    for scenario in grid.scenarios.values():
        scenario.check(grid)
    ft = grid.models.finetune
    if ft.frames_per_clip > ft.train_frames:
        raise GridError(f"models.finetune.frames_per_clip: must be between 1 and train_frames ({ft.train_frames}), "
                        f"got {ft.frames_per_clip}")
    pre = grid.models.zero_shot_pretrain
    if pre is not None:
        _check_choice("models.zero_shot_pretrain.dataset", pre.dataset, known_datasets())
        from workloads.datasets import DATASETS
        from workloads.datasets.base import DatasetError

        try:
            DATASETS.lookup(pre.dataset).check_options(pre.options)
        except DatasetError as err:
            raise GridError(f"models.zero_shot_pretrain.options: {err}") from None
    for backbone, by_ds in grid.models.checkpoints.items():
        check_names("models.checkpoints", [backbone], grid.backbones, "backbone of this grid")
        for ds, path in by_ds.items():
            check_names(f"models.checkpoints.{backbone}", [ds], list(grid.datasets), "dataset of this grid")
            _check_weights(f"models.checkpoints.{backbone}.{ds}", path, "checkpoint")
    if grid.models.pretrained is not None:
        _check_weights("models.pretrained", grid.models.pretrained, "weights")
    from workloads.datasets import DATASETS
    from workloads.datasets.base import DatasetError

    for name, entry in grid.datasets.items():
        try:  # option names, kinds and ranges, before any file is read
            DATASETS.lookup(name).check_options(entry.options)
        except DatasetError as err:
            raise GridError(f"datasets.{name}.options: {err}") from None
        if entry.root is not None and not Path(entry.root).expanduser().is_dir() and not _tolerate(
                f"datasets.{name}.root", entry.root, f"directory not found: put {name} there or set "
                f"datasets.{name}.root"):
            raise GridError(f"datasets.{name}.root: directory not found: {entry.root}")
        _check_path(f"datasets.{name}.assets.main_objects", entry.assets.main_objects, "file")
        _check_path(f"datasets.{name}.assets.distractor_pool", entry.assets.distractor_pool, "dir")
    a = grid.assets
    for key, kind in (("adain_vgg", "file"), ("adain_decoder", "file"), ("style_images", "any"),
                      ("distractor_pool", "dir"), ("wordnet", "dir"), ("sentence_encoder", "dir"),
                      ("styleformer_models", "dir")):
        _check_path(f"assets.{key}", getattr(a, key), kind)
    if a.back_translation_models is not None:
        if len(a.back_translation_models) != 2:
            raise GridError("assets.back_translation_models: give two folders, [en->de, de->en], got "
                            f"{a.back_translation_models!r}")
        for i, folder in enumerate(a.back_translation_models):
            _check_path(f"assets.back_translation_models[{i}]", folder, "dir")
    for name, entry in grid.datasets.items():
        for pert, path in entry.assets.text_precomputed.items():
            check_names(f"datasets.{name}.assets.text_precomputed", [pert], known_text_perturbations(),
                        "text perturbation")
            _check_path(f"datasets.{name}.assets.text_precomputed.{pert}", path, "file")
    if (a.adain_vgg is None) != (a.adain_decoder is None):
        raise GridError("assets: give both adain_vgg and adain_decoder (the AdaIN encoder and decoder) or neither")
    return grid


def _check_method_options(where: str, method: str, options: dict[str, Any], faithful: bool) -> None:
    from workloads.methods import METHODS

    try:
        METHODS.lookup(method).validate_options(options, faithful)
    except ValueError as err:
        raise GridError(f"{where}: {err}") from None


def _check_path(where: str, path: str | None, kind: str) -> None:
    if path is None:
        return
    p = Path(path).expanduser()
    ok = p.is_file() if kind == "file" else p.is_dir() if kind == "dir" else p.exists()
    if not ok:
        what = {"file": "file", "dir": "directory", "any": "path"}[kind]
        if _tolerate(where, path, f"{what} not found: put it there or set {where}"):
            return
        raise GridError(f"{where}: {what} not found: {path} (assets are local paths; nothing is downloaded)")


_ENV_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


@dataclass(frozen=True)
class MissingPath:
    """A path the grid names that is not on disk (or an unset variable in it), collected instead of raised when the
    grid is loaded to be sized before the data is there (`load_grid(..., missing=[])`, orchestrator/plan.py)."""

    key: str      # the grid key, e.g. datasets.msrvtt.root
    path: str     # as written after expansion (an unset ${VAR} is kept)
    fix: str      # what to set or put there

    def line(self) -> str:
        return f"{self.key}: {self.path} ({self.fix})"


_missing: list[MissingPath] | None = None   # set while load_grid(..., missing=[...]) runs


def _tolerate(key: str, path: str, fix: str) -> bool:
    """Record a missing path when the grid is loaded for sizing (True); otherwise False (the caller raises)."""
    if _missing is None:
        return False
    if not any(m.key == key for m in _missing):
        _missing.append(MissingPath(key, path, fix))
    return True


def expand_path(where: str, value: str | None) -> str | None:
    """`${VAR}` and `${VAR:-default}` in a path are replaced from the environment (one grid serves every machine:
    `root: ${MLVP_DATA}/MSRVTT`); an unset variable without a default is an error naming it."""
    if value is None:
        return None

    def sub(m: re.Match) -> str:
        env = os.environ.get(m["name"])
        if env is not None:
            return env
        if m["default"] is not None:
            return m["default"]
        if _tolerate(where, value, f"{m['name']} is not set: export {m['name']}=/path, or write {where} out"):
            return m.group(0)
        raise GridError(f"{where}: environment variable {m['name']} is not set (in {value!r}); export it, e.g. "
                        f"export {m['name']}=/path, or write the path out")

    return _ENV_VAR.sub(sub, value)


def _expand_paths(grid: GridSpec) -> None:
    for name, entry in grid.datasets.items():
        entry.root = expand_path(f"datasets.{name}.root", entry.root)
        for key in ("main_objects", "distractor_pool"):
            setattr(entry.assets, key, expand_path(f"datasets.{name}.assets.{key}", getattr(entry.assets, key)))
        pre = entry.assets.text_precomputed
        for pert in pre:
            pre[pert] = expand_path(f"datasets.{name}.assets.text_precomputed.{pert}", pre[pert])
    grid.models.pretrained = expand_path("models.pretrained", grid.models.pretrained)
    for backbone, by_ds in grid.models.checkpoints.items():
        for ds in by_ds:
            by_ds[ds] = expand_path(f"models.checkpoints.{backbone}.{ds}", by_ds[ds])
    for f in dataclasses.fields(AssetsSpec):
        value = getattr(grid.assets, f.name)
        if isinstance(value, list):
            setattr(grid.assets, f.name, [expand_path(f"assets.{f.name}[{i}]", v) for i, v in enumerate(value)])
        else:
            setattr(grid.assets, f.name, expand_path(f"assets.{f.name}", value))


def parse_grid(data: Any, source: str = "<grid>") -> GridSpec:
    try:
        grid = _build_grid(data)
        grid.source = source
        _expand_paths(grid)
        return validate(grid)
    except GridError as err:
        raise GridError(f"{source}: {err}") from None


class _GridLoader(yaml.SafeLoader):
    """YAML with duplicate keys refused (the last one would silently win)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise GridError(f"line {key_node.start_mark.line + 1}, column {key_node.start_mark.column + 1}: "
                                f"duplicate key {key!r} (first at line {seen[key] + 1})")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _check_weights(key: str, path: str, what: str) -> None:
    """A weights file, or a Hugging Face CLIP folder (config.json + model.safetensors / pytorch_model.bin) or an
    open_clip hub folder (workloads/backbones/convert.py reads them)."""
    p = Path(path).expanduser()
    if p.is_dir():
        from workloads.backbones.convert import WeightsError, _folder_weights

        try:
            _folder_weights(p)
        except WeightsError as err:
            raise GridError(f"{key}: {err}") from None
    elif not p.is_file() and not _tolerate(key, path, f"{what} file not found: put it there or set {key}"):
        raise GridError(f"{key}: {what} file not found: {path} (a file, or a Hugging Face CLIP folder; weights are "
                        "local files, nothing is downloaded)")


def load_grid(path: str | Path, missing: list[MissingPath] | None = None) -> GridSpec:
    """Read and validate a grid. With `missing` (a list), paths that are not on disk and unset variables in them are
    appended to it instead of raised (every other check still raises): `plan` sizes a grid before the data is
    downloaded."""
    global _missing
    if missing is None:
        return _load_grid(path)
    _missing = missing
    try:
        return _load_grid(path)
    finally:
        _missing = None


def _load_grid(path: str | Path) -> GridSpec:
    p = Path(path)
    if not p.is_file():
        raise GridError(f"{path}: grid file not found")
    try:
        data = yaml.load(p.read_text(), Loader=_GridLoader)
    except GridError as err:
        raise GridError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise GridError(f"{path}: not valid YAML: {where}{problem}") from None
    return parse_grid(data, str(path))
