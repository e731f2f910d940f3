"""Query-gallery shift: cross-dataset and zero-shot scenarios (orchestrator/config/scenarios), the identity-initialised
X-Pool head of zero-shot X-Pool, the tables in the layout of the paper's Tables 4-5, and a submission end to end through
Ray Tune, MLflow and Parquet on the embedded default."""
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from mlflow.tracking import MlflowClient

from orchestrator.config.grid import load_grid, parse_grid
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.report.results import write_tables
from orchestrator.report.rows import trial_rows
from orchestrator.config.scenarios import SCENARIOS
from orchestrator.config.scenarios.base import PRETRAINED
from workloads.backbones import create_backbone
from workloads.backbones.model import cosine_similarity
from workloads.backbones.xpool import XPoolPooling

QGS_GRID = """
name: {name}
seed: 0
datasets:
  synthetic: {{options: {{n_train: 96, n_test: 40, size: 32}}}}
  synthetic_b: {{options: {{n_train: 96, n_test: 40, size: 32}}}}
models:
  clip_model: mlvp-micro
  finetune: {{steps: 12, batch_size: 32, xpool_steps: 6, precision: fp32}}
  zero_shot_pretrain: {{dataset: synthetic_c, options: {{n_train: 96, n_test: 40, size: 32}}, steps: 12,
                        batch_size: 32, precision: fp32}}
backbones: [clip4clip, xpool]
methods: {methods}
query_gallery_shift:
  cross_dataset: {{pairs: {pairs}}}
  zero_shot: {{datasets: [synthetic_b]}}
  directions: [v2t, t2v]
"""


def qgs_grid(path, name="qgs", methods="[source, tent]", pairs="[[synthetic, synthetic_b], [synthetic_b, synthetic]]"):
    path.write_text(QGS_GRID.format(name=name, methods=methods, pairs=pairs))
    return path


def test_plan_cells_models_and_renders(tmp_path, shared_cache):
    plan = build_plan(load_grid(qgs_grid(tmp_path / "g.yaml")), Paths.make(tmp_path / "r", shared_cache))
    by = {(t.scenario, t.source_dataset, t.dataset, t.direction) for t in plan.trials}
    assert by == {("cross_dataset", s, t, d) for s, t in (("synthetic", "synthetic_b"), ("synthetic_b", "synthetic"))
                  for d in ("v2t", "t2v")} | {("zero_shot", PRETRAINED, "synthetic_b", d) for d in ("v2t", "t2v")}
    assert len(plan.trials) == 6 * 2 * 2 and all(t.perturbation == "clean" for t in plan.trials)
    # cross-dataset uses the source dataset's fine-tuned checkpoint (the one its QS cells would use)
    t = next(t for t in plan.trials if t.scenario == "cross_dataset" and t.source_dataset == "synthetic")
    assert t.model_version == plan.models[CheckpointKey.of(t)].version
    # zero-shot: both backbones share one CLIP-only model pretrained on the third domain
    z = plan.models[CheckpointKey("clip4clip", PRETRAINED)]
    assert plan.models[CheckpointKey("xpool", PRETRAINED)] is z and z.clip_only and z.train_dataset == "synthetic_c"
    assert plan.model_path(CheckpointKey("xpool", PRETRAINED)) == plan.model_path(
        CheckpointKey("clip4clip", PRETRAINED))
    # clean clips of both targets; nothing rendered for the pretraining data
    assert plan.renders == {"synthetic_b": [("clean", 0)], "synthetic": [("clean", 0)]}
    # the same cell in QS and in a QGS scenario are different trials
    assert len({t.key for t in plan.trials}) == len(plan.trials)


def test_each_trial_finds_its_checkpoint_in_the_environment_the_workers_get(tmp_path, shared_cache):
    """The checkpoints travel to the workers as JSON keyed by CheckpointKey.name ("backbone|source"), the same strings
    as the gate's check needs; every trial (its own source, another dataset's, the zero-shot CLIP's) finds there the
    checkpoint the plan gives it."""
    import json
    from dataclasses import asdict

    from orchestrator.planning.environment import TrialEnvironment, checkpoint_paths, trial_environment
    from orchestrator.planning.needs import trial_needs

    plan = build_plan(load_grid(qgs_grid(tmp_path / "g.yaml")), Paths.make(tmp_path / "r", shared_cache))
    sent = json.loads(json.dumps(asdict(trial_environment(plan, checkpoint_paths(plan)))))
    assert set(sent["checkpoints"]) == {f"{b}|{s}" for b in ("clip4clip", "xpool")
                                        for s in ("synthetic", "synthetic_b", PRETRAINED)}
    env = TrialEnvironment(**sent)
    for t in plan.trials:
        key = CheckpointKey.of(t)
        assert key == CheckpointKey(t.backbone, t.source_dataset) and plan.models[key].version == t.model_version
        assert env.checkpoint(t) == {"path": str(plan.model_path(key)), "clip_only": t.source_dataset == PRETRAINED}
        assert trial_needs(plan, t)[0] == f"check:{t.backbone}|{t.source_dataset}" == key.need


