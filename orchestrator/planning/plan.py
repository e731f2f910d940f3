"""Planning: a validated grid -> trial specs, the checkpoints they need, and the clips to render.

Everything here is pure data and cheap: nothing trains, renders or starts Ray. Trial keys include the data and
model versions, computed without training (a fine-tuned checkpoint's key comes from its config and data version).
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from orchestrator.config.assets import needs_stand_in
from orchestrator.config.errors import GridError, MissingPath
from orchestrator.config.grid import backbone_entry, load_grid
from orchestrator.config.scenarios.base import PRETRAINED
from orchestrator.config.schema import GridSpec
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.search import SearchedConfig, recorded_tpe_trials, sampled_configs, searched_count
from orchestrator.planning.versions import TextSetJob, asset_version, file_version, text_assets_version
from workloads.backbones import model_config, ocr_engine
from workloads.backbones.finetune_config import FinetuneConfig, checkpoint_path
from workloads.datasets import create_dataset, missing_video_report
from workloads.datasets.synthetic import is_complete
from workloads.methods import METHODS
from workloads.mixing import Mix
from workloads.ocr import engine_version, missing_reason
from workloads.perturbations.video import get as perturbation_info
from workloads.seeding import digest
from workloads.spec import CLEAN, TrialSpec
from workloads.text_queries import TextSetKey


@dataclass
class DatasetPlan:
    name: str
    root: str | None
    options: dict
    unavailable: str | None = None   # sizing without the data: why its annotations cannot be read (None: readable)

    @cached_property
    def dataset(self):
        return create_dataset(self.name, root=self.root, **self.options)

    @cached_property
    def version(self) -> str:
        """Content key of the data. Generated datasets give it from their generator config (no generation
        needed); real ones from their annotation files."""
        if self.unavailable:   # a stand-in so trials still get (never-matching) keys: nothing of it has run
            return f"unknown:{self.name}"
        ds = self.dataset
        if hasattr(ds, "version"):
            return ds.version()
        train = None
        try:
            train = ds.train_split().fingerprint
        except Exception:  # datasets without a train split still have a version
            pass
        return digest([ds.test_split().fingerprint, train])

    @cached_property
    def test(self):
        return self.dataset.test_split()

    @property
    def on_disk(self) -> bool:
        """Whether its files are there: a generated dataset once generated (checked without generating), a real one
        whenever its annotations are readable."""
        location, config = getattr(self.dataset, "location", None), getattr(self.dataset, "config", None)
        if location is not None and config is not None:
            return is_complete(location, config)
        return not self.unavailable

    @property
    def size(self) -> int | None:
        """Test pairs (clips per render set, queries per trial); None when the annotations are not on disk. A generated
        dataset says it from its config, without being generated (`plan` writes nothing)."""
        if self.unavailable:
            return None
        planned = getattr(self.dataset, "planned_size", None)
        return planned("test") if planned is not None else len(self.test)


@dataclass
class ModelPlan:
    """One checkpoint: given as a file, fine-tuned here on a source dataset, or (zero-shot) CLIP weights never
    fine-tuned for retrieval: a given CLIP file or an image-text model pretrained here."""

    backbone: str                 # the registered backbone ("clip": the zero-shot CLIP)
    dataset: str                  # the source it stands for: a dataset name, or PRETRAINED
    clip_model: str
    given_path: str | None
    finetune: object | None       # workloads.backbones.finetune.FinetuneConfig (None: given file)
    train_dataset: str | None = None            # the dataset it is (to be) trained on
    init_from: CheckpointKey | None = None   # the model whose CLIP it starts from
    version: str = ""
    clip_only: bool = False       # only its CLIP weights are used; the pooling head starts at its initialisation
    label: str = ""               # the grid's name of it: a backbone variant's ("" = `backbone`)

    @property
    def name(self) -> str:
        """How the plan and its output name it: the variant's label, else the backbone."""
        return self.label or self.backbone

    def path(self, paths: Paths, data_version: str) -> Path:
        if self.given_path:
            return Path(self.given_path).expanduser().resolve()

        return checkpoint_path(self.finetune, self.train_dataset, data_version, paths.models)


