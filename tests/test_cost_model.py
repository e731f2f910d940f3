"""One cost model (orchestrator/planning/cost_model.py) for `plan` and benchmarks/cluster_sim.py: each perturbation
type's render cost passes through its own two measured clips (a type registered since is priced at the mean of the
measured ones, and says so), a fine-tuning step scales with the images it takes and its precision, a
dataset's clip size is read from its videos' headers where they are there, `plan`'s estimate of
grids/full_mlvp.yaml equals to the second what the simulated cluster sleeps for the same plan, and the
estimate counts only what remains to run. No Ray: the sim's rows and sleeps are computed, not slept."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import plan_unrun
from orchestrator.planning.cost_model import (
    RENDER_POINTS,
    RENDER_SOURCE,
    TYPICAL_CLIPS,
    CostModel,
    PlanCosts,
    clip_size,
    estimate,
    measure_clips,
    sample_paths,
)
from orchestrator.planning.describe import sizing_lines
from orchestrator.planning.keys import RenderSet
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import missing_videos, plan_for_sizing
from orchestrator.planning.work import remaining_work
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.sync import select_trials
from workloads.perturbations.video import VIDEO_PERTURBATIONS
from workloads.spec import CLEAN

REPO = Path(__file__).resolve().parents[1]


def _cluster_sim():
    """benchmarks/cluster_sim.py: its stand-in inputs and sleep costs."""
    from benchmarks import cluster_sim

    return cluster_sim


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """`mlvp plan full_mlvp` from cluster_sim's stand-in annotations at the real test-split sizes (no videos)."""
    sim = _cluster_sim()
    tmp = tmp_path_factory.mktemp("full")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in sim.stand_in_inputs(tmp).items():
            mp.setenv(name, value)
        plan = plan_for_sizing(sim.FULL_GRID, Paths.make(tmp / "results"))
        missing_videos(plan)                        # as cmd_plan: each videos folder listed, nothing raised
    return sim, plan


def test_each_type_is_priced_by_the_line_through_its_own_two_measured_clips():
    cost = CostModel()
    # every registered type and clean has its two points (benchmarks/render_bench.py (c), "ours alone"), under the
    # registry's names: no other list of names
    assert set(RENDER_POINTS) == {*VIDEO_PERTURBATIONS.names(), CLEAN}
    for name, points in RENDER_POINTS.items():
        line, measured = cost.render_line(name)
        assert measured
        for pixel_frames, seconds in points:
            assert cost.rendering_seconds(pixel_frames, name) == pytest.approx(seconds)
        assert line.per_pixel_frame > 0, name      # a longer or larger source costs more
        # linear in pixel-frames: each 1e8 more (a 2-minute 640x360 clip is 8.3e8) adds the same seconds
        step = cost.rendering_seconds(2e8, name) - cost.rendering_seconds(1e8, name)
        assert step == pytest.approx(1e8 * line.per_pixel_frame)
    # the types differ: at MSRVTT's size H.264 (a full-length re-encode and decode per rendering) costs several times
    # a noise type, whose rendering is mostly the decode of 12 frames (benchmarks/dress_rehearsal_results.md)
    msrvtt = TYPICAL_CLIPS["msrvtt"].pixel_frames
    h264, noise = cost.rendering_seconds(msrvtt, "h264_compression"), cost.rendering_seconds(msrvtt, "gaussian_noise")
    assert h264 > 5 * noise
    # clean decodes the uniform sample and perturbs nothing: about a noise type's price (they differ by the noise
    # of the measurement), far below the whole-clip types'
    clean = cost.rendering_seconds(msrvtt, CLEAN)
    assert clean == pytest.approx(noise, rel=0.3)
    assert all(clean < 0.5 * cost.rendering_seconds(msrvtt, n) for n in ("h264_compression", "motion_blur",
                                                                          "video_defocus", "style_transfer"))


