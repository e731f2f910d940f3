"""Seeds as an axis and the `search:` section: what a grid accepts, what the plan holds, how configurations are keyed
(orchestrator/config/search.py, orchestrator/planning/search.py). No trial runs here: tests/test_hp_selection_e2e.py
submits a searched grid."""
from __future__ import annotations

import json

import pytest

from orchestrator.config.errors import GridError
from orchestrator.config.grid import load_grid, parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.planning.search import configs_per_cell, sampled_configs, searched_count, tpe_streams

BASE = {"name": "hp", "models": {"clip_model": "mlvp-micro"},
        "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
        "backbones": ["clip4clip"], "methods": ["source", "tent", "eata"],
        "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise", "impulse_noise"],
                        "severities": [5], "clean": False}}
SEARCH = {"algorithm": "random", "budget": 3, "seed": 0,
          "methods": {"tent": {"lr": {"loguniform": [1e-5, 1e-2]}, "steps": [1, 3]},
                      "eata": {"temperature": [0.01, 0.02]}}}


def grid_of(**changes):
    return parse_grid({**BASE, **changes}, "hp.yaml")


def plan_of(tmp_path, **changes):
    return build_plan(grid_of(**changes), Paths.make(tmp_path / "results", tmp_path / "cache"))


@pytest.mark.parametrize("change, message", [
    ({"seeds": [0, 1, 1]}, "seeds: 1 is listed twice"),
    ({"search": {**SEARCH, "methods": {"tent": {"lr": {"loguniform": [0, 1e-3]}}}}},
     "search.methods.tent.lr.loguniform: low must be > 0"),
    ({"search": {**SEARCH, "methods": {"tent": {"lrate": [1e-4]}}}}, "search.methods.tent.lrate"),
    ({"search": {**SEARCH, "methods": {"tent": {"lr": [-1.0]}}}}, "search.methods.tent.lr"),
    ({"search": {**SEARCH, "methods": {"source": {"lr": [1e-4]}}}}, "Source does not adapt"),
    ({"search": {**SEARCH, "methods": {"sar": {"lr": [1e-4]}}}}, "search.methods.sar: not a method of this grid"),
    ({"search": {**SEARCH, "algorithm": "grid"}}, "grid search takes lists of values"),
    ({"search": {**SEARCH, "algorithm": "grid", "budget": 2, "methods": {"tent": {"steps": [1, 2, 3]}}}},
     "grid search has 3 combinations, more than search.budget (2)"),
    ({"search": {**SEARCH, "methods": {"tent": {"steps": {"uniform": [1, 3]}}}}}, "steps takes integers"),
    ({"search": {**SEARCH, "budget": 0}}, "search.budget"),
    ({"search": {**SEARCH, "objective": "accuracy"}}, "search.objective"),
    ({"runtime": {"stream_order": "random"}}, "runtime.stream_order"),
    ({"search": {**SEARCH, "algorithm": "tpe", "source_pairs": 0}}, "source_R1 needs source pairs"),
])
def test_bad_search_and_seeds_fail_in_one_line_naming_the_key(change, message):
    with pytest.raises(GridError) as err:
        grid_of(**change)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_seeds_and_searched_configurations_multiply_the_trials(tmp_path):
    plan = plan_of(tmp_path, seeds=[0, 1, 2], search=SEARCH)
    cells, seeds = 2, 3
    per_cell = 1 + configs_per_cell(plan.grid, "tent") + configs_per_cell(plan.grid, "eata")   # source + searched
    assert configs_per_cell(plan.grid, "tent") == 1 + 3 and configs_per_cell(plan.grid, "eata") == 1 + 3
    assert len(plan.trials) == cells * seeds * per_cell
    assert sorted({t.seed for t in plan.trials}) == [0, 1, 2]
    assert len({t.key for t in plan.trials}) == len(plan.trials)
    assert plan.summary()["trials_searched"] == cells * seeds * 6 and searched_count(plan) == 36
    # every searched trial carries its own options and steps over the grid's, and the source pairs to retrieve
    tent = [t for t in plan.trials if t.method == "tent" and t.config]
    assert {t.config for t in tent} == {"random-1", "random-2", "random-3"}
    assert all(1e-5 <= json.loads(t.options)["lr"] <= 1e-2 and t.steps in (1, 3) for t in tent)
    assert all(t.source_pairs == 128 for t in plan.trials)
    # the same configurations in every cell and seed (the cross-shift protocol reads them across cells)
    by_name = {}
    for t in tent:
        by_name.setdefault(t.config, set()).add((t.options, t.steps))
    assert all(len(v) == 1 for v in by_name.values())
    # render sets are rendered at every seed
    assert plan.render_count() == 40 * 2 * 3