class PlanError(GridError):
    """The grid is valid but cannot be planned (a checkpoint that can be neither found nor trained, ...)."""


@dataclass
class Plan:
    grid: GridSpec
    paths: Paths
    datasets: dict[str, DatasetPlan]          # targets, fine-tuning sources and the pretraining data
    # (backbone as the grid names it: a variant's label, source dataset or PRETRAINED) -> checkpoint
    models: dict[CheckpointKey, ModelPlan]
    trials: list[TrialSpec]
    # target dataset -> ordered (perturbation, severity) video renders needed (clean included when any trial needs it)
    renders: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    resolution: int = 0
    # (dataset, perturbation) -> version of the assets it renders with ("" for none): part of render/trial keys
    render_assets: dict[tuple[str, str], str] = field(default_factory=dict)
    # dataset -> (the checkpoint that embeds distractors or None for zero-shot weights, version, kind)
    embedders: dict[str, tuple[CheckpointKey | None, str, str]] = field(default_factory=dict)
    text_sets: list = field(default_factory=list)     # orchestrator.planning.versions.TextSetJob, one per t2v text cell
    notes: list[str] = field(default_factory=list)    # what the grid asks for that will not run here, and why
    # sizing without the data (`plan`, `submit --dry-run`): the paths the grid names that are not on disk; None when
    # the plan was built for a run (every path checked by the grid)
    missing: list[MissingPath] | None = None
    # target dataset -> the OCR engines whose entries its render sets need (the grid's OCR backbones': TCD with
    # `ocr: true`), written by the render stage beside the clips (workloads/render_cache.py `render_video(ocr=...)`)
    ocr_engines: dict[str, list[str]] = field(default_factory=dict)

    @property
    def seeds(self) -> list[int]:
        """The seeds every render set is rendered at and every trial runs at (the grid's `seeds`, else `seed`)."""
        return self.grid.trial_seeds

    def render_count(self) -> int:
        """Clips to render (datasets whose annotations are not on disk count 0: see clip_counts)."""
        return sum((self.datasets[d].size or 0) * len(r) for d, r in self.renders.items()) * len(self.seeds)

    def clip_counts(self) -> dict[str, int | None]:
        """Target dataset -> test pairs (clips per render set, queries per trial); None: unknown (no annotations)."""
        return {d: self.datasets[d].size for d in dict.fromkeys([*self.renders, *(t.dataset for t in self.trials)])}

    def gallery_encodings(self) -> list[tuple]:
        """The distinct gallery encodings the trials need: (backbone, model version, dataset, direction, frames,
        resolution, precision, backbone options), the fields of workloads/trial.py encode_gallery's cache key that
        vary in a plan."""
        return list(dict.fromkeys((t.backbone, t.model_version, t.dataset, t.direction, t.num_frames, t.resolution,
                                   t.precision, t.backbone_options) for t in self.trials))

    def model_path(self, key: CheckpointKey) -> Path:
        m = self.models[key]
        return m.path(self.paths, self.datasets[m.train_dataset].version if m.train_dataset else "")

    def summary(self) -> dict:
        by_scenario = Counter(t.scenario for t in self.trials)
        return {"grid": self.grid.name, "trials": len(self.trials), "render_jobs": self.render_count(),
                "text_sets": len(self.text_sets),
                "checkpoints": len({str(self.model_path(k)) for k in self.models}),
                "datasets": ",".join(self.datasets), **{f"trials_{k}": v for k, v in by_scenario.items()},
                **({"seeds": len(self.seeds)} if len(self.seeds) > 1 else {}),
                **({"trials_searched": searched_count(self)} if self.grid.search is not None else {})}


def _image_size(clip_model: str) -> int:
    cfg = model_config(clip_model)
    if cfg is None:
        raise ValueError(f"unknown open_clip model {clip_model!r}")
    size = cfg["vision_cfg"]["image_size"]
    return int(size[0] if isinstance(size, (list, tuple)) else size)


