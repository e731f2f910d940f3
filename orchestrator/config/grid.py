"""Grid files: YAML validated into typed dataclasses (orchestrator/config/schema.py) before anything runs.

Every key is checked: unknown keys, wrong types and unknown names (datasets, backbones, methods, perturbations)
fail with one line naming the key, the bad value and the allowed values (docs/grid_reference.md lists every key).
Names are read from the registries without importing their entries, so loading a grid imports no torch; only a
grid that gives options (method_options, variants, backbone_options, backbone_variants) imports the entries whose
declared options check them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from orchestrator.config.errors import GridError, MissingPath, check_choice, check_names, did_you_mean, short_repr
from orchestrator.config.names import known_backbones, known_datasets, known_methods, known_text_perturbations
from orchestrator.config.scenarios import SCENARIOS
from orchestrator.config.schema import AssetsSpec, GridSpec, build
from orchestrator.config.search import check_search, check_seeds
from orchestrator.config.shipped import grid_name_problem
from workloads.backbones import backbone_options
from workloads.backbones.configs import known_models, model_config, project_models, weights_file_problem
from workloads.datasets import DATASETS
from workloads.datasets.base import DatasetError
from workloads.methods import METHODS
from workloads.options import OptionError


def scenario_classes() -> dict[str, type]:

    return {name: SCENARIOS.lookup(name) for name in SCENARIOS.names()}


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
            built[cls.name] = cls(build(cls.Config, data[root], root))
            continue
        section = data[root] or {}
        if not isinstance(section, dict):
            raise GridError(f"{root}: expected a mapping, got {short_repr(section)}")
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
                raise GridError(f"{root}.{child}: expected a mapping, got {short_repr(own)}")
            merged = {**{k: v for k, v in shared.items() if k in fields_of[child]}, **own}
            built[cls.name] = cls(build(cls.Config, merged, f"{root}.{child}"))
    order = list(scenario_classes())
    return dict(sorted(built.items(), key=lambda kv: order.index(kv[0])))


def _build_grid(data: Any) -> GridSpec:
    if not isinstance(data, dict):
        raise GridError(f"grid: expected a mapping of keys (name, datasets, ...), got {short_repr(data)}")
    sections = _sections()
    static = [f.name for f in dataclasses.fields(GridSpec) if f.name not in ("source", "scenarios")]
    unknown = [k for k in data if k not in static and k not in sections]
    if unknown:
        allowed = [*static, *sections]
        raise GridError(f"{unknown[0]}: unknown key{did_you_mean(unknown[0], allowed)}; allowed keys: "
                        f"{', '.join(allowed)}")
    grid = build(GridSpec, {k: v for k, v in data.items() if k in static}, "")
    grid.scenarios = _build_scenarios(data, sections)
    if not grid.scenarios:
        raise GridError(f"grid: no scenario: add one of {', '.join(sections)}")
    return grid


def validate(grid: GridSpec, check: PathCheck | None = None) -> GridSpec:
    """Name and range checks that need the registries or several keys at once; `check`: how a path that is not on
    disk is treated (raised unless it records them: `PathCheck`)."""
    check = check or PathCheck()
    problem = grid_name_problem(grid.name)
    if problem:
        raise GridError(f"name: {short_repr(grid.name)}: {problem}")
    check_names("datasets", list(grid.datasets), known_datasets(), "dataset")
    _check_backbones(grid)
    methods = known_methods()
    for name, v in grid.variants.items():
        if name in methods:
            raise GridError(f"variants.{name}: a variant cannot take a method's name; methods: {', '.join(methods)}")
        check_choice(f"variants.{name}.method", v.method, methods)
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
    check_seeds(grid)
    check_search(grid)
    name = grid.models.clip_model
    # hub or folder names: open_clip's; a name longer than any config file's is none (and no file name can hold it)
    if "/" not in name and ":" not in name and (len(name) > 200 or model_config(name) is None):
        raise GridError(f"models.clip_model: unknown open_clip config {short_repr(name)}"
                        f"{did_you_mean(name, known_models())}; "
                        f"this project's: {', '.join(project_models())}; or one of open_clip's, e.g. "
                        f"ViT-B-32-quickgelu (OpenAI's ViT-B/32)")
    ft = grid.models.finetune
    if ft.frames_per_clip > ft.train_frames:
        raise GridError(f"models.finetune.frames_per_clip: must be between 1 and train_frames ({ft.train_frames}), "
                        f"got {ft.frames_per_clip}")
    pre = grid.models.zero_shot_pretrain
    if pre is not None:
        check_choice("models.zero_shot_pretrain.dataset", pre.dataset, known_datasets())
        try:
            DATASETS.lookup(pre.dataset).check_options(pre.options)
        except DatasetError as err:
            raise GridError(f"models.zero_shot_pretrain.options: {err}") from None
    for backbone, by_ds in grid.models.checkpoints.items():
        check_names("models.checkpoints", [backbone], grid.backbones, "backbone of this grid")
        for ds, path in by_ds.items():
            check_names(f"models.checkpoints.{backbone}", [ds], list(grid.datasets), "dataset of this grid")
            _check_weights(f"models.checkpoints.{backbone}.{ds}", path, "checkpoint", check)
    if grid.models.pretrained is not None:
        _check_weights("models.pretrained", grid.models.pretrained, "weights", check)
    for name, entry in grid.datasets.items():
        try:  # option names, kinds and ranges, before any file is read
            DATASETS.lookup(name).check_options(entry.options)
        except DatasetError as err:
            raise GridError(f"datasets.{name}.options: {err}") from None
        root = Path(entry.root).expanduser() if entry.root is not None else None
        if root is not None and root.is_file():
            raise GridError(f"datasets.{name}.root: {entry.root} is a file; give the folder that holds {name}")
        if root is not None and not root.is_dir() and not check.tolerate(
                f"datasets.{name}.root", entry.root, f"directory not found: put {name} there or set "
                f"datasets.{name}.root"):
            raise GridError(f"datasets.{name}.root: directory not found: {entry.root}")
        _check_path(f"datasets.{name}.assets.main_objects", entry.assets.main_objects, "file", check)
        _check_path(f"datasets.{name}.assets.distractor_pool", entry.assets.distractor_pool, "dir", check)
    a = grid.assets
    for key, kind in (("adain_vgg", "file"), ("adain_decoder", "file"), ("style_images", "any"),
                      ("distractor_pool", "dir"), ("wordnet", "dir"), ("sentence_encoder", "dir"),
                      ("styleformer_models", "dir")):
        _check_path(f"assets.{key}", getattr(a, key), kind, check)
    if a.back_translation_models is not None:
        if len(a.back_translation_models) != 2:
            raise GridError("assets.back_translation_models: give two folders, [en->de, de->en], got "
                            f"{short_repr(a.back_translation_models)}")
        for i, folder in enumerate(a.back_translation_models):
            _check_path(f"assets.back_translation_models[{i}]", folder, "dir", check)
    for name, entry in grid.datasets.items():
        for pert, path in entry.assets.text_precomputed.items():
            check_names(f"datasets.{name}.assets.text_precomputed", [pert], known_text_perturbations(),
                        "text perturbation")
            _check_path(f"datasets.{name}.assets.text_precomputed.{pert}", path, "file", check)
    if (a.adain_vgg is None) != (a.adain_decoder is None):
        raise GridError("assets: give both adain_vgg and adain_decoder (the AdaIN encoder and decoder) or neither")
    return grid


def _check_backbones(grid: GridSpec) -> None:
    """`backbones` names registered backbones and backbone variants, each configuration once; every variant and
    every entry of `backbone_options` is checked against the backbone's declared Options."""
    backbones = known_backbones()
    for name, v in grid.backbone_variants.items():
        if name in backbones:
            raise GridError(f"backbone_variants.{name}: a variant cannot take a backbone's name (its rows would read "
                            f"as the plain backbone); name it e.g. {name}_variant; backbones: {', '.join(backbones)}")
        check_choice(f"backbone_variants.{name}.backbone", v.backbone, backbones)
    what = "backbone or backbone variant" if grid.backbone_variants else "backbone"
    check_names("backbones", grid.backbones, backbones + list(grid.backbone_variants), what)
    for name in grid.backbone_variants:
        if name not in grid.backbones:
            raise GridError(f"backbone_variants.{name}: not listed in backbones; add it there to run it")
    for b in grid.backbone_options:
        if b not in grid.backbones or b in grid.backbone_variants:
            raise GridError(f"backbone_options.{b}: not a backbone of this grid (backbone variants carry their own "
                            f"options); grid backbones: {', '.join(grid.backbones)}")
    seen: dict[tuple[str, str], str] = {}
    for entry in grid.backbones:
        name, options, _ = backbone_entry(grid, entry)
        same = seen.setdefault((name, json.dumps(options, sort_keys=True)), entry)
        if same != entry:
            raise GridError(f"backbones: {same!r} and {entry!r} are the same configuration ({name} with "
                            f"{json.dumps(options) if options else 'its default options'}); drop one, or give one "
                            f"other options")


