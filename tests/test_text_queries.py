"""Text-query shift (t2v): grid keys, cells per level and severity, unavailable types listed with their reason, text
sets keyed by what makes them (a stand-in encoder belongs to its model), the cache file, the Table 3 layout, and a
perturbed-t2v submission end to end through Ray Data, Ray Tune, MLflow and Parquet."""
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.config.errors import GridError
from orchestrator.config.grid import load_grid
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.report.rows import table_order
from orchestrator.config.scenarios.query_shift import QueryShift
from tests.conftest import write_micro_grid
from workloads.perturbations.text import TEXT_PERTURBATIONS
from workloads.perturbations.text import _tiny
from workloads.text_queries import TextSet, TextSetKey, TextSetMissing, read_text_set, write_text_set

TEXT = """
query_shift:
  datasets: [synthetic]
  directions: [t2v]
  text_perturbations: {types}
  clean: true
{extra}
"""


def text_grid(tmp_path, types="[char_swap, word_swap]", extra="", name="text", methods="[source, tent]",
              backbones="[clip4clip, xpool]"):
    path = write_micro_grid(tmp_path / f"{name}.yaml", name=name, methods=methods, backbones=backbones)
    # replace the v2t query_shift section of the micro grid by a t2v one
    body = path.read_text().split("query_shift:")[0]
    path.write_text(body + TEXT.format(types=types, extra=extra) + "runtime: {cpus_per_trial: 1}\n")
    return path


def test_cells_per_level_default_severities_and_unavailable_types(tmp_path, shared_cache):
    grid = load_grid(text_grid(tmp_path, types="[ocr, char_swap, word_swap, back_translation, formal]"))
    plan = build_plan(grid, Paths.make(tmp_path / "r", shared_cache))
    cells = {(t.perturbation, t.severity) for t in plan.trials}
    # character level at 7, word level at 2 (the authors' example); the sentence types lack models here
    assert cells == {("clean", 0), ("ocr", 7), ("char_swap", 7), ("word_swap", 2)}
    assert len(plan.trials) == 4 * 2 * 2
    assert [n.split(":")[0] for n in plan.notes] == ["synthetic t2v back_translation", "synthetic t2v formal"]
    assert all("unavailable" in n and "text_precomputed" in n for n in plan.notes)
    # clean gallery clips only: text queries render no video
    assert plan.renders == {"synthetic": [("clean", 0)]}


def test_text_sets_stand_in_encoder_belongs_to_its_model_and_a_given_encoder_is_shared(tmp_path, shared_cache):
    plan = build_plan(load_grid(text_grid(tmp_path)), Paths.make(tmp_path / "r", shared_cache))
    jobs = {(j.key.perturbation, j.stand_in) for j in plan.text_sets}
    # char_swap does not retry on similarity: one set for both backbones; word_swap retries with each backbone's
    # own text encoder as the stand-in, so each backbone has its own set
    assert jobs == {("char_swap", None), ("word_swap", CheckpointKey("clip4clip", "synthetic")),
                    ("word_swap", CheckpointKey("xpool", "synthetic"))}
    by_key = {}
    for t in plan.trials:
        if t.perturbation != "clean":
            by_key.setdefault((t.perturbation, t.backbone), set()).add(t.render_assets)
    assert by_key[("char_swap", "clip4clip")] == by_key[("char_swap", "xpool")]
    assert by_key[("word_swap", "clip4clip")] != by_key[("word_swap", "xpool")]

    encoder = _tiny.build_sentence_encoder(tmp_path / "encoder", ["a red ball moves left"])
    grid = load_grid(text_grid(tmp_path, extra=f"assets: {{sentence_encoder: {encoder}}}", name="enc"))
    plan2 = build_plan(grid, Paths.make(tmp_path / "r", shared_cache))
    assert {(j.key.perturbation, j.stand_in) for j in plan2.text_sets} == {("char_swap", None), ("word_swap", None)}
    # the encoder is part of what makes the set: another key than the stand-in's
    assert not {j.key for j in plan2.text_sets} & {j.key for j in plan.text_sets if j.key.perturbation == "word_swap"}