def _method_entry(grid: GridSpec, entry: str) -> tuple[str, dict, bool, str]:
    """(method, options, faithful, variant label) of one `methods:` entry."""
    if entry in grid.variants:
        v = grid.variants[entry]
        return v.method, dict(v.options), grid.faithful if v.faithful is None else v.faithful, entry
    return entry, dict(grid.method_options.get(entry, {})), grid.faithful, ""


def _dataset_plan(grid: GridSpec, paths: Paths, name: str, options: dict | None = None) -> DatasetPlan:
    entry = grid.datasets.get(name)
    root = entry.root if entry is not None and entry.root is not None else str(paths.datasets)
    return DatasetPlan(name, root, dict(options if options is not None else entry.options if entry else {}))


def _plan_models(grid: GridSpec, datasets: dict[str, DatasetPlan], sources: list[str], paths: Paths
                 ) -> dict[CheckpointKey, ModelPlan]:
    m, ft = grid.models, grid.models.finetune
    base_init = file_version(m.pretrained) if m.pretrained else ""
    models: dict[CheckpointKey, ModelPlan] = {}
    pretrained_model: ModelPlan | None = None
    # keyed by the grid's name of the backbone (a variant's label): each configuration its own checkpoint, whose key
    # holds its options (FinetuneConfig.pooling_kwargs); clip4clip first: an X-Pool fine-tune may start from it
    for entry in sorted(grid.backbones, key=lambda b: b != "clip4clip"):
        backbone, options, label = backbone_entry(grid, entry)
        for src in sources:
            if src == PRETRAINED:
                if pretrained_model is None:
                    pretrained_model = _pretrained_model(grid, datasets, paths)
                models[CheckpointKey(entry, src)] = pretrained_model
                continue
            given = m.checkpoints.get(entry, {}).get(src)
            if given:
                models[CheckpointKey(entry, src)] = ModelPlan(backbone, src, m.clip_model, given, None,
                                                              version=file_version(given), label=label)
                continue
            init, init_from, steps = base_init, None, ft.steps
            # the quick recipe's shortcut; a published trainer starts both backbones from CLIP
            if backbone == "xpool" and ft.recipe == "quick" and ft.xpool_init_from_clip4clip \
                    and CheckpointKey("clip4clip", src) in models:
                init_from = CheckpointKey("clip4clip", src)
                init = "model:" + models[init_from].version
                steps = ft.xpool_steps or ft.steps
            cfg = FinetuneConfig(backbone=backbone, clip_model=m.clip_model, init=init, steps=steps,
                                 batch_size=ft.batch_size, lr=ft.lr, weight_decay=ft.weight_decay,
                                 train_frames=ft.train_frames, frames_per_clip=ft.frames_per_clip,
                                 eval_frames=grid.runtime.num_frames, precision=ft.precision, seed=grid.seed,
                                 pooling_kwargs=dict(options), recipe=ft.recipe, epochs=ft.epochs,
                                 workers=ft.workers)
            models[CheckpointKey(entry, src)] = ModelPlan(
                backbone, src, m.clip_model, None, cfg, src, init_from,
                version="ft:" + cfg.key(src, datasets[src].version), label=label)
    return models


def _ocr_engines(grid: GridSpec, renders: dict[str, list]) -> dict[str, list[str]]:
    """Target dataset -> the OCR engines the grid's backbones read there (every backbone runs every cell, so every
    render set of a dataset needs each engine's entries); none for a grid without an OCR backbone or with OCR off."""
    engines = list(dict.fromkeys(e for e in (ocr_engine(*backbone_entry(grid, b)[:2]) for b in grid.backbones) if e))
    return {ds: list(engines) for ds in renders} if engines else {}