def test_identity_initialised_xpool_pools_like_the_mean_of_static_frames():
    """Zero-shot X-Pool is CLIP plus X-Pool's pooling initialised to the identity (projections eye, zero bias, unit
    LayerNorms). For a static video (every frame the same) the attention is uniform and the head reduces to
    LayerNorms of the frame feature; on zero-mean features a LayerNorm only rescales, so every text ranks the videos
    exactly as mean pooling of the raw CLIP frame features does."""
    torch.manual_seed(0)
    d, n_text, n_video, t = 64, 7, 11, 12
    head = XPoolPooling(embed_dim=d).eval()
    for lin in (head.q_proj, head.k_proj, head.v_proj, head.out_proj, head.linear_proj):
        assert torch.equal(lin.weight, torch.eye(d)) and torch.equal(lin.bias, torch.zeros(d))
    frame = torch.randn(n_video, 1, d)
    frame = frame - frame.mean(-1, keepdim=True)                  # zero-mean features
    frames = frame.expand(n_video, t, d).contiguous()               # static videos
    text = torch.randn(n_text, d)
    xpool = cosine_similarity(text, head(text, frames))             # [Nt, Nv]
    mean = cosine_similarity(text, frames.mean(1))
    assert torch.allclose(xpool, mean, atol=1e-5)
    assert torch.equal(xpool.argsort(1, descending=True), mean.argsort(1, descending=True))
    # moving videos: the head is no longer the mean (attention weighs frames by the text), so the check above is
    # not vacuous
    moving = torch.randn(n_video, t, d)
    assert not torch.allclose(cosine_similarity(text, head(text, moving)),
                              cosine_similarity(text, moving.mean(1)), atol=1e-3)


def test_zero_shot_xpool_takes_only_the_clip_weights(tmp_path):
    from workloads.backbones import save_backbone

    torch.manual_seed(1)
    pretrained = create_backbone("clip4clip", "mlvp-micro")
    path = tmp_path / "pretrained.pt"
    save_backbone(pretrained, path)
    xpool = create_backbone("xpool", "mlvp-micro", pretrained=str(path), clip_only=True)
    for name, value in pretrained.clip.state_dict().items():
        assert torch.equal(xpool.clip.state_dict()[name], value), name
    assert torch.equal(xpool.pooling.q_proj.weight, torch.eye(xpool.embed_dim))


def _entry(spec, **metrics):
    return {"key": spec.key, "spec": spec.to_dict(), "status": "ok", "metrics": metrics}


def test_qgs_tables_have_the_paper_layout_and_missing_cells_stay_missing(tmp_path, shared_cache):
    grid = load_grid(qgs_grid(tmp_path / "g.yaml", methods="[source, tent, hat_vtr]"))
    plan = build_plan(grid, Paths.make(tmp_path / "r", shared_cache))
    entries = [_entry(t, R1=1.0 + i, R5=2.0, R10=3.0, hub_skewness=0.5, hub_robin_hood=0.3, hub_antihub_count=4.0)
               for i, t in enumerate(plan.trials)
               if not (t.method == "hat_vtr" and t.backbone == "xpool" and t.direction == "t2v")]  # never ran
    files = write_tables(entries, tmp_path / "tables", grid)
    names = {f.name for f in files}
    assert {"qgs_cross.parquet", "qgs_cross_hubness.parquet", "qgs_zero_shot.parquet",
            "qgs_zero_shot_hubness.parquet", "qgs_cross_tables.md", "qgs_zero_shot_tables.md"} <= names
    cross = pd.read_parquet(tmp_path / "tables" / "qgs_cross.parquet")
    # rows backbone x method, Source first; columns source->target x direction x R@1/R@5/R@10
    assert list(zip(cross["backbone"], cross["method"])) == [(b, m) for b in ("clip4clip", "xpool")
                                                             for m in ("source", "tent", "hat_vtr")]
    names = [f"{p}/{d}/{m}" for p in ("synthetic->synthetic_b", "synthetic_b->synthetic") for d in ("v2t", "t2v")
             for m in ("R@1", "R@5", "R@10")]
    assert list(cross.columns) == ["backbone", "method"] + names + [f"{n}:state" for n in names]
    row = cross.set_index(["backbone", "method"]).loc[("xpool", "hat_vtr")]
    assert pd.isna(row["synthetic->synthetic_b/t2v/R@1"]) and row["synthetic->synthetic_b/v2t/R@5"] == 2.0
    assert row["synthetic->synthetic_b/t2v/R@1:state"] == "missing" and row["synthetic->synthetic_b/v2t/R@5:state"] \
        == "ok"
    zs = pd.read_parquet(tmp_path / "tables" / "qgs_zero_shot.parquet")
    zs_names = [f"synthetic_b/{d}/{m}" for d in ("v2t", "t2v") for m in ("R@1", "R@5", "R@10")]
    assert list(zs.columns) == ["backbone", "method"] + zs_names + [f"{n}:state" for n in zs_names]
    hub = pd.read_parquet(tmp_path / "tables" / "qgs_zero_shot_hubness.parquet")
    assert "synthetic_b/v2t/Robin Hood" in hub.columns and (hub["synthetic_b/v2t/antihubs"] == 4.0).all()
    # the value of each cell is its own trial's
    spec = next(t for t in plan.trials if t.scenario == "zero_shot" and t.backbone == "clip4clip"
                and t.method == "tent" and t.direction == "v2t")
    want = next(e for e in entries if e["key"] == spec.key)["metrics"]["R1"]
    assert zs.set_index(["backbone", "method"]).loc[("clip4clip", "tent"), "synthetic_b/v2t/R@1"] == want
    assert len(trial_rows(entries)) == len(entries)


