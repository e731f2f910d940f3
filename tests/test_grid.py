import copy
from pathlib import Path

import pytest
import yaml

from orchestrator.grid import GridError, load_grid, parse_grid
from orchestrator.plan import Paths, build_plan

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "name": "t",
    "datasets": {"synthetic": {}},
    "backbones": ["clip4clip"],
    "methods": ["source"],
    "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise"], "severities": [1]},
}


def grid_with(**changes):
    g = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = g
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return g


def error_of(data) -> str:
    with pytest.raises(GridError) as info:
        parse_grid(data, "g.yaml")
    msg = str(info.value)
    assert "\n" not in msg, "errors are one line"
    return msg


def test_quickstart_grid_is_valid_and_plans_the_issue_matrix():
    grid = load_grid(ROOT / "grids" / "quickstart.yaml")
    assert grid.backbones == ["clip4clip", "xpool"] and grid.methods == ["source", "tent"]
    plan = build_plan(grid, Paths.make("/tmp/mlvp-grid-test"))
    # (clean + 2 perturbations x 3 severities) x 2 backbones x 2 methods
    assert len(plan.trials) == (1 + 2 * 3) * 2 * 2
    assert {t.direction for t in plan.trials} == {"v2t"}
    assert len({t.key for t in plan.trials}) == len(plan.trials)
    assert plan.renders["synthetic"][0] == ("clean", 0) and len(plan.renders["synthetic"]) == 7


def test_unknown_key_names_the_key_and_allowed_keys():
    msg = error_of(grid_with(query_shift__perturbation=["fog"]))
    assert msg.startswith("g.yaml: query_shift.perturbation: unknown key")
    assert "perturbations" in msg
    msg = error_of(grid_with(bogus=1))
    assert "bogus: unknown key" in msg and "backbones" in msg


def test_wrong_types():
    assert "runtime.batch_size: expected an integer, got 'sixteen'" in error_of(grid_with(runtime__batch_size="sixteen"))
    assert "faithful: expected true/false" in error_of(grid_with(faithful="yes"))
    assert "methods: expected a list of strings" in error_of(grid_with(methods="tent"))
    assert "query_shift.severities[0]: expected an integer" in error_of(grid_with(query_shift__severities=[1.5]))


def test_unknown_names_list_the_allowed_values():
    msg = error_of(grid_with(methods=["source", "tnet"]))
    assert "methods[1]: unknown method or variant 'tnet'" in msg and "tent" in msg
    msg = error_of(grid_with(backbones=["clip"]))
    assert "unknown backbone 'clip'" in msg and "clip4clip" in msg and "xpool" in msg
    msg = error_of(grid_with(query_shift__perturbations=["gaussian"]))
    assert "unknown video perturbation 'gaussian'" in msg and "gaussian_noise" in msg
    msg = error_of(grid_with(query_shift__severities=[6]))
    assert "unknown severity 6" in msg
    msg = error_of(grid_with(datasets={"msrvt": {}}))
    assert "unknown dataset 'msrvt'" in msg and "msrvtt" in msg
    msg = error_of(grid_with(query_shift__datasets=["msrvtt"]))
    assert "declare it under datasets" in msg


def test_missing_required_and_bad_values():
    g = copy.deepcopy(BASE)
    del g["methods"]
    assert "methods: required key is missing" in error_of(g)
    assert "runtime.precision: 'fp16' is not allowed" in error_of(grid_with(runtime__precision="fp16"))
    assert "runtime.steps: must be >= 1" in error_of(grid_with(runtime__steps=0))
    assert "duplicate method or variant 'source'" in error_of(grid_with(methods=["source", "source"]))
    assert "checkpoint file not found" in error_of(grid_with(models__checkpoints={"clip4clip": {"synthetic": "/nope.pt"}}))
    assert "directory not found" in error_of(grid_with(datasets={"synthetic": {"root": "/no/such/dir"}}))


def test_load_grid_file_errors(tmp_path):
    with pytest.raises(GridError, match="grid file not found"):
        load_grid(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(GridError, match="not valid YAML"):
        load_grid(bad)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(BASE))
    assert load_grid(good).source == str(good)


def test_every_shipped_grid_is_valid(mlvp_env):
    # grids on real data name it through the environment: mlvp_env points it at stand-in annotation files
    paths = sorted((ROOT / "grids").glob("*.yaml"))
    assert len(paths) >= 5
    for path in paths:
        load_grid(path)


def test_method_variants_become_their_own_rows_with_their_options():
    g = grid_with(methods=["source", "hat_vtr", "no_hsm", "fixed"],
                  variants={"no_hsm": {"method": "hat_vtr", "options": {"hsm_target": False, "hsm_rerank": False}},
                            "fixed": {"method": "hat_vtr", "faithful": False}})
    plan = build_plan(parse_grid(g, "g.yaml"), Paths.make("/tmp/mlvp-grid-test"))
    by_label = {}
    for t in plan.trials:
        by_label.setdefault(t.method_label, []).append(t)
    assert set(by_label) == {"source", "hat_vtr", "no_hsm", "fixed"}
    no_hsm = by_label["no_hsm"][0]
    assert no_hsm.method == "hat_vtr" and no_hsm.method_options == {"hsm_target": False, "hsm_rerank": False}
    assert by_label["fixed"][0].faithful is False and by_label["hat_vtr"][0].faithful is True
    assert len({t.key for t in plan.trials}) == len(plan.trials)


def test_variant_and_method_option_errors():
    msg = error_of(grid_with(methods=["v"], variants={"v": {"method": "hat_vtr", "options": {"hsm": False}}}))
    assert "variants.v.options: method 'hat_vtr' does not take option(s) ['hsm']" in msg and "hsm_rerank" in msg
    msg = error_of(grid_with(methods=["v"], variants={"v": {"method": "hatvtr"}}))
    assert "variants.v.method: 'hatvtr' is not allowed" in msg
    msg = error_of(grid_with(variants={"tent": {"method": "tent"}}))
    assert "cannot take a method's name" in msg
    msg = error_of(grid_with(methods=["tent"], method_options={"tent": {"lr": "fast"}}))
    assert "method_options.tent: option 'lr' of method 'tent' must be a finite number" in msg
    # lr / weight_decay / temperature are accepted by every method
    parse_grid(grid_with(methods=["tent"], method_options={"tent": {"lr": 1e-4, "temperature": 0.01}}), "g.yaml")


def test_t2v_runs_clean_cells_beside_perturbed_v2t():
    plan = build_plan(parse_grid(grid_with(query_shift__directions=["v2t", "t2v"]), "g.yaml"),
                      Paths.make("/tmp/mlvp-grid-test"))
    cells = {(t.direction, t.perturbation) for t in plan.trials}
    assert cells == {("v2t", "clean"), ("v2t", "gaussian_noise"), ("t2v", "clean")}
    assert "video perturbations shift video queries" in error_of(
        grid_with(query_shift__directions=["t2v"]))
    assert "t2v runs only the clean cell" in error_of(
        grid_with(query_shift__directions=["v2t", "t2v"], query_shift__clean=False))