@pytest.mark.parametrize("extra, types, message", [
    ("", "[char_swapp]", "did you mean 'char_swap'"),
    ("  text_severities: {character: [8]}", "[char_swap]", "text_severities.character"),
    ("  text_severities: {sentence: [2]}", "[char_swap]", "text_severities.sentence"),
    ("  text_severities: {letter: [1]}", "[char_swap]", "text_severities"),
    ("  text_severities: {word: []}", "[char_swap]", "at least one severity"),
])
def test_bad_text_keys_are_one_line_errors(tmp_path, extra, types, message):
    with pytest.raises(GridError, match=message) as err:
        load_grid(text_grid(tmp_path, types=types, extra=extra))
    assert "\n" not in str(err.value)


def test_text_perturbations_need_t2v(tmp_path):
    path = write_micro_grid(tmp_path / "g.yaml", extra="")
    path.write_text(path.read_text().replace("  clean: true", "  clean: true\n  text_perturbations: [ocr]"))
    with pytest.raises(GridError, match="text perturbations shift text queries"):
        load_grid(path)


def test_precomputed_path_must_exist(tmp_path):
    path = text_grid(tmp_path, types="[back_translation]")
    path.write_text(path.read_text().replace(
        "  synthetic: {options:", "  synthetic: {assets: {text_precomputed: {back_translation: /no/such.json}},"
        " options:"))
    with pytest.raises(GridError, match="text_precomputed.back_translation: file not found"):
        load_grid(path)


def test_text_set_file_round_trip_and_damage(tmp_path):
    key = TextSetKey("synthetic", "v1", "ocr", 7, 0, "text:abc")
    write_text_set(key, tmp_path, TextSet(["a b", "c d"], [True, False], {"x": 1}, {"m": 1}, ["v0", "v1"]))
    got = read_text_set(key, tmp_path, 2)
    assert got.texts == ["a b", "c d"] and got.faithful_share == 0.5
    with pytest.raises(TextSetMissing, match="holds 2 captions, the split has 3"):
        read_text_set(key, tmp_path, 3)
    other = TextSetKey("synthetic", "v1", "ocr", 7, 1, "text:abc")       # another seed: another file
    with pytest.raises(TextSetMissing, match="not rendered"):
        read_text_set(other, tmp_path)
    key.path(tmp_path).write_text("{broken")
    with pytest.raises(TextSetMissing, match="unreadable"):
        read_text_set(key, tmp_path)
    assert not key.path(tmp_path).exists()      # removed, so the next submission re-renders it


def test_table3_layout_groups_text_types_by_level():
    rows = []
    for backbone in ("clip4clip", "xpool"):
        for method in ("source", "tent"):
            for pert, sev, r1 in (("clean", 0, 50.0), ("ocr", 7, 30.0), ("char_swap", 7, 20.0),
                                  ("word_swap", 2, 40.0)):
                rows.append({"scenario": "query_shift", "status": "ok", "dataset": "synthetic", "direction": "t2v",
                             "backbone": backbone, "backbone_label": backbone, "row": method,
                             "perturbation": pert, "severity": sev,
                             "R1": r1 + (method == "tent"), "hub_skewness": 1.0})
    grid = load_grid_like(["clip4clip", "xpool"], ["source", "tent"])
    tables = QueryShift(None).tables(grid, pd.DataFrame(rows), table_order(grid), metric="R1")
    assert len(tables) == 1
    t = tables[0]
    assert "character 7" in t.title and "word 2" in t.title
    assert [c[1] for c in t.columns] == ["ocr", "char_swap", "Avg character", "word_swap", "Avg word", "Avg", "Clean"]
    assert [c[0] for c in t.columns][:5] == ["character", "character", "character", "word", "word"]
    row = {c[1]: t.cell(("clip4clip", "source"), c).number for c in t.columns}
    assert row["Avg character"] == 25.0 and row["Avg"] == 30.0 and row["Clean"] == 50.0
    assert t.rows == [(b, m) for b in ("clip4clip", "xpool") for m in ("source", "tent")]


