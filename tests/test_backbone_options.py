"""Backbone options in grids (issue #35): `backbone_options` and `backbone_variants` (TCD without OCR beside TCD, TCD
with another OCR engine), checked at load against the options the head declares, and carried into every key that a
configuration must not share with another (checkpoint, gallery, trial), MLflow params and the tables' rows; the
render stage writes the OCR entries of each engine the grid's backbones read (none for TCD without OCR); and
fine-tuning hands each batch the OCR windows of the very frames it feeds the model."""
import copy
import json

import numpy as np
import pytest

from conftest import private_cache
from orchestrator.config.errors import GridError
from orchestrator.config.grid import load_grid, parse_grid
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from workloads.spec import TrialSpec

TINY_TEXT = {"n_train": 24, "n_test": 8, "size": 96, "num_frames": 8}
BASE = {
    "name": "bo",
    "datasets": {"synthetic_text": {"options": TINY_TEXT}},
    "models": {"clip_model": "mlvp-micro"},
    "backbones": ["clip4clip", "tcd", "tcd_no_ocr"],
    "backbone_variants": {"tcd_no_ocr": {"backbone": "tcd", "options": {"ocr": False}}},
    "methods": ["source", "tent"],
    "query_shift": {"datasets": ["synthetic_text"], "directions": ["v2t", "t2v"], "perturbations": ["gaussian_noise"],
                    "severities": [5]},
    "runtime": {"num_frames": 4, "hub_k": 4},
}


def grid(**changes):
    g = copy.deepcopy(BASE)
    g.update(changes)
    return g


def paths(tmp, shared_cache) -> Paths:
    """A results folder and cache of the test's own, the generated datasets shared with the session."""
    return Paths.make(tmp / "results", private_cache(tmp / "cache", shared_cache, ("datasets",)))


def error_of(data) -> str:
    with pytest.raises(GridError) as info:
        parse_grid(data, "g.yaml")
    assert "\n" not in str(info.value)
    return str(info.value)


BAD = [
    (grid(backbone_options={"tcd": {"ocrr": False}}),
     "g.yaml: backbone_options.tcd: backbone 'tcd': unknown option(s) 'ocrr'; allowed: base, cycle_weight, engine, "
     "heads, ocr, tau"),
    (grid(backbone_options={"tcd": {"ocr": "no"}}),
     "backbone_options.tcd: backbone 'tcd': option 'ocr' must be true/false, got 'no'"),
    (grid(backbone_options={"tcd": {"engine": "easyocr"}}),
     "backbone_options.tcd: backbone 'tcd': option 'engine' must be one of tesseract, rapidocr, got 'easyocr'"),
    (grid(backbone_options={"tcd": {"cycle_weight": -1}}), "option 'cycle_weight' must be a number >= 0, got -1.0"),
    (grid(backbone_variants={"tcd_no_ocr": {"backbone": "tcd", "options": {"ocr": 0}}}),
     "backbone_variants.tcd_no_ocr.options: backbone 'tcd': option 'ocr' must be true/false, got 0"),
    (grid(backbone_options={"clip4clip": {"heads": 2}}),
     "backbone_options.clip4clip: backbone 'clip4clip' takes no options; got 'heads'"),
    (grid(backbone_options={"xpool": {"tau": 1}}), "backbone_options.xpool: not a backbone of this grid"),
    (grid(backbone_options={"tcd_no_ocr": {"tau": 1}}), "backbone variants carry their own options"),
    (grid(backbone_variants={"tcd": {"backbone": "tcd"}}), "backbone_variants.tcd: a variant cannot take a backbone's"),
    (grid(backbone_variants={"tcd_no_ocr": {"backbone": "tcdd", "options": {"ocr": False}}}),
     "backbone_variants.tcd_no_ocr.backbone: 'tcdd' is not allowed (did you mean 'tcd'?)"),
    (grid(backbones=["clip4clip", "tcd"]), "backbone_variants.tcd_no_ocr: not listed in backbones"),
    (grid(backbones=["tcd", "tcd_no_ocr", "tcd_plain"],
          backbone_variants={"tcd_no_ocr": {"backbone": "tcd", "options": {"ocr": False}},
                             "tcd_plain": {"backbone": "tcd", "options": {"ocr": True}}}),
     "backbones: 'tcd' and 'tcd_plain' are the same configuration (tcd with its default options)"),
    (grid(backbones=["tcd_no_ocr", "tcd_blind"],
          backbone_variants={"tcd_no_ocr": {"backbone": "tcd", "options": {"ocr": False}},
                             "tcd_blind": {"backbone": "tcd", "options": {"ocr": False, "tau": 5}}}),
     "backbones: 'tcd_no_ocr' and 'tcd_blind' are the same configuration (tcd with {\"ocr\": false})"),
    (grid(backbones=["clip4clip", "tcd", "tcd_noocr"]),
     "backbones[2]: unknown backbone or backbone variant 'tcd_noocr' (did you mean 'tcd_no_ocr'?)"),
]