def test_a_type_without_measured_points_is_priced_at_the_mean_and_says_so(full):
    """A type registered after the measurement (here a throwaway one) is priced at the mean of the measured types'
    lines; `describe()` (`plan --verbose`) and `plan` say so."""
    from workloads.perturbations.video._registry import PerturbationInfo

    def inverted(ctx, severity, rng):
        return 255 - ctx.sampled, {"faithful": True}

    cost = CostModel()
    perturbed = [n for n in RENDER_POINTS if n != CLEAN]
    with VIDEO_PERTURBATIONS.temporary("colour_inversion", PerturbationInfo("colour_inversion", inverted, "high",
                                                                            False, None, ""), order=99, level="high"):
        line, measured = cost.render_line("colour_inversion")
        assert not measured
        for pf in (1e6, 3.4e7, 1e9):
            assert cost.rendering_seconds(pf, "colour_inversion") == pytest.approx(
                sum(cost.rendering_seconds(pf, n) for n in perturbed) / len(perturbed))
        described = "\n".join(cost.describe())
        assert re.search(r"render colour_inversion = .*: no measured points: the mean of the 12 measured types' "
                         r"lines", described), described
        for name in VIDEO_PERTURBATIONS.names():
            if name != "colour_inversion":
                assert re.search(rf"render {name} = .*: measured$", described, re.M), name
        # and `plan` on a grid that asks for it prints that its price is the mean
        _, plan = full
        renders = {d: [*r, ("colour_inversion", 3)] for d, r in plan.renders.items()}
        from dataclasses import replace

        lines = sizing_lines(replace(plan, renders=renders))
        assert any(line.startswith("render cost of colour_inversion: no measured points, priced at the mean")
                   for line in lines), lines


def test_finetune_step_is_linear_in_images_and_follows_the_precision():
    cost = CostModel()
    # the measured step: 64 clips x 4 frames of ViT-B/32 on an H200
    assert cost.finetune_step_seconds(64, 4, "fp32") == pytest.approx(0.198)
    assert cost.finetune_step_seconds(64, 4, "bf16") == pytest.approx(0.088)
    # "auto" is bf16 where the device has it natively: a GPU, where fine-tuning runs
    assert cost.finetune_step_seconds(64, 4, "auto") == cost.finetune_step_seconds(64, 4, "bf16")
    # full_mlvp's recipe: 32 clips x 12 frames = 384 images, 1.5x the measured 256
    assert cost.finetune_step_seconds(32, 12, "auto") == pytest.approx(0.088 * 1.5)
    assert cost.finetune_step_seconds(128, 4, "fp32") == pytest.approx(2 * 0.198)


def test_trial_cost_scales_with_its_batch_and_precision():
    cost = CostModel()
    # 1,000 queries in batches of 16: 63 measured batches (the last one partial, priced whole)
    assert cost.trial_gpu_seconds(1000, 16) == pytest.approx(63 * 0.288)
    assert cost.trial_gpu_seconds(1000, 16, "bf16") == pytest.approx(63 * 0.0912)
    # batches of 32 adapt on twice the queries: the same work in half the batches
    assert cost.trial_gpu_seconds(1024, 32) == pytest.approx(cost.trial_gpu_seconds(1024, 16))
    # two trials sharing a GPU: each holds its slot twice as long, over the packed throughput
    assert cost.trial_seconds(1000, 16, slots=2) == pytest.approx(2 * 63 * 0.288 / 0.92)


def test_every_figure_says_where_it_was_measured():
    lines = CostModel().describe()
    assert len(lines) == len(CostModel.__dataclass_fields__) + len(VIDEO_PERTURBATIONS.names()) + 1
    assert all(": " in line and len(line.split(": ", 1)[1]) > 20 for line in lines if not line.startswith(" "))
    assert any("H200" in line for line in lines if line.startswith("finetune_s_per_step ="))
    # the render figures: their source (command, commit, machine, date), then one line per registered type and clean
    (render,) = [line for line in lines if line.startswith("render_lines:")]
    assert RENDER_SOURCE in render and "python -m benchmarks.render_bench" in RENDER_SOURCE
    assert re.search(r"commit [0-9a-f]{7}", RENDER_SOURCE) and re.search(r"20\d\d-\d\d-\d\d", RENDER_SOURCE)
    per_type = [line for line in lines if line.startswith("  render ")]
    assert [line.split()[1] for line in per_type] == [*VIDEO_PERTURBATIONS.names(), CLEAN]