def load_grid_like(backbones, methods):
    class G:
        pass

    g = G()
    g.backbones, g.methods = backbones, methods
    return g


def test_every_registered_text_type_has_a_level_for_the_table_order():
    order = table_order(load_grid_like(["clip4clip"], ["source"]))
    assert order.perturbations["t2v"] == list(TEXT_PERTURBATIONS.names())
    assert set(order.levels["t2v"].values()) == {"character", "word", "sentence"}


@pytest.mark.e2e
def test_perturbed_t2v_end_to_end_through_ray_tune_mlflow_and_parquet(tmp_path, shared_cache, worker_ray):
    from orchestrator.run.options import SubmitOptions
    from orchestrator.run.submit import submit

    grid_file = text_grid(tmp_path, name="text_e2e", types="[char_swap, word_swap, back_translation]",
                          backbones="[clip4clip]")
    results = tmp_path / "results"
    report = submit(str(grid_file), SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache), num_cpus=2,
                                                  dashboard=False))
    assert report.to_run == 6 and report.ok == 6 and report.failed == 0   # 3 cells x 2 methods
    trials = pq.read_table(results / "text_e2e" / "trials.parquet").to_pandas()
    by_cell = trials.set_index(["perturbation", "method"])
    # character level: nlpaug, no retry -> every caption faithful; word level: the stand-in encoder -> flagged
    assert by_cell.loc[("char_swap", "source"), "faithful_renders"] == 1.0
    assert by_cell.loc[("word_swap", "source"), "faithful_renders"] == 0.0
    assert "stand-in" in by_cell.loc[("word_swap", "source"), "fallbacks"]
    # the queries really are the perturbed captions: the source model scores them differently from the clean ones (the
    # micro model is near chance, so R@1 itself says little; the synthetic-default check is in benchmarks/RESULTS.md)
    import numpy as np

    scores = results / "text_e2e" / "scores"
    clean = np.load(scores / f"{by_cell.loc[('clean', 'source'), 'key']}.npy")
    swapped = np.load(scores / f"{by_cell.loc[('char_swap', 'source'), 'key']}.npy")
    assert clean.shape == swapped.shape == (40, 40) and np.abs(clean - swapped).max() > 1e-3
    assert (trials["n_queries"] == 40).all()

    table = pq.read_table(results / "text_e2e" / "qs_R1.parquet").to_pandas()
    cols = ["char_swap", "Avg character", "word_swap", "Avg word", "Avg", "Clean"]
    # the values, their states, then each value's 95% interval (a bootstrap over the queries: one seed here)
    assert list(table.columns) == ["dataset", "direction", "severity", "backbone", "method", *cols,
                                   *(f"{c}:state" for c in cols), *(f"{c}:{e}" for c in cols for e in ("low", "high"))]
    assert (table["char_swap:low"] <= table["char_swap"]).all()
    assert (table["char_swap"] <= table["char_swap:high"]).all()
    assert not table[["char_swap", "word_swap", "Clean"]].isna().any().any()

    sets = sorted((shared_cache / "render" / "_text" / "synthetic").glob("*.json"))
    names = {p.name.rsplit("-", 1)[0] for p in sets}
    assert {"char_swap-7", "word_swap-2"} <= names
    data = json.loads(next(p for p in sets if p.name.startswith("char_swap-7")).read_text())
    originals = [p.caption for p in build_plan(load_grid(grid_file), Paths.make(results, shared_cache))
                 .datasets["synthetic"].test.pairs]
    assert len(data["texts"]) == 40 and sum(a != b for a, b in zip(data["texts"], originals)) > 30

    client = MlflowClient(tracking_uri=report.tracking_uri)
    exp = client.get_experiment_by_name("mlvp/text_e2e")
    children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{report.parent_run_id}'")
    assert len(children) == 6
    assert {r.data.params["perturbation"] for r in children} == {"clean", "char_swap", "word_swap"}

    again = submit(str(grid_file), SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache),
                                                 dashboard=False))
    assert again.to_run == 0