def backbone_entry(grid: GridSpec, entry: str) -> tuple[str, dict[str, Any], str]:
    """(registered backbone, canonical options, variant label or "") of one `backbones:` entry: a variant's backbone
    and options, else the backbone with its `backbone_options` (workloads/backbones `backbone_options`: checked,
    without the ones at their default). GridError naming the key for an option the backbone does not take."""
    if entry in grid.backbone_variants:
        v = grid.backbone_variants[entry]
        name, options, where, label = v.backbone, v.options, f"backbone_variants.{entry}.options", entry
    else:
        name, options, where, label = entry, grid.backbone_options.get(entry, {}), f"backbone_options.{entry}", ""
    try:
        return name, backbone_options(name, options), label
    except OptionError as err:
        raise GridError(f"{where}: {err}") from None


def _check_method_options(where: str, method: str, options: dict[str, Any], faithful: bool) -> None:
    try:
        METHODS.lookup(method).validate_options(options, faithful)
    except ValueError as err:
        raise GridError(f"{where}: {err}") from None


def _check_path(where: str, path: str | None, kind: str, check: PathCheck) -> None:
    if path is None:
        return
    p = Path(path).expanduser()
    ok = p.is_file() if kind == "file" else p.is_dir() if kind == "dir" else p.exists()
    if not ok:
        what = {"file": "file", "dir": "directory", "any": "path"}[kind]
        if check.tolerate(where, path, f"{what} not found: put it there or set {where}"):
            return
        raise GridError(f"{where}: {what} not found: {path} (assets are local paths; nothing is downloaded)")