def ocr_notes(plan_engines: dict[str, list[str]]) -> list[str]:
    """One note per OCR engine the grid reads that cannot run here (its trials would fail)."""
    engines = dict.fromkeys(e for es in plan_engines.values() for e in es)
    return [f"OCR engine {e!r} cannot run here ({missing_reason(e)}): the render stage writes no OCR entries with "
            f"it and the trials of the backbones reading it fail" for e in engines if engine_version(e) is None]


def _pretrained_model(grid: GridSpec, datasets: dict[str, DatasetPlan], paths: Paths) -> ModelPlan:
    """The zero-shot model: the grid's CLIP weights file, else an image-text CLIP pretrained here on single frames of
    `models.zero_shot_pretrain.dataset` (its own caption style; never a video retrieval fine-tune)."""
    m = grid.models
    if m.pretrained:
        return ModelPlan("clip", PRETRAINED, m.clip_model, m.pretrained, None, version=file_version(m.pretrained),
                         clip_only=True)
    pre = m.zero_shot_pretrain
    if pre is None:  # the grid check names the key; this guards programmatic plans
        raise PlanError("zero-shot cells need models.pretrained or models.zero_shot_pretrain")
    datasets.setdefault(pre.dataset, _dataset_plan(grid, paths, pre.dataset, pre.options))
    cfg = FinetuneConfig(backbone="clip4clip", clip_model=m.clip_model, steps=pre.steps, batch_size=pre.batch_size,
                         lr=pre.lr, weight_decay=pre.weight_decay, train_frames=4, frames_per_clip=1,
                         eval_frames=grid.runtime.num_frames, precision=pre.precision, seed=grid.seed)
    return ModelPlan("clip", PRETRAINED, m.clip_model, None, cfg, pre.dataset,
                     version="pretrain:" + cfg.key(pre.dataset, datasets[pre.dataset].version), clip_only=True)