@pytest.mark.parametrize("data,message", BAD, ids=range(len(BAD)))
def test_bad_backbone_options_fail_at_load_naming_the_key_the_value_and_what_is_allowed(data, message):
    assert message in error_of(data)


@pytest.fixture(scope="module")
def plan(tmp_path_factory, shared_cache):
    g = parse_grid(grid(backbones=["clip4clip", "tcd", "tcd_no_ocr", "tcd_tess"],
                        backbone_variants={"tcd_no_ocr": {"backbone": "tcd", "options": {"ocr": False}},
                                           "tcd_tess": {"backbone": "tcd", "options": {"engine": "tesseract"}}}),
                   "g.yaml")
    return build_plan(g, paths(tmp_path_factory.mktemp("bo"), shared_cache))


def test_each_configuration_has_its_own_checkpoint_galleries_and_trials(plan):
    """The options reach the fine-tune (its key and file), the gallery encodings and the trial keys; the labels name
    the checkpoints, the checks and the trials."""
    tcd, blind, tess = (plan.models[CheckpointKey(b, "synthetic_text")] for b in ("tcd", "tcd_no_ocr", "tcd_tess"))
    assert (tcd.finetune.pooling_kwargs, blind.finetune.pooling_kwargs, tess.finetune.pooling_kwargs) == (
        {}, {"ocr": False}, {"engine": "tesseract"})
    assert len({tcd.version, blind.version, tess.version}) == 3
    assert len({str(plan.model_path(CheckpointKey(b, "synthetic_text"))) for b in ("tcd", "tcd_no_ocr", "tcd_tess")}) \
        == 3
    assert blind.backbone == "tcd" and blind.name == "tcd_no_ocr"
    # (v2t clean and noisy, t2v clean) x backbones x methods
    assert len({t.key for t in plan.trials}) == len(plan.trials) == 3 * 4 * 2
    by_label = {t.backbone_label: t for t in plan.trials}
    assert by_label["tcd_no_ocr"].backbone == "tcd" and by_label["tcd_no_ocr"].backbone_kwargs == {"ocr": False}
    assert by_label["tcd"].backbone_options == "" and by_label["tcd"].backbone_variant == ""
    assert len(plan.gallery_encodings()) == 4 * 2
    from orchestrator.planning.environment import checkpoint_paths
    from orchestrator.planning.needs import trial_needs

    assert {"tcd|synthetic_text", "tcd_no_ocr|synthetic_text", "tcd_tess|synthetic_text"} <= set(
        checkpoint_paths(plan))
    assert "check:tcd_no_ocr|synthetic_text" in trial_needs(plan, by_label["tcd_no_ocr"])
    from orchestrator.planning.clean_check import check_cases

    assert {c.backbone for c in check_cases(plan)} == {"clip4clip", "tcd", "tcd_no_ocr", "tcd_tess"}


def test_options_at_their_default_are_the_backbone_as_registered():
    """`tcd: {ocr: true}` is plain TCD: the same checkpoint, galleries and trials (keys) as no options at all."""
    paths = Paths.make("/tmp/mlvp-bo-defaults")
    plain = build_plan(parse_grid(grid(backbones=["tcd"], backbone_variants={}), "g.yaml"), paths)
    spelled = build_plan(parse_grid(grid(backbones=["tcd"], backbone_variants={},
                                         backbone_options={"tcd": {"ocr": True, "engine": "rapidocr", "tau": 5}}),
                                    "g.yaml"), paths)
    assert [t.key for t in plain.trials] == [t.key for t in spelled.trials]
    key = CheckpointKey("tcd", "synthetic_text")
    assert plain.models[key].version == spelled.models[key].version