def test_configurations_are_drawn_again_with_the_same_keys_and_a_larger_budget_keeps_them(tmp_path):
    first = {t.key for t in plan_of(tmp_path, search=SEARCH).trials}
    again = {t.key for t in plan_of(tmp_path, search=SEARCH).trials}
    assert first == again
    larger = {t.key for t in plan_of(tmp_path, search={**SEARCH, "budget": 5}).trials}
    assert first < larger and len(larger - first) == 2 * 2 * 2   # 2 more configs x 2 methods x 2 cells
    # another sampler seed draws other learning rates (a continuous range: no draw repeats)
    def tent_searched(plan):
        return {t.key for t in plan.trials if t.method == "tent" and t.config}

    assert not tent_searched(plan_of(tmp_path, search=SEARCH)) & tent_searched(
        plan_of(tmp_path, search={**SEARCH, "seed": 1}))


def test_plan_time_draws_are_those_ray_tunes_domains_make():
    """The planning layer draws random configurations without Ray (orchestrator/planning/search.py `draw`); the values
    must be those Ray Tune's domains drew from the same generator, or every random search's trial keys would change."""
    import numpy as np

    from orchestrator.config.search import Domain
    from orchestrator.planning.search import draw
    from orchestrator.run.search import tune_domain

    domains = [Domain("lr", distribution="loguniform", low=1e-6, high=1e-2),
               Domain("temperature", distribution="uniform", low=0.001, high=0.5),
               Domain("steps", distribution="randint", low=1, high=5),
               Domain("k", values=(8, 16, 32)), Domain("mode", values=("a", "b"))]
    for seed in range(5):
        ours, tunes = np.random.default_rng(seed), np.random.default_rng(seed)
        for _ in range(20):
            for d in domains:
                a, b = draw(d, ours), tune_domain(d).sample(random_state=tunes)
                assert a == b and type(a) is type(b), (d, a, b)


def test_grid_search_takes_every_combination_in_order():
    grid = grid_of(search={"algorithm": "grid", "budget": 4,
                           "methods": {"tent": {"steps": [1, 3], "temperature": [0.01, 0.05]}}})
    configs = sampled_configs(grid, "tent")
    assert [(c.steps, c.options["temperature"]) for c in configs] == [(1, 0.01), (1, 0.05), (3, 0.01), (3, 0.05)]
    assert [c.name for c in configs] == ["grid-1", "grid-2", "grid-3", "grid-4"]


def test_a_grid_without_search_keeps_its_trial_keys(tmp_path):
    """Seeds, configurations and source pairs are new spec fields: at their defaults the keys are those of before."""
    plain = plan_of(tmp_path)
    assert all(t.config == "" and t.stream_order == "" and t.source_pairs == 0 for t in plain.trials)
    from workloads.seeding import digest
    from workloads import RENDER_VERSION, TRIAL_VERSION

    # left out of a key while at their defaults
    added = ("mix", "config", "stream_order", "source_pairs", "backbone_options", "backbone_variant", "protocol",
             "protocol_options", "segments")
    spec = {k: v for k, v in plain.trials[0].to_dict().items() if k not in added}
    assert plain.trials[0].key == digest({"spec": spec, "trial": TRIAL_VERSION, "render": RENDER_VERSION}, length=20)


def test_tpe_is_counted_by_the_plan_and_proposed_while_running(tmp_path):
    plan = plan_of(tmp_path, seeds=[0, 1], search={**SEARCH, "algorithm": "tpe", "budget": 4})
    assert not any(t.config for t in plan.trials)           # nothing drawn at plan time
    assert len(tpe_streams(plan)) == 2 * 2 * 2                # (tent, eata) x 2 cells x 2 seeds
    assert plan.summary()["trials_searched"] == 8 * 4


