"""Rendering and trials overlap in `submit` (orchestrator/run/submit.py, docs/architecture.md "Overlap"): with real Ray
Data and Ray Tune, the trials of the first render sets finish while later sets are still being rendered."""
from pathlib import Path

import numpy as np
import pytest

from conftest import private_cache, write_micro_grid
from orchestrator.config.grid import load_grid
from orchestrator.record.ledger import TrialLedger
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.planning.cost_model import CostModel, PlanCosts, uniform_render_lines
from orchestrator.planning.keys import RenderSet
from orchestrator.planning.render_sets import cost_ordered_sets, ordered_sets, trial_render_sets
from orchestrator.run.gate import ReadyGate
from workloads.render_cache import RenderCache, RenderKey
from workloads.spec import CLEAN, TrialSpec


def _spec(**kw) -> TrialSpec:
    base = dict(dataset="d", direction="v2t", scenario="query_shift", perturbation="fog", severity=1,
                method="source", backbone="clip4clip", seed=0)
    return TrialSpec(**{**base, **kw})


def test_ready_gate_hands_out_ready_trials_in_plan_order():
    specs = [_spec(severity=s, method=m) for s in (1, 2) for m in ("source", "tent")]
    gate = ReadyGate(specs, lambda t: [f"set{t.severity}", "check"])
    assert gate.pop() is None                      # nothing ready yet: Tune is told "not yet"
    gate.ready("set2")
    assert gate.pop() is None                      # its check is still missing
    gate.ready("check")
    assert [gate.pop(), gate.pop()] == specs[2:]   # severity 2's trials, in plan order
    assert gate.pop() is None
    assert gate.drop({specs[1].key}) == 1          # run meanwhile by someone else (check): never handed out
    gate.ready("set1")
    assert gate.pop() == specs[0] and gate.pop() == ReadyGate.DONE
    closed = ReadyGate(specs, lambda t: ["never"])
    closed.close(RuntimeError("check missed"))
    assert closed.pop() == ReadyGate.DONE and str(closed.error) == "check missed"


def test_render_sets_follow_the_trials_that_need_them(tmp_path, shared_cache):
    grid_file = write_micro_grid(tmp_path / "o.yaml", name="o",
                                 perturbations="[impulse_noise, gaussian_noise]", severities="[5, 1]")
    plan = build_plan(load_grid(grid_file), Paths.make(tmp_path / "r", shared_cache))
    sets = ordered_sets(plan, list(reversed(plan.trials)))
    # the last trial of the plan is the cell at gaussian_noise 1: its set comes first
    assert sets[0] == RenderSet("synthetic", "gaussian_noise", 1)
    assert sorted(sets) == sorted(RenderSet("synthetic", p, s) for p, s in plan.renders["synthetic"])
    assert sets[0].need == "render:synthetic/gaussian_noise/1"
    # a severity as the render rows hand it back (a numpy integer) names the same set
    assert {RenderSet("synthetic", "gaussian_noise", np.int64(1))} == {sets[0]}
    # t2v trials read the clean clips (their gallery), whatever their text perturbation
    assert trial_render_sets(_spec(direction="t2v", perturbation="ocr", severity=7)) == [RenderSet("d", CLEAN, 0)]


def test_cost_order_renders_first_the_sets_whose_trials_keep_the_gpus_busy(tmp_path, shared_cache):
    grid_file = write_micro_grid(tmp_path / "o.yaml", name="o",
                                 perturbations="[impulse_noise, gaussian_noise]", severities="[5, 1]")
    plan = build_plan(load_grid(grid_file), Paths.make(tmp_path / "r", shared_cache))
    sets = ordered_sets(plan)
    assert [rs.perturbation for rs in sets if rs.perturbation != CLEAN] == ["impulse_noise"] * 2 \
        + ["gaussian_noise"] * 2   # plan order
    # only the gaussian cells still to run: the impulse sets feed no trial, so they are rendered last
    trials = [t for t in plan.trials if t.perturbation != "impulse_noise"]
    for render_s in (1.0, 1e-4):   # rendering longer than the sets' trials (2nd rule), then shorter (1st rule)
        cost = CostModel(render_lines=uniform_render_lines(render_s), trial_s_per_batch=1.0)
        out = cost_ordered_sets(plan, sets, trials, render_cpus=1, trial_slots=1, costs=PlanCosts(plan, cost))
        assert sorted(out) == sorted(sets)
        assert [rs.perturbation for rs in out] == [CLEAN] + ["gaussian_noise"] * 2 + ["impulse_noise"] * 2, out
    # equal costs keep the plan order (Johnson's rule sorts stably): a one-dataset grid renders as before
    assert cost_ordered_sets(plan, sets, plan.trials, render_cpus=1, trial_slots=1) == sets