def test_a_spec_without_backbone_options_keeps_its_key():
    """The two fields were added after keys were recorded: at their defaults they stay out of the key."""
    from workloads import RENDER_VERSION, TRIAL_VERSION
    from workloads.seeding import digest

    spec = TrialSpec("synthetic", "v2t", "query_shift", "clean", 0, "source", "clip4clip")
    legacy = {k: v for k, v in spec.to_dict().items()
              if k not in ("mix", "config", "stream_order", "source_pairs", "backbone_options", "backbone_variant",
                           "protocol", "protocol_options", "segments")}
    assert spec.key == digest({"spec": legacy, "trial": TRIAL_VERSION, "render": RENDER_VERSION}, length=20)
    with_options = TrialSpec("synthetic", "v2t", "query_shift", "clean", 0, "source", "tcd",
                             backbone_options='{"tau": 2.0, "ocr": false}')
    assert with_options.backbone_options == '{"ocr": false, "tau": 2.0}'   # canonical
    assert TrialSpec("synthetic", "v2t", "query_shift", "clean", 0, "source", "tcd", backbone_options="{}"
                     ).backbone_options == ""


def test_gallery_cache_key_mlflow_params_and_run_names_tell_configurations_apart(plan):
    from orchestrator.record.mlflow_store import TAG_AXES, run_name
    from workloads.spec import SPEC_FIELDS
    from workloads.trial import _model_key

    tcd = next(t for t in plan.trials if t.backbone_label == "tcd")
    blind = next(t for t in plan.trials if t.backbone_label == "tcd_no_ocr" and t.cell == tcd.cell
                 and t.direction == tcd.direction and t.method == tcd.method)
    assert _model_key(tcd) != _model_key(blind)
    assert "backbone_options" not in _model_key(tcd)   # a backbone as registered keeps its galleries' keys
    assert {"backbone_options", "backbone_variant"} <= set(SPEC_FIELDS) and "backbone_variant" in TAG_AXES
    assert "/tcd_no_ocr/" in run_name(blind.to_dict()) and "/tcd/" in run_name(tcd.to_dict())


def test_tables_have_a_row_per_configuration(plan):
    from orchestrator.report.results import scenario_tables
    from orchestrator.report.rows import planned_rows

    df = planned_rows(plan.trials, [], lists=False)
    assert set(df["backbone_label"]) == {"clip4clip", "tcd", "tcd_no_ocr", "tcd_tess"}
    assert set(df["backbone"]) == {"clip4clip", "tcd"}
    table = scenario_tables(plan.grid, df)["query_shift"][0]
    assert [r for r in table.rows if r[1] == "source"] == [("clip4clip", "source"), ("tcd", "source"),
                                                          ("tcd_no_ocr", "source"), ("tcd_tess", "source")]


def test_the_plan_lists_each_engine_the_backbones_read_and_none_for_tcd_without_ocr(plan, tmp_path):
    assert plan.ocr_engines == {"synthetic_text": ["rapidocr", "tesseract"]}
    blind = build_plan(parse_grid(grid(backbones=["clip4clip", "tcd_no_ocr"]), "g.yaml"), Paths.make(tmp_path))
    assert blind.ocr_engines == {}
    assert build_plan(parse_grid(grid(backbones=["clip4clip"], backbone_variants={}), "g.yaml"),
                      Paths.make(tmp_path)).ocr_engines == {}


def test_the_shipped_backbones_check_runs_tcd_with_and_without_ocr():
    from pathlib import Path

    g = load_grid(Path(__file__).resolve().parents[1] / "grids" / "backbones_check.yaml")
    assert g.backbones == ["clip4clip", "xpool", "hvp_net", "tcd", "tcd_no_ocr"]
    p = build_plan(g, Paths.make("/tmp/mlvp-bo-check"))
    assert p.ocr_engines == {"synthetic_text": ["rapidocr"]}
    assert {t.backbone_kwargs.get("ocr") for t in p.trials if t.backbone == "tcd"} == {None, False}