def test_every_scenario_plans_from_its_own_section(tmp_path, shared_cache):
    grid = load_grid(qgs_grid(tmp_path / "g.yaml"))
    micro = {"name": "qs", "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
             "models": {"clip_model": "mlvp-micro"}, "backbones": ["clip4clip"], "methods": ["source"]}
    grid_qs = parse_grid({**micro, "query_shift": {"datasets": ["synthetic"], "perturbations": []},
                          "mixed_shift": {"datasets": ["synthetic"], "type_mix": {}}}, "qs.yaml")
    plans = [build_plan(g, Paths.make(tmp_path / "r", shared_cache)) for g in (grid, grid_qs)]
    planned = {t.scenario for plan in plans for t in plan.trials}
    assert planned == set(SCENARIOS.names())
    # and each writes the tables it names (one stand-in result per trial)
    for g, plan in zip((grid, grid_qs), plans):
        entries = [{"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": 1.0, "R5": 2.0,
                                                                                   "R10": 3.0}} for t in plan.trials]
        files = {f.name for f in write_tables(entries, tmp_path / g.name, g)}
        assert {f"{s.prefix}_tables.md" for s in g.scenarios.values()} <= files


@pytest.mark.e2e
def test_cross_dataset_and_zero_shot_end_to_end_through_tune_mlflow_and_parquet(tmp_path, shared_cache, worker_ray):
    from orchestrator.run.options import SubmitOptions
    from orchestrator.run.submit import submit

    grid_file = qgs_grid(tmp_path / "qgs.yaml", name="qgs_e2e", methods="[source, hat_vtr]",
                         pairs="[[synthetic, synthetic_b]]")
    results = tmp_path / "results"
    report = submit(str(grid_file), SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache), num_cpus=2,
                                                  dashboard=False))
    # (1 pair + 1 zero-shot dataset) x 2 directions x 2 backbones x 2 methods
    assert report.to_run == 16 and report.ok == 16 and report.failed == 0
    cross = pq.read_table(results / "qgs_e2e" / "qgs_cross.parquet").to_pandas()
    zero = pq.read_table(results / "qgs_e2e" / "qgs_zero_shot.parquet").to_pandas()
    for table in (cross, zero):  # every cell filled (intervals: R@1's from the per-query results, not R@5 / R@10)
        values = table[[c for c in table.columns if c not in ("backbone", "method") and not c.endswith((":low",
                                                                                                       ":high"))]]
        assert len(table) == 4 and not values.isna().any().any()
        assert not table[[c for c in table.columns if c.endswith("R@1:low")]].isna().any().any()
    trials = pq.read_table(results / "qgs_e2e" / "trials.parquet").to_pandas()
    assert set(trials["scenario"]) == {"cross_dataset", "zero_shot"}
    assert set(trials.loc[trials.scenario == "zero_shot", "source_dataset"]) == {PRETRAINED}
    assert (trials["n_queries"] == 40).all() and (trials["n_gallery"] == 40).all()

    client = MlflowClient(tracking_uri=report.tracking_uri)
    exp = client.get_experiment_by_name("mlvp/qgs_e2e")
    children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{report.parent_run_id}'",
                                  max_results=100)
    assert len(children) == 16
    for run in children:
        assert run.data.params["scenario"] == run.data.tags["scenario"]
        assert run.data.params["source_dataset"] in ("synthetic", PRETRAINED)
    zs_runs = [r for r in children if r.data.tags["scenario"] == "zero_shot"]
    assert len(zs_runs) == 8 and all(r.info.run_name.startswith("pretrained->synthetic_b/") for r in zs_runs)
    artifacts = {a.path for a in client.list_artifacts(report.parent_run_id, "tables")}
    assert {"tables/qgs_cross.parquet", "tables/qgs_zero_shot.parquet", "tables/qgs_cross_tables.md"} <= artifacts
    # the models: the source fine-tune is reused from the cache by a second grid, the pretrain too
    again = submit(str(grid_file), SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache),
                                                 dashboard=False))
    assert again.to_run == 0
