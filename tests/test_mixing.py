"""Mixed shifts (the paper's Tables 17-18): per-query draws, the grid section, the plan's renders and keys, a trial
run on per-query clips, and the two table layouts."""
import numpy as np
import pandas as pd
import pytest

from orchestrator.config.errors import GridError
from orchestrator.config.grid import parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.report.results import write_tables
from workloads.mixing import Mix
from workloads.spec import TrialSpec

MICRO = {
    "name": "mix",
    "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
    "models": {"clip_model": "mlvp-micro"},
    "backbones": ["clip4clip"],
    "methods": ["source"],
    "mixed_shift": {"datasets": ["synthetic"],
                    "severity_mix": {"perturbations": ["gaussian_noise", "impulse_noise"], "severities": [1, 5]},
                    "type_mix": {"fractions": [0.5], "perturbations": ["gaussian_noise", "fog"], "severities": [3]}},
}


def test_draws_are_deterministic_and_respect_the_pools_and_the_fraction():
    mix = Mix(("gaussian_noise", "fog"), (1, 5), 0.25)
    a, b = mix.draws("synthetic", 40, 0), mix.draws("synthetic", 40, 0)
    assert a == b and a != mix.draws("synthetic", 40, 1) and a != mix.draws("synthetic_b", 40, 0)
    hit = [d for d in a if d != ("clean", 0)]
    assert len(hit) == 10 and set(hit) <= set(mix.cells()) and len(set(hit)) > 1
    assert Mix(("fog",), (1, 2, 3, 4, 5)).draws("d", 50, 0).count(("clean", 0)) == 0
    assert Mix.from_json(mix.to_json()) == mix
    with pytest.raises(ValueError, match=r"fraction of corrupted queries must be in \(0, 1\]"):
        Mix(("fog",), (1,), 0.0)


def test_a_mix_is_part_of_the_trial_key_and_earlier_keys_do_not_move():
    base = dict(dataset="d", direction="v2t", scenario="mixed_shift", method="source", backbone="clip4clip")
    one = TrialSpec(perturbation="fog", severity=0, mix=Mix(("fog",), (1, 5)).to_json(), **base)
    other = TrialSpec(perturbation="fog", severity=0, mix=Mix(("fog",), (1, 2)).to_json(), **base)
    assert one.key != other.key and one.cell == "fog-mixed"
    assert TrialSpec(perturbation="mixed", severity=0, mix=Mix(("fog",), (1,), 0.4).to_json(), **base).cell == \
        "mixed-40"
    with pytest.raises(ValueError, match="a mixed cell names its column"):
        TrialSpec(perturbation="fog", severity=3, mix=Mix(("fog",), (1,)).to_json(), **base)
    # a plain cell's key is the digest it had before the field existed (every ledger entry stays valid)
    from dataclasses import asdict

    from workloads import RENDER_VERSION, TRIAL_VERSION
    from workloads.seeding import digest

    from workloads.spec import _ADDED_FIELDS   # mix, and the fields added after it (seeds and search: docs/ledger.md)

    plain = TrialSpec(perturbation="fog", severity=3, **{**base, "scenario": "query_shift"})
    assert "mix" in _ADDED_FIELDS
    before = {k: v for k, v in asdict(plain).items() if k not in _ADDED_FIELDS}
    assert plain.key == digest({"spec": before, "trial": TRIAL_VERSION, "render": RENDER_VERSION}, length=20)
    assert plain.key != TrialSpec(perturbation="fog", severity=3, **{**base, "scenario": "query_shift"},
                                  variant="x").key