def build_plan(grid: GridSpec, paths: Paths, missing: list[MissingPath] | None = None) -> Plan:
    """The plan of a validated grid. With `missing` (sizing before the data is there: `plan_for_sizing`), datasets
    whose annotations cannot be read are planned with unknown clip counts and listed in it."""
    cells = [(scenario, cell) for scenario in grid.scenarios.values() for cell in scenario.cells(grid)]
    datasets: dict[str, DatasetPlan] = {}
    for _, cell in cells:
        for name in (cell.dataset, cell.source):
            if name != PRETRAINED and name not in datasets:
                datasets[name] = _dataset_plan(grid, paths, name)
                if missing is not None:
                    _check_readable(grid, datasets[name], missing)
    sources = list(dict.fromkeys(cell.source for _, cell in cells))
    models = _plan_models(grid, datasets, sources, paths)
    resolution = grid.runtime.resolution or _image_size(grid.models.clip_model)

    # video renders per target: v2t queries at their own perturbation (a mix: every cell it can draw, and the clean
    # clips of the queries it spares); t2v galleries (and clean v2t) clean clips
    renders: dict[str, list[tuple[str, int]]] = {}
    for _, cell in cells:
        if cell.direction != "v2t":
            needs = [(CLEAN, 0)]
        elif cell.mix:
            needs = [(CLEAN, 0), *Mix.from_json(cell.mix).cells()]
        else:
            needs = [(cell.perturbation, cell.severity)]
        for need in needs:
            renders.setdefault(cell.dataset, [])
            if need not in renders[cell.dataset]:
                renders[cell.dataset].append(need)
    streams = protocol_streams(grid)
    for ds, _, segments in streams:   # a multi-segment protocol reads every segment's render set
        for need in segments:
            renders.setdefault(ds, [])
            if need not in renders[ds]:
                renders[ds].append(need)


    embedders: dict[str, tuple[CheckpointKey | None, str, str]] = {}
    render_assets: dict[tuple[str, str], str] = {}
    for ds, cells_of_ds in renders.items():
        for pert in dict.fromkeys(p for p, _ in cells_of_ds if p != CLEAN):
            if perturbation_info(pert).assets is None:
                render_assets[(ds, pert)] = ""
                continue
            if ds not in embedders:
                embedders[ds] = _embedder(grid, models, ds)
            render_assets[(ds, pert)] = asset_version(grid, ds, pert, datasets[ds].version, embedders[ds][1])

    rt = grid.runtime
    trials: list[TrialSpec] = []
    text_sets: dict = {}
    # every trial at every seed (the first seed's trials first: its render sets come first), each method entry in its
    # grid configuration, then its searched ones (orchestrator/planning/search.py)
    configs = {entry: [SearchedConfig(""), *sampled_configs(grid, entry)] for entry in grid.methods}
    # each method entry's row and its configurations' options, made once, not once per seed and cell (a grid of
    # 1,000 seeds plans 1,000 times the trials of one: docs/notes/2026-12-02-plan-at-scale.md)
    rows = {}
    for entry in grid.methods:
        method, options, faithful, variant = _method_entry(grid, entry)
        rows[entry] = (method, faithful, variant,
                       [(config, json.dumps({**options, **config.options})) for config in configs[entry]])
    source_pairs = grid.search.source_pairs if grid.search is not None else 0
    stream_order = "shuffled" if rt.stream_order == "shuffled" else ""
    bases: dict[tuple, TrialSpec] = {}   # a v2t query-shift trial per (dataset, seed, backbone, method, config)
    for seed, (scenario, cell) in ((seed, sc) for seed in grid.trial_seeds for sc in cells):
        if cell.mix:  # each type the mix draws renders with its own assets
            assets = json.dumps({p: render_assets[(cell.dataset, p)] for p in Mix.from_json(cell.mix).perturbations
                                 if render_assets.get((cell.dataset, p))}, sort_keys=True)
        else:
            assets = render_assets.get((cell.dataset, cell.perturbation), "")
        for named in grid.backbones:   # a backbone, or a backbone variant's name
            backbone, backbone_options, backbone_variant = backbone_entry(grid, named)
            model_key = CheckpointKey(named, cell.source)
            model = models[model_key]
            if cell.direction == "t2v" and cell.mix:     # each (type, severity) the mix draws: its text set
                versions = {p: _text_set(grid, cell.dataset, p, sev, model_key, model, datasets, text_sets, seed)
                            for p, sev in Mix.from_json(cell.mix).cells()}
                assets = json.dumps(versions, sort_keys=True)
            elif cell.direction == "t2v" and cell.perturbation != CLEAN:
                assets = _text_set(grid, cell.dataset, cell.perturbation, cell.severity, model_key, model,
                                   datasets, text_sets, seed)
            for entry in grid.methods:
                method, faithful, variant, entry_configs = rows[entry]
                for config, options in entry_configs:
                    where = (seed, named, entry, config.name)
                    trials.extend(protocol_trials(grid, scenario.name, bases, where, TrialSpec(
                        dataset=cell.dataset, direction=cell.direction, scenario=scenario.name,
                        perturbation=cell.perturbation, severity=cell.severity, method=method, backbone=backbone,
                        seed=seed, faithful=faithful, source_dataset=cell.source, clip_model=grid.models.clip_model,
                        model_version=model.version, data_version=datasets[cell.dataset].version,
                        batch_size=rt.batch_size, steps=config.steps or rt.steps, num_frames=rt.num_frames,
                        resolution=resolution, precision=rt.precision, hub_k=rt.hub_k,
                        options=options, render_assets=assets, variant=variant,
                        mix=cell.mix, config=config.name, stream_order=stream_order, source_pairs=source_pairs,
                        backbone_options=json.dumps(backbone_options) if backbone_options else "",
                        backbone_variant=backbone_variant)))
    trials.extend(stream_trials(streams, bases, render_assets))
    ocr = _ocr_engines(grid, renders)
    notes = [line for scenario in grid.scenarios.values() for line in scenario.notes(grid)]
    notes += source_stage_notes(grid, datasets, [cell for _, cell in cells])
    notes += ocr_notes(ocr)
    plan = Plan(grid, paths, datasets, models, trials, renders, resolution, render_assets, embedders,
                list(text_sets.values()), notes, missing, ocr_engines=ocr)
    plan.trials.extend(recorded_tpe_trials(plan))   # configurations TPE proposed in earlier submissions
    if missing is not None:   # sizing (`plan`, `submit --dry-run`): what submit would refuse, said up front
        plan.notes.extend(f"submit will refuse this grid: {p}" for p in hub_k_problems(plan))
    return plan