class FakeEngine:
    """An OCR engine that reads a frame's size and mean: what the render stage hands it is checked."""

    def __init__(self, name):
        self.name, self.frames = name, []

    def version(self):
        return f"{self.name}-fake-1"

    def read_windows(self, frames):
        self.frames.append(frames.shape)
        return [[f"{self.name.upper()}{frame.shape[0]}"] for frame in frames]


@pytest.fixture
def fake_engines(monkeypatch):
    """Both engines, faked, wherever the plan, the render stage and a trial find one."""
    import orchestrator.planning.render_sets as render_sets
    import orchestrator.stages.render as render
    import workloads.ocr as ocr

    engines = {name: FakeEngine(name) for name in ("rapidocr", "tesseract")}
    for module in (ocr, render_sets):
        monkeypatch.setattr(module, "engine_version", lambda name: engines[name].version())
    for module in (ocr, render):
        monkeypatch.setattr(module, "get_engine", lambda name: engines[name])
    return engines


def _render_all(plan, rows):
    from orchestrator.stages.render import render_rows

    for row in rows:
        out = render_rows({k: [v] for k, v in row.items()}, str(plan.paths.render), plan.grid.seed,
                          plan.grid.runtime.num_frames, plan.resolution)
        assert set(out["status"]) == {"ok"}, out["error"]


def test_the_render_stage_writes_each_configured_engines_entries_once(plan, fake_engines):
    """Every clip of every render set gets an OCR entry per engine the grid's OCR backbones read, read on the frames
    at their native resolution in the render stage; a second pass finds everything; a missing entry alone is read
    again without rewriting its clip."""
    from orchestrator.planning.render_sets import ordered_sets, plan_set_rows, render_keys_of_set
    from workloads.render_cache import RenderCache

    cache = RenderCache(plan.paths.render)
    sets = ordered_sets(plan)
    rows, todo, reused = plan_set_rows(plan, cache, sets)
    assert reused == 0 and all(json.loads(r["requests"])[0][4:] == [["rapidocr", "tesseract"], True] for r in rows)
    _render_all(plan, rows)
    keys = [k for rs in sets for k in render_keys_of_set(plan, rs)]
    for engine in fake_engines.values():
        assert engine.frames and set(engine.frames) == {(4, 96, 96, 3)}   # native 96 px, not the 32 px model input
        for key in keys:
            assert cache.read_ocr(key, engine.version()) == [[f"{engine.name.upper()}96"]] * 4
    assert plan_set_rows(plan, cache, sets)[0] == []
    # one entry lost: an OCR-only request for that clip, for that engine; its clip is not rewritten
    clip = cache.path(keys[3])
    mtime = clip.stat().st_mtime_ns
    cache.ocr_path(keys[3], fake_engines["tesseract"].version()).unlink()
    rows, todo, reused = plan_set_rows(plan, cache, sets)
    assert [json.loads(r["requests"]) for r in rows] == [[[keys[3].perturbation, keys[3].severity, "", 0,
                                                           ["tesseract"], False]]]
    _render_all(plan, rows)
    assert cache.ocr_path(keys[3], fake_engines["tesseract"].version()).is_file()
    assert clip.stat().st_mtime_ns == mtime


