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

    return sorted(DATASETS)


def known_backbones() -> list[str]:
    from workloads.backbones import BACKBONES

    return sorted(BACKBONES)


def known_methods() -> list[str]:
    from workloads.methods import NAMES

    return list(NAMES)


def known_video_perturbations() -> list[str]:
    from workloads.perturbations.video import NAMES

    return list(NAMES)


# -- the schema ------------------------------------------------------------------------------------------------
@dataclass
class DatasetAssets:
    """Per-dataset perturbation assets (local paths)."""
    main_objects: str | None = None          # boxes JSON of the authors' get_main_objects.py (occlusion, captions)
    distractor_pool: str | None = None       # event-insertion pool for this dataset (overrides assets.distractor_pool)


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


@dataclass
class FinetuneSpec:
    """Source fine-tuning for checkpoints the grid does not supply (the embedded default trains mlvp-tiny)."""
    steps: int = 500
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.2
    train_frames: int = 16                   # frames decoded per train video (uniform rule)
    frames_per_clip: int = 4                 # of those, random frames per clip per training step
    precision: str = "auto"                  # fp32 | bf16 | auto (bf16 where the device has it natively)
    xpool_init_from_clip4clip: bool = True   # start X-Pool from the fine-tuned mean-pooling model (faster)
    xpool_steps: int | None = 150            # steps for X-Pool when initialised from clip4clip (None: steps)


@dataclass
class ModelsSpec:
    clip_model: str = "mlvp-tiny"            # open_clip config name (mlvp-tiny, mlvp-micro, ViT-B-32, ...)
    pretrained: str | None = None            # open_clip weights to start from (local file); None: random init
    checkpoints: dict[str, dict[str, str]] = field(default_factory=dict)  # backbone -> dataset -> checkpoint
    finetune: FinetuneSpec = field(default_factory=FinetuneSpec)


@dataclass
class QueryShiftSpec:
    datasets: list[str] = field(default_factory=list)
    directions: list[str] = field(default_factory=lambda: ["v2t"])
    perturbations: list[str] = field(default_factory=list)   # video perturbations: they shift v2t queries
    severities: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    clean: bool = True                       # add the unperturbed reference row


@dataclass
class VariantSpec:
    """A named variant of a method (an ablation row): the method, its options, and optionally its own `faithful`."""
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    faithful: bool | None = None             # None: the grid's `faithful`


@dataclass
class RuntimeSpec:
    batch_size: int = 16
    steps: int = 3
    num_frames: int = 12
    resolution: int | None = None            # None: the model's input size
    precision: str = "fp32"                  # trial compute: fp32 | bf16
    hub_k: int = 10
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0              # fractions pack several trials on one GPU
    max_failures: int = 1                    # Tune retries of a trial that crashed its worker
    max_concurrent_trials: int | None = None
    render_actors: int | None = None         # Ray Data actor pool size (None: one per CPU)
    save_scores: bool = True                 # keep each trial's score matrix (fp16) for re-analysis