def protocol_streams(grid: GridSpec) -> list[tuple[str, object, list[tuple[str, int]]]]:
    """(dataset, protocol entry, segments) of each multi-segment protocol of `query_shift.protocols` (docs/
    protocols.md): one v2t trial per dataset, backbone, method and seed spanning the segments (the entry's, else the
    protocol's default sequence over the grid's video perturbations in registry order and its severities)."""
    from orchestrator.config.names import known_video_perturbations
    from workloads.protocols import PROTOCOLS

    qs = grid.query_shift
    if qs is None or "v2t" not in qs.directions:
        return []
    order = known_video_perturbations()
    perturbations = sorted(qs.perturbations, key=order.index)
    out = []
    for entry in qs.protocol_specs():
        cls = PROTOCOLS.lookup(entry.name)
        if cls.multi_segment:
            segments = ([(p, int(v)) for p, v in entry.segments] if entry.segments is not None
                        else cls.default_segments(perturbations, qs.severities))
            out += [(ds, entry, segments) for ds in qs.datasets]
    return out


def protocol_trials(grid: GridSpec, scenario: str, bases: dict, where: tuple, spec: TrialSpec) -> list[TrialSpec]:
    """A planned trial once per single-segment protocol of `query_shift.protocols` (the default alone when it lists
    none; a protocol other than the default, or another batch size, is a trial of its own); remembers a v2t
    query-shift trial per (dataset, *where) in `bases`, from which the multi-segment protocols' trials are made."""
    from workloads.protocols import PROTOCOLS

    qs = grid.query_shift
    if scenario != "query_shift" or qs is None:
        return [spec]
    if spec.direction == "v2t":
        bases.setdefault((spec.dataset, *where), spec)
    entries = qs.protocol_specs()
    if not entries:
        return [spec]
    return [dataclasses.replace(spec, protocol=e.name, batch_size=e.batch_size or spec.batch_size,
                                protocol_options=json.dumps(e.options) if e.options else "")
            for e in entries if not PROTOCOLS.lookup(e.name).multi_segment]


def stream_trials(streams: list, bases: dict, render_assets: dict) -> list[TrialSpec]:
    """The multi-segment protocols' trials: each base trial of their dataset as one stream over the segments, its
    column named by the protocol (a second entry of the same protocol: "-2", ...)."""
    out = []
    names: Counter = Counter()
    labels = []
    for ds, entry, _ in streams:
        names[(ds, entry.name)] += 1
        n = names[(ds, entry.name)]
        labels.append(entry.name if n == 1 else f"{entry.name}-{n}")
    for (ds, entry, segments), label in zip(streams, labels):
        assets = json.dumps({p: render_assets[(ds, p)] for p, _ in segments if render_assets.get((ds, p))},
                            sort_keys=True)
        for key, base in bases.items():
            if key[0] == ds:
                out.append(dataclasses.replace(
                    base, perturbation=label, severity=0, mix="", render_assets=assets if assets != "{}" else "",
                    protocol=entry.name, protocol_options=json.dumps(entry.options) if entry.options else "",
                    segments=json.dumps([[p, v] for p, v in segments]),
                    batch_size=entry.batch_size or base.batch_size))
    return out