def test_shipped_selection_grids_plan(tmp_path, mlvp_env):
    from orchestrator.planning.plan import plan_for_sizing
    from orchestrator.config.shipped import shipped_grids

    grids = shipped_grids()
    small = load_grid(grids["hp_selection"])
    assert small.trial_seeds == [0, 1, 2] and {"tent", "tcr", "hat_vtr"} <= set(small.search.methods)
    assert len(small.search.methods) >= 4 and len(small.query_shift.perturbations) == 3
    full = plan_for_sizing(grids["full_mlvp_hp"], Paths.make(tmp_path / "results", tmp_path / "cache"))
    summary = full.summary()
    # 12 types x 2 backbones x 3 seeds x (Source + 6 methods x (1 + 8 configurations))
    assert summary["trials"] == 12 * 2 * 3 * (1 + 6 * 9) and summary["trials_searched"] == 12 * 2 * 3 * 6 * 8


def test_the_cost_model_prices_every_seed_of_a_render_set(tmp_path):
    from orchestrator.planning.cost_model import PlanCosts
    from orchestrator.planning.keys import RenderSet

    one, three = plan_of(tmp_path / "one"), plan_of(tmp_path / "three", seeds=[0, 1, 2])
    rs = RenderSet("synthetic", "gaussian_noise", 5)
    assert PlanCosts(three).render_set_seconds(rs) == pytest.approx(3 * PlanCosts(one).render_set_seconds(rs))


def test_a_searched_trials_console_line_names_its_configuration(tmp_path):
    """The line `submit` prints as each trial finishes (orchestrator/record/recorder.py `TrialColumns`), on the trials
    of the shipped hp_selection grid: a searched configuration's line carries the values its search varies, after its
    result, so the configurations of one cell read apart; the grid's own configuration's line has none, as before.
    Alignment, seeds and failures: tests/test_trial_lines.py."""
    from rich.text import Text

    from orchestrator.config.shipped import shipped_grids
    from orchestrator.planning.plan import plan_for_sizing
    from orchestrator.record.recorder import TrialColumns, trial_line

    plan = plan_for_sizing(shipped_grids()["hp_selection"], Paths.make(tmp_path / "results", tmp_path / "cache"))
    columns = TrialColumns.for_plan(plan)
    assert columns.searched["tent"] == ("lr", "temperature", "steps")
    cell = [t for t in plan.trials if t.method == "tent" and t.seed == 0 and t.perturbation == "gaussian_noise"]
    own = next(t for t in cell if not t.config)
    searched = [t for t in cell if t.config]
    assert len(searched) == plan.grid.search.budget

    def line(spec, status="ok"):
        result = {"spec": spec.to_dict(), "status": status, "metrics": {"R1": 12.5, "hub_skewness": 1.25},
                  "timings": {"total_s": 2.0}, "error": "RuntimeError: NaN scores"}
        return Text.from_markup(trial_line(result, columns)).plain   # as the console shows it

    assert line(own).split() == ["synthetic", "clip4clip", "tent", "v2t", "gaussian_noise-5", "seed", "0", "R@1",
                                 "12.5", "skew", "1.25", "(2.0s)"]
    lines = [line(t) for t in searched]
    assert len(set(lines)) == len(searched)   # every configuration of the cell reads apart
    for t, text in zip(searched, lines):
        options = json.loads(t.options)
        config = f"lr={options['lr']:.3g} temperature={options['temperature']:.3g} steps={t.steps}"
        assert text.endswith(f"  {config}") and "\n" not in text, text
        assert text.replace(f" {config}", "").split() == line(own).split()   # only the configuration added
    failed = line(searched[0], "failed")
    assert f"lr={json.loads(searched[0].options)['lr']:.3g}" in failed and failed.endswith("  RuntimeError: NaN scores")
    assert failed.split()[7] == "failed" and "R@1" not in failed
    # a recorder not told of the search names the configuration, last
    assert trial_line({"spec": searched[0].to_dict(), "status": "ok", "metrics": {"R1": 1.0, "hub_skewness": 0.0},
                       "timings": {}}).split()[-1] == searched[0].config