def test_tcd_without_ocr_renders_and_reads_no_ocr(tmp_path, shared_cache, fake_engines):
    """A grid whose only OCR backbone has `ocr: false` renders no OCR entry, and its trial runs without one (it
    never calls the engine: the fake engines record no frame)."""
    from orchestrator.planning.render_sets import ordered_sets, plan_set_rows
    from workloads.render_cache import RenderCache
    from workloads.trial import TrialContext, run

    plan = build_plan(parse_grid(grid(backbones=["tcd_no_ocr"], methods=["source"]), "g.yaml"),
                      paths(tmp_path, shared_cache))
    cache = RenderCache(plan.paths.render)
    rows, _, _ = plan_set_rows(plan, cache, ordered_sets(plan))
    assert all(len(r) == 4 for row in rows for r in json.loads(row["requests"]))
    _render_all(plan, rows)
    assert not list(plan.paths.render.rglob("*.ocr-*.json"))
    ds = plan.datasets["synthetic_text"]
    specs = [t for t in plan.trials if t.cell in ("clean", "gaussian_noise-5")]
    assert len(specs) == 3   # v2t clean and noisy, t2v clean
    for spec in specs:
        result = run(spec, TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root,
                                        dataset_options=ds.options, gallery_cache=str(tmp_path / "gallery")))
        assert result.status == "ok", result.error
    assert not any(e.frames for e in fake_engines.values())
    assert not list(plan.paths.render.rglob("*.ocr-*.json"))


def test_fine_tuning_hands_each_batch_the_windows_of_the_frames_it_sees(tmp_path, shared_cache, monkeypatch):
    """TCD's windows match the sampled frames: the train clips' windows are read at their own `train_frames` (not the
    evaluation's), and a quick-recipe batch of `frames_per_clip` random frames gets the windows of those frames."""
    import workloads.ocr as ocr
    from workloads.backbones import finetune as ft
    from workloads.datasets import create_dataset

    ds = create_dataset("synthetic_text", root=str(shared_cache / "datasets"), **TINY_TEXT)
    calls = []

    def split_windows(split, num_frames, engine, cache_dir=None, threads=2):   # window j names its frame j
        calls.append((split.name, num_frames))
        return {p.video_id: [[f"{p.video_id}@{j}"] for j in range(num_frames)] for p in split.pairs}

    monkeypatch.setattr(ocr, "split_windows", split_windows)
    monkeypatch.setattr(ocr, "get_engine", lambda name: None)
    plans, sides = [], []
    real_plans, real_step = ft.batch_plans, ft.train_step

    def batch_plans(*args, **kwargs):
        made, steps = real_plans(*args, **kwargs)
        made = list(made)
        plans.extend(made)
        return iter(made), steps

    def train_step(model, opt, sched, autocast, tokens, clips, side=None):
        sides.append(side)
        return real_step(model, opt, sched, autocast, tokens, clips, side)

    monkeypatch.setattr(ft, "batch_plans", batch_plans)
    monkeypatch.setattr(ft, "train_step", train_step)
    train = ds.train_split()
    config = ft.FinetuneConfig(backbone="tcd", clip_model="mlvp-micro", steps=3, batch_size=4, train_frames=6,
                               frames_per_clip=3, eval_frames=4, precision="fp32")
    ft.finetune(config, train, ds.test_split(), tmp_path / "tcd.pt", log=lambda m: None)
    assert calls == [("train", 6), ("test", 4)]
    assert len(sides) == len(plans) == 3
    for (rows, fidx, _), side in zip(plans, sides):
        videos = [train.pairs[r].video_id for r in rows]   # every train pair decodes (rows index the kept pairs)
        assert side["ocr"] == [[[f"{v}@{j}"] for j in frames] for v, frames in zip(videos, fidx)]
        assert all(len(w) == 3 for w in side["ocr"])


def test_batch_side_takes_every_window_when_the_batch_has_every_frame():
    from workloads.backbones.finetune import batch_side

    side = {"ocr": [[["a0"], ["a1"]], [["b0"], ["b1"]], [["c0"], ["c1"]]]}
    assert batch_side(side, (np.array([2, 0]), None, None)) == {"ocr": [[["c0"], ["c1"]], [["a0"], ["a1"]]]}
    assert batch_side(side, (np.array([1]), np.array([[1]]), None)) == {"ocr": [[["b1"]]]}
    assert batch_side(None, (np.array([1]), None, None)) is None


def test_every_declared_backbone_option_is_documented():
    """docs/architecture.md "Backbone options and variants" names each option a backbone declares."""
    from pathlib import Path

    from workloads.backbones import BACKBONES

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("### Backbone options and variants", 1)[1].split("\n## ", 1)[0]
    for name in BACKBONES.names():
        for option in getattr(BACKBONES.lookup(name), "OPTIONS", {}):
            assert f"`{option}`" in section, (name, option)