def _check_readable(grid: GridSpec, dp: DatasetPlan, missing: list[MissingPath]) -> None:
    """Sizing without the data: mark a dataset whose root or test annotations are not on disk unavailable (listed in
    `missing` once, under its root key, with what the loader wants)."""
    key = f"datasets.{dp.name}.root"
    known = next((m for m in missing if m.key == key), None)
    if known is not None:
        dp.unavailable = known.fix
        return
    try:
        if hasattr(dp.dataset, "version"):   # generated on first use: always available
            return
        dp.test  # noqa: B018 (reads the annotations)
    except Exception as err:  # the loader's one-line reason (DatasetError: which file, where it comes from)
        dp.unavailable = str(err).splitlines()[0] if str(err) else type(err).__name__
        missing.append(MissingPath(key, str(dp.root), dp.unavailable))


def plan_for_sizing(grid_path: str | os.PathLike, paths: Paths) -> Plan:
    """`plan` and `submit --dry-run`: the plan of a grid whether or not its data, weights and assets are on disk yet.
    Paths that are not there are in `plan.missing` (one MissingPath each, with the key or variable to set); datasets
    without annotations have unknown clip counts; missing asset files plan as their fallbacks. Starts nothing."""

    missing: list[MissingPath] = []
    grid = load_grid(grid_path, missing=missing)
    _drop_missing_assets(grid, missing)
    return build_plan(grid, paths, missing)


def _drop_missing_assets(grid: GridSpec, missing: list[MissingPath]) -> None:
    """Asset paths that are not on disk plan as absent (their types render the flagged fallbacks)."""
    keys = {m.key.split("[")[0] for m in missing}
    for f in dataclasses.fields(grid.assets):
        if f"assets.{f.name}" in keys:
            setattr(grid.assets, f.name, None)
    for name, entry in grid.datasets.items():
        for attr in ("main_objects", "distractor_pool"):
            if f"datasets.{name}.assets.{attr}" in keys:
                setattr(entry.assets, attr, None)
        pre = entry.assets.text_precomputed
        for pert in [p for p in pre if f"datasets.{name}.assets.text_precomputed.{p}" in keys]:
            del pre[pert]


def missing_videos(plan: Plan) -> list[str]:
    """Video files the plan will read that do not exist, all at once, per dataset and split (count + the first ten):
    test videos of every target, train videos of every dataset fine-tuned here. Returns one note per split with
    missing videos (each fails only its own renders later); raises PlanError (one line) when a split has none of its
    videos, since nothing of that dataset could run. Generated datasets (made on first use) are skipped."""
    wanted: dict[str, list[str]] = {name: ["test"] for name in plan.renders}
    for m in plan.models.values():
        if not m.given_path and m.train_dataset and "train" not in wanted.setdefault(m.train_dataset, []):
            wanted[m.train_dataset].append("train")
    notes = []
    for name, splits in wanted.items():
        if plan.datasets[name].unavailable:   # sizing without the data: its root is listed in plan.missing
            continue
        ds = plan.datasets[name].dataset
        if hasattr(ds, "version"):   # generated under the cache on first use (workloads/datasets/synthetic.py)
            continue
        for split_name in splits:
            split = ds.split(split_name)
            missing = len(ds.missing_videos(split))
            if not missing:
                continue
            report = missing_video_report(ds, split_name)
            if missing == len(set(split.video_ids)) and plan.missing is not None:   # sizing: list it, go on
                key, folder = f"datasets.{name}.options.videos_dir", str(Path(split.pairs[0].video_path).parent)
                earlier = next((i for i, m in enumerate(plan.missing) if m.key == key), None)
                what = f"{missing} {split_name}"
                if earlier is not None:   # the test split's line: one line per dataset
                    what = plan.missing.pop(earlier).fix.split(" videos exist")[0].removeprefix("none of its ") \
                        + f" / {what}"
                plan.missing.append(MissingPath(key, folder, f"none of its {what} videos exist: put them there or "
                                                f"set {key} (or root)"))
                continue
            if missing == len(set(split.video_ids)):
                raise PlanError(f"{report}: none of its {split_name} videos exist; put them there or set "
                                f"datasets.{name}.options.videos_dir (or root)")
            notes.append(f"{report} (these fail their own renders; the rest run)")
    return notes