@dataclass
class GridSpec:
    name: str
    datasets: dict[str, DatasetEntry]
    backbones: list[str]
    methods: list[str]
    query_shift: QueryShiftSpec
    description: str = ""
    seed: int = 0
    faithful: bool = True
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    variants: dict[str, VariantSpec] = field(default_factory=dict)
    models: ModelsSpec = field(default_factory=ModelsSpec)
    assets: AssetsSpec = field(default_factory=AssetsSpec)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    source: str = ""                         # the file it came from (set by load_grid)


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
    flds = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    unknown = [k for k in data if k not in flds]
    if unknown:
        raise GridError(f"{_join(where, unknown[0])}: unknown key; allowed keys: {', '.join(flds)}")
    kwargs = {}
    for name, f in flds.items():
        if name in data:
            kwargs[name] = _convert(data[name], hints[name], _join(where, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise GridError(f"{_join(where, name)}: required key is missing")
    return cls(**kwargs)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _check_names(where: str, values: list, allowed: list, what: str) -> None:
    for i, v in enumerate(values):
        if v not in allowed:
            raise GridError(f"{where}[{i}]: unknown {what} {v!r}; allowed: {', '.join(map(str, allowed))}")
    dupes = sorted({v for v in values if values.count(v) > 1})
    if dupes:
        raise GridError(f"{where}: duplicate {what} {dupes[0]!r}")


def _check_choice(where: str, value: Any, allowed: list) -> None:
    if value not in allowed:
        raise GridError(f"{where}: {value!r} is not allowed; allowed: {', '.join(map(str, allowed))}")


def validate(grid: GridSpec) -> GridSpec:
    """Name and range checks that need the registries."""
    if not grid.name or not all(c.isalnum() or c in "-_." for c in grid.name):
        raise GridError(f"name: {grid.name!r} must be non-empty letters, digits, '-', '_' or '.' (it names a folder)")
    _check_names("datasets", list(grid.datasets), known_datasets(), "dataset")
    _check_names("backbones", grid.backbones, known_backbones(), "backbone")
    methods = known_methods()
    for name, v in grid.variants.items():
        if name in methods:
            raise GridError(f"variants.{name}: a variant cannot take a method's name; methods: {', '.join(methods)}")
        _check_choice(f"variants.{name}.method", v.method, methods)
        _check_method_options(f"variants.{name}.options", v.method, v.options)
    _check_names("methods", grid.methods, methods + list(grid.variants), "method or variant")
    if not grid.backbones:
        raise GridError("backbones: list at least one backbone")
    if not grid.methods:
        raise GridError("methods: list at least one method")
    for m, options in grid.method_options.items():
        if m not in grid.methods or m in grid.variants:
            raise GridError(f"method_options.{m}: not a method of this grid (variants carry their own options); "
                            f"grid methods: {', '.join(grid.methods)}")
        _check_method_options(f"method_options.{m}", m, options)
    qs = grid.query_shift
    _check_names("query_shift.datasets", qs.datasets, list(grid.datasets), "dataset (declare it under datasets:)")
    _check_names("query_shift.directions", qs.directions, ["v2t", "t2v"], "direction")
    _check_names("query_shift.perturbations", qs.perturbations, known_video_perturbations(), "video perturbation")
    _check_names("query_shift.severities", qs.severities, [1, 2, 3, 4, 5], "severity")
    if qs.directions == ["t2v"] and qs.perturbations:
        raise GridError("query_shift.perturbations: video perturbations shift video queries (v2t); t2v queries are "
                        "text, and text perturbations are not implemented yet: add v2t to directions or list no "
                        "perturbations")
    if "t2v" in qs.directions and not qs.clean:
        raise GridError("query_shift.clean: t2v runs only the clean cell so far (no text perturbations yet): set "
                        "clean: true or drop t2v")
    if not qs.datasets:
        raise GridError("query_shift.datasets: list at least one dataset")
    if not qs.perturbations and not qs.clean:
        raise GridError("query_shift: no cells: list perturbations or set clean: true")
    if qs.perturbations and not qs.severities:
        raise GridError("query_shift.severities: list at least one severity for the perturbations")
    rt = grid.runtime
    _check_choice("runtime.precision", rt.precision, ["fp32", "bf16"])
    ft = grid.models.finetune
    _check_choice("models.finetune.precision", ft.precision, ["fp32", "bf16", "auto"])
    if not 1 <= ft.frames_per_clip <= ft.train_frames:
        raise GridError(f"models.finetune.frames_per_clip: must be between 1 and train_frames ({ft.train_frames}), "
                        f"got {ft.frames_per_clip}")
    for key in ("batch_size", "steps", "num_frames", "hub_k"):
        if getattr(rt, key) < 1:
            raise GridError(f"runtime.{key}: must be >= 1, got {getattr(rt, key)}")
    if rt.cpus_per_trial <= 0 or rt.gpus_per_trial < 0:
        raise GridError(f"runtime: cpus_per_trial must be > 0 and gpus_per_trial >= 0, got "
                        f"{rt.cpus_per_trial} / {rt.gpus_per_trial}")
    for backbone, by_ds in grid.models.checkpoints.items():
        _check_names("models.checkpoints", [backbone], grid.backbones, "backbone of this grid")
        for ds, path in by_ds.items():
            _check_names(f"models.checkpoints.{backbone}", [ds], list(grid.datasets), "dataset of this grid")
            if not Path(path).expanduser().is_file():
                raise GridError(f"models.checkpoints.{backbone}.{ds}: checkpoint file not found: {path}")
    if grid.models.pretrained is not None and not Path(grid.models.pretrained).expanduser().is_file():
        raise GridError(f"models.pretrained: weights file not found: {grid.models.pretrained} "
                        "(weights are local files; nothing is downloaded)")
    for name, entry in grid.datasets.items():
        if entry.root is not None and not Path(entry.root).expanduser().is_dir():
            raise GridError(f"datasets.{name}.root: directory not found: {entry.root}")
        _check_path(f"datasets.{name}.assets.main_objects", entry.assets.main_objects, "file")
        _check_path(f"datasets.{name}.assets.distractor_pool", entry.assets.distractor_pool, "dir")
    a = grid.assets
    for key, kind in (("adain_vgg", "file"), ("adain_decoder", "file"), ("style_images", "any"),
                      ("distractor_pool", "dir")):
        _check_path(f"assets.{key}", getattr(a, key), kind)
    if (a.adain_vgg is None) != (a.adain_decoder is None):
        raise GridError("assets: give both adain_vgg and adain_decoder (the AdaIN encoder and decoder) or neither")
    return grid


def _check_method_options(where: str, method: str, options: dict[str, Any]) -> None:
    from workloads.methods import METHODS

    try:
        METHODS[method].validate_options(options)
    except ValueError as err:
        raise GridError(f"{where}: {err}") from None


def _check_path(where: str, path: str | None, kind: str) -> None:
    if path is None:
        return
    p = Path(path).expanduser()
    ok = p.is_file() if kind == "file" else p.is_dir() if kind == "dir" else p.exists()
    if not ok:
        what = {"file": "file", "dir": "directory", "any": "path"}[kind]
        raise GridError(f"{where}: {what} not found: {path} (assets are local paths; nothing is downloaded)")


_ENV_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


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
        raise GridError(f"{where}: environment variable {m['name']} is not set (in {value!r}); export it, e.g. "
                        f"export {m['name']}=/path, or write the path out")

    return _ENV_VAR.sub(sub, value)


def _expand_paths(grid: GridSpec) -> None:
    for name, entry in grid.datasets.items():
        entry.root = expand_path(f"datasets.{name}.root", entry.root)
        for key in ("main_objects", "distractor_pool"):
            setattr(entry.assets, key, expand_path(f"datasets.{name}.assets.{key}", getattr(entry.assets, key)))
    grid.models.pretrained = expand_path("models.pretrained", grid.models.pretrained)
    for backbone, by_ds in grid.models.checkpoints.items():
        for ds in by_ds:
            by_ds[ds] = expand_path(f"models.checkpoints.{backbone}.{ds}", by_ds[ds])
    for f in dataclasses.fields(AssetsSpec):
        setattr(grid.assets, f.name, expand_path(f"assets.{f.name}", getattr(grid.assets, f.name)))


def parse_grid(data: Any, source: str = "<grid>") -> GridSpec:
    try:
        grid = _build(GridSpec, data, "")
        grid.source = source
        _expand_paths(grid)
        return validate(grid)
    except GridError as err:
        raise GridError(f"{source}: {err}") from None


def load_grid(path: str | Path) -> GridSpec:
    p = Path(path)
    if not p.is_file():
        raise GridError(f"{path}: grid file not found")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        raise GridError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    return parse_grid(data, str(path))