def test_typical_clips_are_the_table_in_docs_cluster():
    """docs/cluster.md tells the user what `plan` assumes without their videos: the same numbers as the code."""
    text = (REPO / "docs" / "cluster.md").read_text()
    names = {"MSRVTT": "msrvtt", "MSVD": "msvd", "LSMDC": "lsmdc", "ActivityNet": "activitynet", "DiDeMo": "didemo"}
    rows = {}
    for m in re.finditer(r"^\| (\w+) \| ([\d.]+) s \|.*\| (\d+)x(\d+), (\d+) fps \|$", text, re.M):
        rows[names[m.group(1)]] = (float(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
    assert rows == {d: (c.seconds, c.width, c.height, c.fps) for d, c in TYPICAL_CLIPS.items()}


def test_clip_size_measured_from_the_headers_of_a_sample(tmp_path):
    from workloads.video_io import write_mp4

    paths = []
    for i, (frames, size) in enumerate([(10, 32), (20, 32), (30, 48)]):
        path = tmp_path / f"v{i}.mp4"
        write_mp4(path, np.full((frames, size, size + 16, 3), 100, np.uint8), fps=10)
        paths.append(str(path))
    got = measure_clips([*paths, str(tmp_path / "absent.mp4")])
    assert got.source == "measured on 3 of your videos"
    assert (got.width, got.height, got.fps) == pytest.approx(((48 + 48 + 64) / 3, (32 + 32 + 48) / 3, 10))
    assert got.seconds == pytest.approx(2.0)
    # the mean of width x height x frames, what the render cost grows with
    assert got.pixel_frames == pytest.approx((10 * 32 * 48 + 20 * 32 * 48 + 30 * 48 * 64) / 3)
    assert measure_clips([str(tmp_path / "absent.mp4")]) is None
    # the sample: distinct paths, evenly spaced, the same every time
    many = [f"v{i}" for i in range(100)] + ["v0"]
    assert sample_paths(many, 4) == ["v0", "v25", "v50", "v75"] and sample_paths(["a", "a", "b"], 4) == ["a", "b"]


def test_clip_size_of_a_generated_dataset_from_its_config(tmp_path, shared_cache):
    plan = plan_unrun(tmp_path, shared_cache, "costs")
    size = clip_size("synthetic", plan.datasets["synthetic"])
    config = plan.datasets["synthetic"].dataset.config
    assert size.source == "from its generator config" and size.width == config.size
    assert size.pixel_frames == config.size * config.size * config.num_frames


def test_plan_estimate_equals_what_the_simulated_cluster_sleeps(full):
    sim, plan = full
    costs = PlanCosts(plan)
    # no videos on disk: each dataset's typical clip, said so
    assert costs.clips == {d: TYPICAL_CLIPS[d] for d in sim.TEST_SIZES}
    assert plan.clip_counts() == sim.TEST_SIZES
    est = estimate(costs, remaining_work(plan, plan.trials))   # `plan` with an empty ledger: every trial remains
    render_s, trial_s = sim.slept_totals(plan, costs, videos_per_row=100)
    assert abs(est.render_cpu_s - render_s) < 1 and abs(est.trial_gpu_s - trial_s) < 1
    assert est.render_clips == plan.render_count() and est.render_sets == sum(len(r) for r in plan.renders.values())
    # and that is the line `plan` prints
    lines = sizing_lines(plan, todo=plan.trials)
    assert f"what remains ({len(plan.trials)} trials): {est.line()}" in "\n".join(lines)
    assert any(line.startswith("  an estimate: GPU figures measured for ViT-B/32 on one NVIDIA H200") for line in lines)
    # each unit by hand: a set is its clips x one rendering of its type at the dataset's typical clip, a trial its
    # batches
    cost, rt = CostModel(), plan.grid.runtime
    by_hand = sum(n * cost.rendering_seconds(TYPICAL_CLIPS[d].pixel_frames, p)
                  for d, n in sim.TEST_SIZES.items() for p, _ in plan.renders[d])
    assert render_s == pytest.approx(by_hand)
    # H.264's sets cost more than a noise set of the same dataset (one price for all types was 17-25x off for it)
    for d in sim.TEST_SIZES:
        assert costs.render_set_seconds(RenderSet(d, "h264_compression", 3)) > 5 * costs.render_set_seconds(
            RenderSet(d, "gaussian_noise", 3))
    assert trial_s == pytest.approx(sum(-(-sim.TEST_SIZES[t.dataset] // rt.batch_size) * cost.trial_s_per_batch
                                        for t in plan.trials))
    # the X-Pool recipe (full_mlvp's): 5 epochs over each train split's pairs, batches of 32 x 12 frames
    made = {m.version: m for m in plan.models.values() if m.finetune}.values()
    assert {m.finetune.recipe for m in made} == {"xpool"}
    assert est.finetune_gpu_s == pytest.approx(sum(
        5 * -(-costs.train_pairs(m.train_dataset) // 32) * 32 * 12 * cost.finetune_step_seconds(1, 1, "auto")
        for m in made if costs.train_pairs(m.train_dataset) is not None))


def test_estimate_counts_only_what_remains(full, tmp_path):
    sim, plan = full
    ledger = TrialLedger(tmp_path / "ledger")
    before = estimate(PlanCosts(plan), remaining_work(plan, select_trials(plan, ledger, False, False)[0]))
    done = [t for t in plan.trials if t.dataset == "msvd"]
    for t in done:
        ledger.put({"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": 50.0}})
    todo, status = select_trials(plan, TrialLedger(tmp_path / "ledger", read_only=True), False, False)
    assert len(todo) == len(plan.trials) - len(done)
    costs = PlanCosts(plan)
    after = estimate(costs, remaining_work(plan, todo))
    assert after.trial_gpu_s == pytest.approx(before.trial_gpu_s - sum(costs.trial_gpu_seconds(t) for t in done))
    # no trial left reads MSVD's clips: its render sets and gallery encodings are no longer counted
    msvd_sets = len(plan.renders["msvd"])
    assert after.render_sets == before.render_sets - msvd_sets
    assert after.render_cpu_s == pytest.approx(before.render_cpu_s - sum(
        costs.render_set_seconds(RenderSet("msvd", p, s)) for p, s in plan.renders["msvd"]))
    assert 0 < after.gallery_gpu_s < before.gallery_gpu_s
    assert after.finetune_gpu_s == before.finetune_gpu_s          # no checkpoint made yet
    lines = sizing_lines(plan, todo=todo)
    assert f"what remains ({len(todo)} trials): {after.line()}" in "\n".join(lines)


def test_wall_time_of_the_full_matrix_on_n_gpus_in_both_precisions(full, capsys):
    """`plan --gpus N` (orchestrator/planning/cost_model.py `wall_time`): the bound is the largest of the GPU work over
    the GPUs, the rendering over the CPUs and the longest fine-tune; bf16 is cheaper; more GPUs never slower."""
    from orchestrator.planning.cost_model import MEASURED_OVER_BOUND, wall_time
    from orchestrator.planning.describe import wall_lines
    from orchestrator.planning.work import all_work

    _, plan = full
    work = all_work(plan)
    fp32 = {n: wall_time(PlanCosts(plan, precision="fp32"), work, n, 16 * n) for n in (1, 8, 64)}
    bf16 = wall_time(PlanCosts(plan, precision="bf16"), work, 8, 128)
    est = estimate(PlanCosts(plan, precision="fp32"), work)
    w = fp32[8]
    assert w.gpu_s == pytest.approx(est.gpu_h * 3600) and w.render_s >= est.render_cpu_s > 0
    assert w.bound_s == max(w.gpu_s / 8, w.render_s / 128, w.finetune_s)
    assert w.expected_s == pytest.approx(w.bound_s * MEASURED_OVER_BOUND)
    assert fp32[1].bound_s >= fp32[8].bound_s >= fp32[64].bound_s >= w.finetune_s > 0
    assert bf16.gpu_s < w.gpu_s and bf16.bound_s <= w.bound_s
    parts = {"GPUs": w.gpu_s / 8, "rendering": w.render_s / 128, "the longest fine-tune": w.finetune_s}
    assert parts[w.limit] == max(parts.values())   # named after the largest part
    with pytest.raises(ValueError, match="at least one GPU"):
        wall_time(PlanCosts(plan), work, 0, 16)

    lines = wall_lines(plan, None, 8, 128)
    assert lines[0].startswith("wall time of the grid on 8 GPUs and 128 CPUs")
    assert lines[1].startswith("  fp32: expected ") and lines[2].startswith("  bf16: expected ")


def test_plan_and_the_simulated_cluster_agree_on_a_small_grid(tmp_path, monkeypatch, capsys):
    """`python benchmarks/cluster_sim.py --grid SMALL --totals-only` against the plan `mlvp plan SMALL` builds: a
    generated dataset, so the render cost takes its clip size from the generator config."""
    sim = _cluster_sim()
    grid_file = tmp_path / "small.yaml"
    grid_file.write_text(yaml.safe_dump({
        "name": "small", "models": {"clip_model": "mlvp-micro"},
        "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
        "backbones": ["clip4clip"], "methods": ["source", "tent"],
        "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise", "h264_compression"],
                        "severities": [1, 5]}}))
    for name in ("MLVP_DATA", "MLVP_WEIGHTS"):   # the sim points them at its stand-ins: restored after the test
        monkeypatch.setenv(name, "")
    assert sim.main(["--grid", str(grid_file), "--workdir", str(tmp_path / "sim"), "--totals-only"]) == 0
    out = capsys.readouterr().out
    slept = re.search(r"totals slept \(unscaled\): render ([\d,]+) CPU-s = [\d.,]+ CPU-h, trials ([\d,]+) GPU-s", out)
    render_s, trial_s = (float(g.replace(",", "")) for g in slept.groups())

    plan = plan_for_sizing(grid_file, Paths.make(tmp_path / "plan"))   # as cmd_plan builds it, elsewhere
    costs = PlanCosts(plan)
    assert costs.clips["synthetic"].source == "from its generator config"
    est = estimate(costs, remaining_work(plan, plan.trials))
    assert len(plan.trials) == 2 * (1 + 2 * 2) and est.render_sets == 1 + 2 * 2   # clean + 2 types x 2 severities
    assert est.render_cpu_s > 0 and est.trial_gpu_s > 0
    # the sets differ by type, each its type's price: H.264's above the noise's and clean's (a decode)
    n, pf = costs.counts["synthetic"], costs.clips["synthetic"].pixel_frames
    priced = {rs: costs.render_set_seconds(rs) for rs in [RenderSet("synthetic", CLEAN, 0)] + [
        RenderSet("synthetic", p, s) for p in ("gaussian_noise", "h264_compression") for s in (1, 5)]}
    for rs, seconds in priced.items():
        assert seconds == pytest.approx(n * CostModel().rendering_seconds(pf, rs.perturbation))
    assert priced[RenderSet("synthetic", "h264_compression", 5)] > 2 * max(
        priced[RenderSet("synthetic", "gaussian_noise", 5)], priced[RenderSet("synthetic", CLEAN, 0)])
    assert est.render_cpu_s == pytest.approx(sum(priced.values()))
    assert abs(est.render_cpu_s - render_s) <= 0.5 and abs(est.trial_gpu_s - trial_s) <= 0.5   # printed to 1 s
    line = next(line for line in sizing_lines(plan, todo=plan.trials) if "GPU-hours" in line)
    assert f"  {line}" in out.splitlines()


def test_a_published_recipe_is_priced_by_its_epochs_over_the_train_pairs(full, tmp_path):
    """`models.finetune.recipe: xpool` (docs/finetuning.md): the checkpoints follow X-Pool's trainer (both backbones
    from CLIP, 5 epochs over every train pair in batches of 32 x 12 frames), and the cost model prices that; where
    the train annotations cannot be read the fine-tuning is listed as not counted, never guessed."""
    from workloads.backbones.finetune_config import FinetuneConfig

    xpool = FinetuneConfig(recipe="xpool")
    assert xpool.step_count(180_000) == 5 * 5625 and xpool.images_per_step() == 32 * 12
    assert FinetuneConfig(recipe="xpool", epochs=0.5).step_count(100) == 2   # ceil(100 / 32) = 4 steps an epoch
    assert FinetuneConfig(steps=7, batch_size=8, frames_per_clip=3).step_count(10**6) == 7   # quick: its steps
    sim, plan = full
    grid = yaml.safe_load(sim.FULL_GRID.read_text())
    grid["models"]["finetune"] = {"recipe": "xpool", "epochs": 2}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(grid))
    with pytest.MonkeyPatch.context() as mp:
        for name, value in sim.stand_in_inputs(tmp_path).items():
            mp.setenv(name, value)
        rplan = plan_for_sizing(path, Paths.make(tmp_path / "results"))
        costs = PlanCosts(rplan)
        models = [m for m in rplan.models.values() if m.finetune is not None and m.dataset != "pretrained"]
        assert models and all(m.finetune.recipe == "xpool" and m.finetune.epochs == 2 and m.init_from is None
                              for m in models)
        for m in models:
            pairs = costs.train_pairs(m.train_dataset)
            seconds = costs.checkpoint_gpu_seconds(m)
            if pairs is None:
                assert seconds is None
            else:
                per_image = CostModel().finetune_step_seconds(1, 1, m.finetune.precision)
                assert seconds == pytest.approx(2 * -(-pairs // 32) * 32 * 12 * per_image)
        est = estimate(costs, remaining_work(rplan, rplan.trials))
        no_train = [m for m in models if costs.train_pairs(m.train_dataset) is None]
        assert len([u for u in est.unknown if u.startswith("fine-tuning ")]) == len(no_train)


def test_a_recipe_name_is_checked_at_load(tmp_path):
    from orchestrator.config.errors import GridError
    from orchestrator.config.grid import load_grid

    sim = _cluster_sim()
    grid = yaml.safe_load(sim.FULL_GRID.read_text())
    grid["models"]["finetune"] = {"recipe": "xpol"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(grid))
    with pytest.raises(GridError, match=r"models\.finetune\.recipe: must be one of quick, xpool, clip4clip, got"):
        load_grid(path)


def test_render_tasks_reserve_the_memory_model_at_the_largest_clip(full):
    """Each render task asks Ray for `worker_bytes` of the largest type at its datasets' largest source clip
    (orchestrator/stages/render.py render_task_memory): ActivityNet's typical 3-minute clips reserve more than
    MSRVTT's, and a set of datasets the largest of theirs."""
    from orchestrator.stages.render import render_task_memory
    from workloads.render_memory import render_bytes, worker_bytes

    _, plan = full
    by_dataset = {}
    for d in ("msrvtt", "activitynet"):
        c = TYPICAL_CLIPS[d]
        size = round(c.width), round(c.height), round(c.fps * c.seconds)
        by_dataset[d] = worker_bytes(*size)
        assert render_task_memory(plan, [d]) == by_dataset[d]
        assert by_dataset[d] > render_bytes(*size)   # a Ray Data worker holds more than a fresh process
    assert by_dataset["activitynet"] > by_dataset["msrvtt"]   # H.264's packets of the longer clip
    assert render_task_memory(plan, ["msrvtt", "activitynet", "msrvtt"]) == by_dataset["activitynet"]
    assert 0.5 * 2**30 < by_dataset["msrvtt"] <= 2 * 2**30   # a render actor at MSRVTT's size: about a GB


def test_render_tasks_reserve_adain_where_the_grid_gives_its_weights(full, monkeypatch, tmp_path):
    """Style transfer with AdaIN's weights (VGG-19 and its decoder) needs ~1.2 GB more than its model-free proxy:
    where the grid gives both files, a render task reserves that (workloads/render_memory.py ADAIN)."""
    from orchestrator.stages.render import render_task_memory
    from workloads.render_memory import worker_bytes

    _, plan = full
    c = TYPICAL_CLIPS["msrvtt"]
    size = round(c.width), round(c.height), round(c.fps * c.seconds)
    proxy = render_task_memory(plan, ["msrvtt"])
    for name in ("adain_vgg", "adain_decoder"):
        (tmp_path / f"{name}.pth").write_bytes(b"")
        monkeypatch.setattr(plan.grid.assets, name, str(tmp_path / f"{name}.pth"))
    adain = render_task_memory(plan, ["msrvtt"])
    assert adain == worker_bytes(*size, adain_weights=True)
    assert adain - proxy > 2**30