OVERLAP_GRID = """
name: ov
datasets:
  synthetic: {{options: {{n_train: 96, n_test: 40, size: 64}}}}
models:
  clip_model: mlvp-micro
  finetune: {{steps: 12, batch_size: 32, precision: fp32}}
backbones: [clip4clip]
methods: [source]
query_shift:
  datasets: [synthetic]
  perturbations: {perturbations}
  severities: [1, 2, 3, 4, 5]
  clean: true
runtime: {{cpus_per_trial: 1, render_actors: 1, num_frames: 32}}
"""


@pytest.mark.e2e
def test_trials_of_early_render_sets_run_while_the_last_set_is_rendered(tmp_path, shared_cache):
    # ~3-5 min on a loaded 2-core machine: 64 px clips of 32 frames, so that H.264 (5 encode passes a clip) renders
    # long enough to outlast Ray Tune's start-up; the cheap noise sets come first (grid order), their trials beside it
    from orchestrator.run.options import SubmitOptions
    from orchestrator.run.submit import submit

    cache = private_cache(tmp_path / "cache", shared_cache)   # renders of its own (the session's may hold these)
    results = tmp_path / "results"
    opts = SubmitOptions(results_dir=str(results), cache_dir=str(cache), num_cpus=3, dashboard=False)
    # the checkpoint and its check first (the clean cell alone), so what follows is rendering beside trials
    clean_only = tmp_path / "c.yaml"
    clean_only.write_text(OVERLAP_GRID.format(perturbations="[]"))
    assert submit(str(clean_only), opts).failed == 0
    grid_file = tmp_path / "ov.yaml"
    grid_file.write_text(OVERLAP_GRID.format(perturbations="[gaussian_noise, impulse_noise, h264_compression]"))
    report = submit(str(grid_file), opts)
    plan = build_plan(load_grid(grid_file), Paths.make(results, cache))
    assert len(plan.trials) == 16 and report.failed == 0 and report.ok == 15 and report.done_before == 1
    assert report.render.rendered == 15 * 40 and report.render.reused == 40 and report.render.failed == 0

    render = RenderCache(plan.paths.render)
    ds = plan.datasets["synthetic"]

    def written(pert: str, sev: int) -> float:   # when a set's last clip was written
        return max(Path(render.path(RenderKey("synthetic", ds.version, p.video_id, pert, sev, plan.grid.seed,
                                              plan.grid.runtime.num_frames, plan.resolution, ""))).stat().st_mtime
                   for p in ds.test.pairs)

    order = [(rs.perturbation, rs.severity) for rs in ordered_sets(plan) if rs.perturbation != CLEAN]
    assert [p for p, _ in order[::5]] == ["gaussian_noise", "impulse_noise", "h264_compression"]
    last_written = max(written(p, s) for p, s in order)
    ledger = TrialLedger(results / "ledger")
    entries = {(t.perturbation, t.severity): ledger.get(t.key) for t in plan.trials if t.perturbation != CLEAN}
    finished = {k: e["recorded_at"] for k, e in entries.items()}
    started = {k: e["recorded_at"] - e["timings"]["total_s"] for k, e in entries.items()}
    # trials ran while the last sets were still rendering: the first set's trial was handed to Tune and was at work
    # before the last set's last clip was on disk (Tune's start-up on a loaded 2-core machine is 20-60 s, so that
    # it also *finished* before is likely but not asserted)
    # the set rendered first: submit renders in the cost model's order (render.cost_ordered_sets), not plan order
    first = min(order, key=lambda ps: report.timeline["render:synthetic/%s/%d" % ps])
    assert report.timeline["trials_from"] < report.timeline["render:synthetic/h264_compression/5"]
    assert started[first] < last_written, (started, finished, last_written)
    # the gate: every trial was handed to Tune after its own set was complete (the report's timeline says when)
    assert all(report.timeline["render:synthetic/%s/%d" % (p, s)] <= started[(p, s)] + 1.0 for p, s in order)