_ENV_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


@dataclasses.dataclass(frozen=True)
class PathCheck:
    """How one grid load treats a path that is not on disk (or an unset variable in one): `missing` None, the
    caller raises; a list (sizing before the data is there: `load_grid(..., missing=[...])`), it is recorded there,
    once per key, and the load goes on. Passed to the checks that read paths, so no state outlives a load."""

    missing: list[MissingPath] | None = None

    def tolerate(self, key: str, path: str, fix: str) -> bool:
        """Record a missing path when the grid is loaded for sizing (True); otherwise False (the caller raises)."""
        if self.missing is None:
            return False
        if not any(m.key == key for m in self.missing):
            self.missing.append(MissingPath(key, path, fix))
        return True


def expand_path(where: str, value: str | None, check: PathCheck | None = None) -> str | None:
    """`${VAR}` and `${VAR:-default}` in a path are replaced from the environment (one grid serves every machine:
    `root: ${MLVP_DATA}/MSRVTT`); an unset variable without a default is an error naming it (recorded instead where
    `check` records missing paths)."""
    if value is None:
        return None
    check = check or PathCheck()

    def sub(m: re.Match) -> str:
        env = os.environ.get(m["name"])
        if env is not None:
            return env
        if m["default"] is not None:
            return m["default"]
        if check.tolerate(where, value, f"{m['name']} is not set: export {m['name']}=/path, or write {where} out"):
            return m.group(0)
        raise GridError(f"{where}: environment variable {m['name']} is not set (in {short_repr(value)}); export it, "
                        f"e.g. export {m['name']}=/path, or write the path out")

    return _ENV_VAR.sub(sub, value)


def _expand_paths(grid: GridSpec, check: PathCheck) -> None:
    for name, entry in grid.datasets.items():
        entry.root = expand_path(f"datasets.{name}.root", entry.root, check)
        for key in ("main_objects", "distractor_pool"):
            setattr(entry.assets, key, expand_path(f"datasets.{name}.assets.{key}", getattr(entry.assets, key),
                                                   check))
        pre = entry.assets.text_precomputed
        for pert in pre:
            pre[pert] = expand_path(f"datasets.{name}.assets.text_precomputed.{pert}", pre[pert], check)
    grid.models.pretrained = expand_path("models.pretrained", grid.models.pretrained, check)
    for backbone, by_ds in grid.models.checkpoints.items():
        for ds in by_ds:
            by_ds[ds] = expand_path(f"models.checkpoints.{backbone}.{ds}", by_ds[ds], check)
    for f in dataclasses.fields(AssetsSpec):
        value = getattr(grid.assets, f.name)
        if isinstance(value, list):
            setattr(grid.assets, f.name, [expand_path(f"assets.{f.name}[{i}]", v, check)
                                          for i, v in enumerate(value)])
        else:
            setattr(grid.assets, f.name, expand_path(f"assets.{f.name}", value, check))


def parse_grid(data: Any, source: str = "<grid>", check: PathCheck | None = None) -> GridSpec:
    """A grid from its parsed YAML, validated; `check`: how paths that are not on disk are treated (`PathCheck`:
    raised by default)."""
    check = check or PathCheck()
    try:
        grid = _build_grid(data)
        grid.source = source
        _expand_paths(grid, check)
        return validate(grid, check)
    except GridError as err:
        raise GridError(f"{source}: {err}") from None