def test_plan_renders_every_cell_a_mix_can_draw(tmp_path, shared_cache):
    plan = build_plan(parse_grid(MICRO, "mix.yaml"), Paths.make(tmp_path / "r", shared_cache))
    cells = [(t.perturbation, t.cell) for t in plan.trials]
    assert cells == [("gaussian_noise", "gaussian_noise-mixed"), ("impulse_noise", "impulse_noise-mixed"),
                     ("mixed", "mixed-50")]
    assert set(plan.renders["synthetic"]) == {("clean", 0), ("gaussian_noise", 1), ("gaussian_noise", 5),
                                              ("impulse_noise", 1), ("impulse_noise", 5), ("gaussian_noise", 3),
                                              ("fog", 3)}


@pytest.mark.parametrize("change,message", [
    ({"directions": ["t2b"]}, "mixed_shift.directions[0]: unknown direction 't2b' (did you mean 't2v'?)"),
    ({"directions": ["t2v"], "severity_mix": {"text_perturbations": ["formal"]}},
     "unknown character- or word-level text perturbation (sentence-level types have one severity) 'formal'"),
    ({"directions": ["t2v"], "type_mix": {"text_severities": [8]}}, "mixed_shift.type_mix.text_severities[0]"),
    ({"type_mix": {"fractions": [1.5]}}, "mixed_shift.type_mix.fractions[0]: a share of the queries in (0, 1]"),
    ({"severity_mix": {"severities": [7]}}, "mixed_shift.severity_mix.severities[0]: unknown severity 7"),
    ({"severity_mix": {"perturbations": ["gausian_noise"]}}, "did you mean 'gaussian_noise'"),
    ({"severity_mix": None, "type_mix": None}, "give severity_mix (Table 17), type_mix (Table 18) or both"),
])
def test_bad_mixed_sections_fail_at_load(change, message):
    section = {**MICRO["mixed_shift"], **change}
    section = {k: v for k, v in section.items() if v is not None}
    with pytest.raises(GridError) as info:
        parse_grid({**MICRO, "mixed_shift": section}, "mix.yaml")
    assert message in str(info.value)


def test_a_type_mix_trial_corrupts_exactly_its_draws(tmp_path, shared_cache):
    """Source scores each query on its own (no adaptation), so a 50% type mix must score the spared queries exactly
    as the clean trial does and the corrupted ones differently."""
    from orchestrator.planning.render_sets import render_keys
    from workloads.render_cache import RenderCache, render_video
    from workloads.trial import TrialContext, query_cells, run

    grid = parse_grid({**MICRO, "mixed_shift": {"datasets": ["synthetic"], "type_mix": {
        "fractions": [0.5], "perturbations": ["gaussian_noise"], "severities": [5]}}}, "mix.yaml")
    plan = build_plan(grid, Paths.make(tmp_path / "r", shared_cache))
    (mixed,) = plan.trials
    cache = RenderCache(tmp_path / "render")
    ds = plan.datasets["synthetic"]
    for pair in ds.test.pairs:
        assert all(s["status"] == "ok" for s in render_video(pair.video_path, render_keys(plan, "synthetic",
                                                                                              pair.video_id), cache))
    ctx = TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root,
                       dataset_options=ds.options, scores_dir=str(tmp_path / "scores"))
    clean = TrialSpec(**{**mixed.to_dict(), "perturbation": "clean", "severity": 0, "mix": "", "render_assets": ""})
    a, b = run(mixed, ctx), run(clean, ctx)
    assert a.status == b.status == "ok" and a.n_queries == 40
    sa, sb = np.load(a.scores_path).astype(np.float32), np.load(b.scores_path).astype(np.float32)
    hit = np.array([c != ("clean", 0) for c in query_cells(mixed, 40)])
    assert hit.sum() == 20
    assert np.array_equal(sa[~hit], sb[~hit]) and not np.allclose(sa[hit], sb[hit])


