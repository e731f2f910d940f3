"""Planning: a validated grid -> trial specs, the checkpoints they need, and the clips to render.

Everything here is pure data and cheap: nothing trains, renders or starts Ray. Trial keys include the data and
model versions, computed without training (a fine-tuned checkpoint's key comes from its config and data version).
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from orchestrator.grid import GridSpec
from workloads.spec import CLEAN, TrialSpec


@dataclass
class Paths:
    """Where a submission reads and writes. Everything generated lives under `results`."""

    results: Path
    cache: Path

    @classmethod
    def make(cls, results_dir: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> "Paths":
        results = Path(results_dir).expanduser().resolve()
        cache = Path(cache_dir).expanduser().resolve() if cache_dir else results / "cache"
        return cls(results, cache)

    @property
    def ledger(self) -> Path:
        return self.results / "ledger"

    @property
    def datasets(self) -> Path:
        return self.cache / "datasets"

    @property
    def models(self) -> Path:
        return self.cache / "models"

    @property
    def render(self) -> Path:
        return self.cache / "render"

    @property
    def gallery(self) -> Path:
        return self.cache / "gallery"

    def grid_dir(self, name: str) -> Path:
        return self.results / name

    def scores(self, name: str) -> Path:
        return self.results / name / "scores"


@dataclass
class DatasetPlan:
    name: str
    root: str | None
    options: dict

    @cached_property
    def dataset(self):
        from workloads.datasets import create_dataset

        return create_dataset(self.name, root=self.root, **self.options)

    @cached_property
    def version(self) -> str:
        """Content key of the data. Generated datasets give it from their generator config (no generation
        needed); real ones from their annotation files."""
        from workloads.seeding import digest

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


@dataclass
class ModelPlan:
    """One checkpoint: given as a file, or fine-tuned here."""

    backbone: str
    dataset: str                  # the source dataset it is (to be) fine-tuned on
    clip_model: str
    given_path: str | None
    finetune: object | None       # workloads.backbones.finetune.FinetuneConfig
    init_from: tuple[str, str] | None = None   # (backbone, dataset) of the model whose CLIP it starts from
    version: str = ""

    def path(self, paths: Paths, data_version: str) -> Path:
        if self.given_path:
            return Path(self.given_path).expanduser().resolve()
        from workloads.backbones.finetune import checkpoint_path

        return checkpoint_path(self.finetune, self.dataset, data_version, paths.models)


@dataclass
class Plan:
    grid: GridSpec
    paths: Paths
    datasets: dict[str, DatasetPlan]
    models: dict[tuple[str, str], ModelPlan]
    trials: list[TrialSpec]
    # dataset -> ordered (perturbation, severity) renders needed, clean included when any trial needs it
    renders: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    resolution: int = 0
    # (dataset, perturbation) -> version of the assets it renders with ("" for none): part of render/trial keys
    render_assets: dict[tuple[str, str], str] = field(default_factory=dict)
    # dataset -> (backbone whose checkpoint embeds distractors or None for zero-shot weights, version, kind)
    embedders: dict[str, tuple[str | None, str, str]] = field(default_factory=dict)

    def render_count(self) -> int:
        return sum(len(self.datasets[d].test) * len(r) for d, r in self.renders.items())

    def model_path(self, backbone: str, dataset: str) -> Path:
        m = self.models[(backbone, dataset)]
        return m.path(self.paths, self.datasets[dataset].version)

    def summary(self) -> dict:
        by_scenario = defaultdict(int)
        for t in self.trials:
            by_scenario[t.scenario] += 1
        return {"grid": self.grid.name, "trials": len(self.trials), "render_jobs": self.render_count(),
                "checkpoints": len(self.models), "datasets": ",".join(self.datasets), **{
                    f"trials_{k}": v for k, v in by_scenario.items()}}


def _image_size(clip_model: str) -> int:
    import open_clip

    from workloads.backbones import _register_configs

    _register_configs()
    cfg = open_clip.get_model_config(clip_model)
    if cfg is None:
        raise ValueError(f"unknown open_clip model {clip_model!r}")
    size = cfg["vision_cfg"]["image_size"]
    return int(size[0] if isinstance(size, (list, tuple)) else size)


def _file_version(path: str) -> str:
    from workloads.seeding import file_digest

    return "file:" + file_digest(path)


def _method_entry(grid: GridSpec, entry: str) -> tuple[str, dict, bool, str]:
    """(method, options, faithful, variant label) of one `methods:` entry."""
    if entry in grid.variants:
        v = grid.variants[entry]
        return v.method, dict(v.options), grid.faithful if v.faithful is None else v.faithful, entry
    return entry, dict(grid.method_options.get(entry, {})), grid.faithful, ""


def build_plan(grid: GridSpec, paths: Paths) -> Plan:
    from workloads.backbones.finetune import FinetuneConfig

    datasets = {}
    for name in grid.query_shift.datasets:
        entry = grid.datasets[name]
        root = entry.root if entry.root is not None else str(paths.datasets)
        datasets[name] = DatasetPlan(name, root, dict(entry.options))

    m = grid.models
    ft = m.finetune
    resolution = grid.runtime.resolution or _image_size(m.clip_model)
    base_init = _file_version(m.pretrained) if m.pretrained else ""
    models: dict[tuple[str, str], ModelPlan] = {}
    # clip4clip first: an X-Pool fine-tune may start from it
    for backbone in sorted(grid.backbones, key=lambda b: b != "clip4clip"):
        for ds in datasets:
            given = m.checkpoints.get(backbone, {}).get(ds)
            if given:
                models[(backbone, ds)] = ModelPlan(backbone, ds, m.clip_model, given, None,
                                                   version=_file_version(given))
                continue
            init, init_from, steps = base_init, None, ft.steps
            if backbone == "xpool" and ft.xpool_init_from_clip4clip and ("clip4clip", ds) in models:
                init_from = ("clip4clip", ds)
                init = "model:" + models[init_from].version
                steps = ft.xpool_steps or ft.steps
            cfg = FinetuneConfig(backbone=backbone, clip_model=m.clip_model, init=init, steps=steps,
                                 batch_size=ft.batch_size, lr=ft.lr, weight_decay=ft.weight_decay,
                                 train_frames=ft.train_frames, frames_per_clip=ft.frames_per_clip,
                                 eval_frames=grid.runtime.num_frames, precision=ft.precision, seed=grid.seed)
            models[(backbone, ds)] = ModelPlan(backbone, ds, m.clip_model, None, cfg, init_from,
                                               version="ft:" + cfg.key(ds, datasets[ds].version))

    from orchestrator.assets import asset_version

    embedders: dict[str, tuple[str | None, str, str]] = {}
    for ds in datasets:
        if m.pretrained:
            embedders[ds] = (None, _file_version(m.pretrained), "zero_shot_clip")
        else:  # the dataset's fine-tuned mean-pooling model (or, failing that, the CLIP of another head)
            backbone = "clip4clip" if ("clip4clip", ds) in models else grid.backbones[0]
            embedders[ds] = (backbone, models[(backbone, ds)].version, "finetuned")
    render_assets = {(ds, p): asset_version(grid, ds, p, datasets[ds].version, embedders[ds][1])
                     for ds in datasets for p in grid.query_shift.perturbations}

    rt = grid.runtime
    qs = grid.query_shift
    trials: list[TrialSpec] = []
    renders: dict[str, list[tuple[str, int]]] = {}
    for ds in qs.datasets:
        cells = ([(CLEAN, 0)] if qs.clean else []) + [(p, s) for p in qs.perturbations for s in qs.severities]
        need: list[tuple[str, int]] = []
        for direction in qs.directions:
            # t2v queries are captions: its gallery needs only the clean clips
            dir_cells = cells if direction == "v2t" else [(CLEAN, 0)]
            need += dir_cells
            for pert, sev in dir_cells:
                for backbone in grid.backbones:
                    for entry in grid.methods:
                        method, options, faithful, variant = _method_entry(grid, entry)
                        trials.append(TrialSpec(
                            dataset=ds, direction=direction, scenario="query_shift", perturbation=pert,
                            severity=sev, method=method, backbone=backbone, seed=grid.seed,
                            faithful=faithful, source_dataset=ds, clip_model=m.clip_model,
                            model_version=models[(backbone, ds)].version, data_version=datasets[ds].version,
                            batch_size=rt.batch_size, steps=rt.steps, num_frames=rt.num_frames,
                            resolution=resolution, precision=rt.precision, hub_k=rt.hub_k,
                            options=json.dumps(options), render_assets=render_assets.get((ds, pert), ""),
                            variant=variant))
        renders[ds] = list(dict.fromkeys(need))
    return Plan(grid, paths, datasets, models, trials, renders, resolution, render_assets, embedders)