def _text_set(grid: GridSpec, dataset: str, perturbation: str, severity: int, model_key: CheckpointKey,
              model: ModelPlan, datasets: dict[str, DatasetPlan], text_sets: dict, seed: int) -> str:
    """The text set t2v trials with this model read at (perturbation, severity), added to `text_sets`; returns its
    assets version (the trials' render_assets). Sets made with a stand-in encoder belong to the model; others are
    shared."""
    stand_in = needs_stand_in(grid, dataset, perturbation)
    version = text_assets_version(grid, dataset, perturbation, model.version if stand_in else None)
    key = TextSetKey(dataset, datasets[dataset].version, perturbation, severity, seed, version)
    text_sets.setdefault(key, TextSetJob(key, model_key if stand_in else None))
    return version


def _embedder(grid: GridSpec, models: dict[CheckpointKey, ModelPlan], ds: str
              ) -> tuple[CheckpointKey | None, str, str]:
    """Which CLIP chooses a dataset's per-video assets (event-insertion distractors): the grid's zero-shot CLIP
    weights when given (as the authors), else the dataset's own fine-tuned mean-pooling model."""
    if grid.models.pretrained:
        return None, file_version(grid.models.pretrained), "zero_shot_clip"
    key = CheckpointKey("clip4clip" if CheckpointKey("clip4clip", ds) in models else grid.backbones[0], ds)
    if key not in models:
        raise PlanError(f"dataset {ds}: perturbations with assets need a CLIP to choose them: give models.pretrained "
                        f"or run query_shift on {ds} (its fine-tuned model)")
    return key, models[key].version, "finetuned"


def hub_k_problems(plan: Plan) -> list[str]:
    """runtime.hub_k counts how often each gallery item is among a query's k nearest: one line per target whose
    gallery is smaller than k (where the size is known)."""
    k = plan.grid.runtime.hub_k
    out = []
    for name in dict.fromkeys(t.dataset for t in plan.trials):
        n = plan.datasets[name].size   # None: not known before the data is on disk (plan lists what is missing)
        if n and k > n:
            out.append(f"runtime.hub_k is {k} but the test split of {name} has {n} items (the gallery): set hub_k to "
                       f"at most {n} (the paper uses 10)")
    return out


def check_hub_k(plan: Plan) -> None:
    """A k above a target's gallery size is an error before anything starts (one line), not a failure in every
    trial (`submit`; `plan` lists it among its notes)."""
    problems = hub_k_problems(plan)
    if problems:
        raise PlanError(problems[0])


def source_stage_notes(grid: GridSpec, datasets: dict[str, DatasetPlan], cells: list) -> list[str]:
    """A method with a source stage (its registration's `source_stage`: TITAN's bias-correction head) learns from the
    checkpoint's source train split; where a cell's model has none (zero-shot) or the split cannot be read, that
    stage is off: one note per (method row, dataset) saying so. Annotations only are read (nothing generated)."""
    staged = {}
    for entry in grid.methods:
        method = _method_entry(grid, entry)[0]
        stage = METHODS.static_info(method).get("source_stage")
        if stage:
            staged[entry] = stage
    notes, seen = [], set()
    for cell in cells:
        for entry, stage in staged.items():
            if (entry, cell.dataset, cell.source) in seen:
                continue
            seen.add((entry, cell.dataset, cell.source))
            why = None
            if cell.source == PRETRAINED:
                why = "a zero-shot checkpoint has no source train split"
            else:
                dp = datasets[cell.source]
                if dp.unavailable or getattr(dp.dataset, "config", None) is not None:   # unknown yet, or generated
                    continue
                try:
                    if not len(dp.dataset.train_split()):
                        why = f"the train split of {cell.source} is empty"
                except Exception as err:   # the loader's one-line reason (which file, where it comes from)
                    why = f"no train split of {cell.source}: {str(err).splitlines()[0] if str(err) else err}"
            if why:
                notes.append(f"{entry} on {cell.dataset}: its {stage} is off ({why}); the rest of the method runs")
    return notes