# A grid is a few KB of YAML (the shipped ones: at most ~6 KB, a few hundred values). The bounds below refuse, in one
# line and before anything is built from it, a file that would take the loader's memory or time: YAML aliases (*a)
# repeat a node without copying it, so nine nested anchors of nine copies each make a 1 KB file of 387 million
# values, which validating or showing in an error message would expand (issue #47 item 3)
MAX_GRID_BYTES = 1 << 20            # the file itself
MAX_GRID_VALUES = 100_000           # its values, lists and mappings with every alias expanded


class _GridLoader(yaml.SafeLoader):
    """YAML with duplicate keys refused (the last one would silently win), and a document whose aliases expand it
    past MAX_GRID_VALUES refused after composing (which does not expand them) and before constructing."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_expanded_size(node)
        return node

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise GridError(f"line {key_node.start_mark.line + 1}, column {key_node.start_mark.column + 1}: "
                                f"duplicate key {short_repr(key)} (first at line {seen[key] + 1})")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _check_expanded_size(root: yaml.Node) -> None:
    """A GridError when `root` with every alias expanded holds more than MAX_GRID_VALUES nodes, or repeats itself
    (an alias inside its own anchor). Linear in the distinct nodes: an aliased node is the same object wherever it
    appears, so each one's expanded size is counted once (memoised by identity), never by expanding it."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    aliased = False

    def size(node: yaml.Node) -> int:
        nonlocal aliased
        key = id(node)
        if key in sizes:
            aliased = True
            return sizes[key]
        if key in open_nodes:
            raise GridError(f"line {node.start_mark.line + 1}: a YAML alias inside its own anchor repeats it without "
                            "end: write the value out")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_GRID_VALUES:
                break   # past the bound: the rest need not be counted
        open_nodes.discard(key)
        sizes[key] = total
        return total

    if size(root) > MAX_GRID_VALUES:
        what = "YAML aliases (*name) expand it to" if aliased else "it holds"
        raise GridError(f"{what} more than {MAX_GRID_VALUES:,} values, the limit of a grid file (the shipped grids "
                        "hold a few hundred)" + (": write the repeated parts out, or nest fewer anchors"
                                                 if aliased else ""))


def _check_weights(key: str, path: str, what: str, check: PathCheck) -> None:
    """A weights file, or a Hugging Face CLIP folder (config.json + model.safetensors / pytorch_model.bin) or an
    open_clip hub folder (workloads/backbones/convert.py reads them)."""
    p = Path(path).expanduser()
    if p.is_dir():
        # imports torch (seconds): only when weights are read
        from workloads.backbones.convert import WeightsError, _folder_weights

        try:
            _folder_weights(p)
        except WeightsError as err:
            raise GridError(f"{key}: {err}") from None
    elif not p.is_file() and not check.tolerate(key, path, f"{what} file not found: put it there or set {key}"):
        raise GridError(f"{key}: {what} file not found: {path} (a file, or a Hugging Face CLIP folder; weights are "
                        "local files, nothing is downloaded)")
    elif p.is_file() and (problem := weights_file_problem(p)):
        raise GridError(f"{key}: {path}: {problem}")


def load_grid(path: str | Path, missing: list[MissingPath] | None = None) -> GridSpec:
    """Read and validate a grid. With `missing` (a list), paths that are not on disk and unset variables in them are
    appended to it instead of raised (every other check still raises): `plan` sizes a grid before the data is
    downloaded."""
    return _load_grid(path, PathCheck(missing))


def _load_grid(path: str | Path, check: PathCheck) -> GridSpec:
    return parse_grid(read_yaml(path), str(path), check)


def read_yaml(path: str | Path) -> Any:
    """The data of a grid file, read within the bounds above (MAX_GRID_BYTES, MAX_GRID_VALUES, nesting) and with
    duplicate keys refused: a GridError in one line naming the file otherwise. Not yet a grid (`load_grid` checks
    that)."""
    p = Path(path)
    if p.is_dir():
        raise GridError(f"{path}: is a folder, not a grid file")
    if not p.is_file():
        raise GridError(f"{path}: grid file not found")
    if (n_bytes := p.stat().st_size) > MAX_GRID_BYTES:
        raise GridError(f"{path}: {n_bytes:,} bytes, more than a grid file may be ({MAX_GRID_BYTES:,} bytes; the "
                        "shipped grids are a few KB)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise GridError(f"{path}: not a text file (byte {err.start} is not UTF-8): a grid is a YAML file") from None
    try:
        data = yaml.load(text, Loader=_GridLoader)
    except GridError as err:
        raise GridError(f"{path}: {err}") from None
    except RecursionError:   # the composer recurses once per level
        raise GridError(f"{path}: lists or mappings nested too deeply for a grid (hundreds of levels)") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise GridError(f"{path}: not valid YAML: {where}{problem}") from None
    return data