def test_tables_17_and_18_layouts(tmp_path, shared_cache):
    grid = parse_grid({**MICRO, "mixed_shift": {**MICRO["mixed_shift"], "type_mix": {
        "fractions": [0.2, 0.8], "perturbations": "all"}}}, "mix.yaml")
    plan = build_plan(grid, Paths.make(tmp_path / "r", shared_cache))
    entries = [{"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": float(i)}}
               for i, t in enumerate(plan.trials)]
    write_tables(entries, tmp_path / "t", grid)
    sev = pd.read_parquet(tmp_path / "t" / "mixed_severities.parquet")
    assert list(sev.columns) == ["dataset", "direction", "backbone", "method", "gaussian_noise", "impulse_noise",
                                 "Avg", "gaussian_noise:state", "impulse_noise:state", "Avg:state"]
    assert set(sev["Avg:state"]) == {"ok"}
    assert sev["Avg"].iloc[0] == pytest.approx((0.0 + 1.0) / 2)
    types = pd.read_parquet(tmp_path / "t" / "mixed_types.parquet")
    assert list(types.columns) == ["dataset", "direction", "backbone", "method", "20%", "80%", "Avg", "20%:state",
                                   "80%:state", "Avg:state"]
    assert (tmp_path / "t" / "mixed_tables.md").read_text().count("## ") == 2


def test_a_t2v_type_mix_trial_perturbs_exactly_its_draws(tmp_path, shared_cache):
    """The t2v analogue: half of the captions replaced by their char_swap-7 versions from the text set, the rest
    scored exactly as the clean t2v trial scores them (Source, no adaptation)."""
    from orchestrator.planning.render_sets import render_keys
    from orchestrator.config.assets import text_assets
    from workloads.render_cache import RenderCache, render_video
    from workloads.text_queries import TextSetKey, read_text_set, render_text_set
    from workloads.trial import TrialContext, query_cells, run

    grid = parse_grid({**MICRO, "mixed_shift": {"datasets": ["synthetic"], "directions": ["t2v"], "type_mix": {
        "fractions": [0.5], "text_perturbations": ["char_swap"], "text_severities": [7]}}}, "mix.yaml")
    plan = build_plan(grid, Paths.make(tmp_path / "r", shared_cache))
    (mixed,) = plan.trials
    assert mixed.direction == "t2v" and plan.renders == {"synthetic": [("clean", 0)]}
    (job,) = plan.text_sets                        # char_swap does not retry: one set, no stand-in encoder
    assert job.key.perturbation == "char_swap" and job.key.severity == 7 and job.stand_in is None
    cache = RenderCache(tmp_path / "render")
    ds = plan.datasets["synthetic"]
    for pair in ds.test.pairs:
        render_video(pair.video_path, render_keys(plan, "synthetic", pair.video_id), cache)
    render_text_set(job.key, cache.root, [p.caption for p in ds.test.pairs], [p.video_id for p in ds.test.pairs],
                    text_assets(grid, "synthetic", "char_swap"))
    ctx = TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root,
                       dataset_options=ds.options, scores_dir=str(tmp_path / "scores"))
    clean = TrialSpec(**{**mixed.to_dict(), "perturbation": "clean", "severity": 0, "mix": "", "render_assets": ""})
    a, b = run(mixed, ctx), run(clean, ctx)
    assert a.status == b.status == "ok", a.error
    assert a.faithful_renders == 1.0                # nlpaug character level: the authors' algorithm
    sa, sb = np.load(a.scores_path).astype(np.float32), np.load(b.scores_path).astype(np.float32)
    hit = np.array([c != ("clean", 0) for c in query_cells(mixed, 40)])
    assert hit.sum() == 20
    texts = read_text_set(TextSetKey(**{**job.key.__dict__}), cache.root).texts
    changed = np.array([t != p.caption for t, p in zip(texts, ds.test.pairs)])
    # spared captions score as in the clean trial up to float rounding (a batch runs the text encoder to its longest
    # caption, and perturbed neighbours change that length); perturbed ones differ by far more
    assert np.abs(sa[~hit] - sb[~hit]).max() < 1e-3
    assert np.abs(sa[hit & changed] - sb[hit & changed]).max(axis=1).min() > 1e-2
