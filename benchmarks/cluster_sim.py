"""The full MLVP matrix on a simulated cluster: makespan of the overlapped hand-off against the lower bound and
against the staged design (render everything, then run the trials), in one run.

What is real: the plan of grids/full_mlvp.yaml as `mlvp plan` makes it (`plan_for_sizing`, from stand-in
annotation files at the real test-split sizes written to a temporary folder, no videos), the render-set order
(`cost_ordered_sets`, as submit orders them), the render stream (orchestrator/stages/render.py `RenderStream`: Ray Data,
an actor pool, each set announced as its last clip comes out), the `ReadyGate` (orchestrator/run/gate.py) that
releases trials in plan order as their sets become ready, and Ray's scheduling of fractional GPUs. What is simulated:
Ray runs with *logical* resources (`num_gpus=4` on a machine without GPUs), each render row and each trial sleeps for
its cost, scaled down so a run takes minutes; checkpoints, checks and text sets count as ready (they are not part of
the bound).

Cost model: orchestrator/planning/cost_model.py, the one `plan` uses (`PlanCosts`): a render row sleeps its clips x
severities x one rendering of its type (or clean) at its dataset's clip size (from the typical clip sizes there: no
videos are on disk), a trial
sleeps the seconds it holds its GPU slot. The run prints the totals of what it sleeps (render CPU-hours, trial
GPU-hours) beside the line `plan` prints for the same grid; they are equal to the second (tests/test_cost_model.py).
`--cost FIELD=VALUE,...` replaces figures of the cost model (both sides then use them), `--gpus-per-trial` the grid's
runtime.gpus_per_trial.

Granularity, so that a 2-core machine can start the simulated cluster: a render actor stands for
`--cpus-per-actor` CPUs (it holds that many logical CPUs and sleeps 1/that of a row's CPU cost); the actors of the
GPU slots are started before the clock starts (as Ray Tune's reused trial actors are, once). The makespan counts from
the first render row handed to Ray Data; it is printed with and without the render pool's start-up (measured: the
first row's output time less its sleep), a fixed ~10-30 s on a loaded 2-core machine that the time scale does not
shrink (on a real cluster it is seconds against hours).

Trials are executed by one actor per GPU slot (fractional GPU, `cpus_per_trial` CPUs) fed from the ReadyGate; Ray Tune's
per-trial bookkeeping (about a second per trial on a loaded 2-core machine, docs/notes/2026-11-results-history.md §11)
would dominate sleeps scaled to milliseconds, so `--executor tune` (the real `run_trials` with `GatedSearcher`) is
offered for smaller plans (`--datasets msrvtt`). It prints how many worker processes ran trials and how busy the slots
were: scaled down, a trial (~0.25 s) is shorter than a trial actor's start, and Ray Tune gives a pending trial whose own
actor is still starting the actor a finished trial just freed, removing the starting one
(ray/tune/execution/tune_controller.py `_maybe_reuse_cached_actor`). When the first trial ends before the other slots'
actors have started, every later start is removed the same way and one actor runs all the trials
(docs/notes/2026-11-results-history.md §15); a real trial runs for minutes.

Lower bound: max(total render CPU time / CPUs, total trial GPU time / GPU slots), printed twice: with every CPU
rendering (the issue's formula) and with the CPUs the trial slots hold taken out (what any design that keeps the
GPUs fed can use for rendering).

    python -m benchmarks.cluster_sim                        # full_mlvp, 64 CPUs, 4 GPUs x 1 slot, ~3-6 min
    python -m benchmarks.cluster_sim --totals-only          # the cost model's totals beside plan's line, no Ray
    python -m benchmarks.cluster_sim --grid my_grid.yaml --totals-only   # the same for another grid
    python -m benchmarks.cluster_sim --datasets msrvtt --executor tune --designs overlap --target 60
    python -m benchmarks.cluster_sim --smoke              # seconds: a 10-trial micro grid through both designs
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")

# real test-split sizes (workloads/datasets/*: MSRVTT 1k-A, ActivityNet val1, LSMDC test, MSVD test, DiDeMo test)
TEST_SIZES = {"msrvtt": 1000, "activitynet": 4917, "lsmdc": 1000, "msvd": 670, "didemo": 1004}
FULL_GRID = REPO / "grids" / "full_mlvp.yaml"


def write_annotations(root: Path, sizes: dict[str, int]) -> None:
    """The annotation files each loader reads, in the authors' layouts (as tests/conftest.py stand_in_data), with
    the real test-split sizes; no videos (the plan does not read them)."""
    def w(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    n = sizes
    w(root / "MSRVTT/MSRVTT_JSFUSION_test.csv", "key,vid_key,video_id,sentence\n" + "".join(
        f"ret{i},msr{i},video{i},a person does thing number {i}\n" for i in range(n["msrvtt"])))
    w(root / "MSRVTT/MSRVTT_train.9k.csv", "video_id\nvideo90000\n")
    w(root / "MSRVTT/MSRVTT_data.json", json.dumps({"sentences": [{"caption": "train", "video_id": "video90000"}]}))
    w(root / "ActivityNet/val1_anno.jsonl", "".join(
        json.dumps({"clip_id": f"v_{i}", "text": f"a paragraph about event {i}."}) + "\n"
        for i in range(n["activitynet"])))
    w(root / "ActivityNet/train_anno.jsonl", json.dumps({"clip_id": "v_t", "text": "train."}) + "\n")
    rows = "".join(f"0001_Movie_{i // 3600:02d}.{i // 60 % 60:02d}.{i % 60:02d}.000-{i // 3600:02d}.{i // 60 % 60:02d}."
                   f"{i % 60:02d}.900\t0\t1\t0\t1\tSomeone acts {i}.\n" for i in range(n["lsmdc"]))
    w(root / "LSMDC/LSMDC16_challenge_1000_publictect.csv", rows)
    w(root / "LSMDC/LSMDC16_annos_training.csv", rows.splitlines()[0] + "\n")
    w(root / "MSVD/captions_msvd.json", json.dumps({f"vid{i}": [f"first {i}", f"second {i}"]
                                                    for i in range(n["msvd"] + 1)}))
    w(root / "MSVD/test_list.txt", "".join(f"vid{i}\n" for i in range(n["msvd"])))
    w(root / "MSVD/train_list.txt", f"vid{n['msvd']}\n")
    w(root / "DiDeMo/test_anno.jsonl", "".join(json.dumps({"clip_id": f"d{i}@N00", "text": f"moment {i}."}) + "\n"
                                               for i in range(n["didemo"])))
    w(root / "DiDeMo/train_anno.jsonl", json.dumps({"clip_id": "t@N00", "text": "train."}) + "\n")


def stand_in_inputs(tmp: Path) -> dict[str, str]:
    """Stand-in annotations at the real test-split sizes and a stand-in weights file under `tmp`; returns the
    environment variables grids/full_mlvp.yaml reads (MLVP_DATA, MLVP_WEIGHTS)."""
    write_annotations(tmp / "data", TEST_SIZES)
    weights = tmp / "clip_vit_b32.bin"
    import torch

    torch.save({}, weights)   # a stand-in in the weights format: planning digests it, no trial loads it
    return {"MLVP_DATA": str(tmp / "data"), "MLVP_WEIGHTS": str(weights)}


def full_plan(tmp: Path, datasets: list[str] | None, grid: Path = FULL_GRID):
    """The plan `mlvp plan GRID` makes (`plan_for_sizing`; default grids/full_mlvp.yaml, from the
    stand-in inputs, which another grid may read or not), or its trials and render sets on `datasets` alone."""
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import plan_for_sizing

    os.environ.update(stand_in_inputs(tmp))
    plan = plan_for_sizing(grid, Paths.make(tmp / "results"))
    if datasets:
        from dataclasses import replace

        keep = set(datasets)
        plan = replace(plan, trials=[t for t in plan.trials if t.dataset in keep and
                                     (t.source_dataset in keep or t.source_dataset in ("", t.dataset))],
                       renders={d: r for d, r in plan.renders.items() if d in keep})
    return plan


def sleep_rows(batch, scale: float):
    """Stands in for orchestrator.stages.render.render_rows: a row is a chunk of `clips` videos x the severities of
    one (dataset, perturbation) group; it sleeps their cost (`scale`: real seconds -> sleep seconds, divided by the
    CPUs the task stands for) and reports one output row per set (the real task: per clip, the stream counts `clips`
    of them)."""
    out = {k: [] for k in ("dataset", "video_id", "video_path", "perturbation", "severity", "status", "error",
                           "faithful", "fallback", "seconds", "clips")}
    for i in range(len(batch["dataset"])):
        severities = json.loads(batch["severities"][i])
        time.sleep(float(batch["cost"][i]) * scale)
        for sev in severities:
            for k, v in (("dataset", batch["dataset"][i]), ("perturbation", batch["perturbation"][i]),
                         ("severity", sev), ("clips", batch["clips"][i]), ("video_id", ""), ("video_path", ""),
                         ("status", "ok"), ("error", ""), ("faithful", True), ("fallback", ""), ("seconds", 0.0)):
                out[k].append(v)
    return out


def sim_rows(costs, videos_per_row: int):
    """RenderStream's `plan_rows` for the sim, like plan_set_rows (one group per (dataset, perturbation), groups in
    set order, a row = videos x the group's severities) but a row is a chunk of `videos_per_row` videos; its `cost` is
    the CPU seconds of its renderings under `costs` (orchestrator/planning/cost_model.py PlanCosts)."""
    def plan_rows(sets, _video_assets):
        groups: dict = {}
        for rs in sets:
            groups.setdefault((rs.dataset, rs.perturbation), []).append(rs.severity)
        rows = []
        for (d, p), severities in groups.items():
            n = costs.counts[d]
            for start in range(0, n, videos_per_row):
                k = min(videos_per_row, n - start)
                rows.append({"dataset": d, "perturbation": p, "severities": json.dumps(severities), "clips": k,
                             "cost": k * len(severities) * costs.rendering_seconds(d, p)})
        return rows, {rs: costs.counts[rs.dataset] for rs in sets}, 0
    return plan_rows


def slept_totals(plan, costs, videos_per_row: int) -> tuple[float, float]:
    """(render CPU seconds, trial GPU seconds) the sim sleeps for `plan`, unscaled: the costs of its render rows, and
    its trials' slot seconds over the trials that share a GPU."""
    from orchestrator.planning.render_sets import ordered_sets

    rows, _, _ = sim_rows(costs, videos_per_row)(ordered_sets(plan, plan.trials), None)
    return (sum(r["cost"] for r in rows),
            sum(costs.trial_slot_seconds(t) for t in plan.trials) / max(costs.slots, 1.0))


def set_order(plan, costs, order: str, render_cpus: int, slots: int):
    """(render sets in render order, trials in the same order): clean sets first, then `plan` order (first need in
    plan order) or `johnson` by the cost model, as submit orders them (render_sets.cost_ordered_sets)."""
    from orchestrator.planning.render_sets import cost_ordered_sets, ordered_sets, trial_render_sets

    sets = ordered_sets(plan, plan.trials)
    sets = [rs for rs in sets if rs.perturbation == "clean"] + [rs for rs in sets if rs.perturbation != "clean"]
    if order == "johnson":
        sets = cost_ordered_sets(plan, sets, plan.trials, render_cpus, slots, costs)
    index = {rs: i for i, rs in enumerate(sets)}
    trials = sorted(plan.trials, key=lambda t: max(index[rs] for rs in trial_render_sets(t)))
    return sets, trials


def run_design(plan, costs, scale: float, render_actors: int, overlap: bool, executor: str,
               videos_per_row: int, slots: int, cpus_per_trial: float, gpus_per_trial: float,
               cpus_per_actor: int = 1, order: str = "johnson", wave: int | None = None) -> dict:
    import ray

    from orchestrator.stages.render import RenderStream
    from orchestrator.planning.needs import trial_needs
    from orchestrator.run.gate import ReadyGate

    sets, trials = set_order(plan, costs, order, render_actors, slots)
    gate = ReadyGate(trials, lambda t: [n for n in trial_needs(plan, t) if n.startswith("render:")])
    workers = []
    if executor != "tune":
        @ray.remote(num_cpus=cpus_per_trial, num_gpus=gpus_per_trial)
        class Slot:
            def run(self, seconds: float) -> float:
                time.sleep(seconds)
                return time.time()

        workers = [Slot.remote() for _ in range(slots)]
        ray.get([w.run.remote(0) for w in workers])   # started before the clock (Tune reuses its trial actors)
    t0 = time.time()
    stream = RenderStream(plan, gate.ready if overlap else (lambda need: None), actors=render_actors // cpus_per_actor,
                          render_fn=sleep_rows, render_kwargs={"scale": scale / cpus_per_actor},
                          plan_rows=sim_rows(costs, videos_per_row), cpus_per_actor=cpus_per_actor)
    stream.add(sets)
    stream.close()
    if not overlap:   # today's design: every set rendered, then every trial
        stream.join()
        for rs in sets:
            gate.ready(rs.need)
    t_render = None
    done_at: list[float] = []
    waves = None
    ran: list[dict] = []   # Tune's trials: when each slept, in which worker
    if executor == "tune":
        from ray import tune

        from orchestrator.run.tune import run_trials

        sleeps = {t.key: costs.trial_slot_seconds(t) * scale for t in plan.trials}

        def trainable(config):
            from workloads.spec import TrialSpec

            start = time.time()
            time.sleep(sleeps_ref[TrialSpec.from_dict(config["spec"]).key])
            tune.report({"result_json": json.dumps({"start": start, "end": time.time(), "pid": os.getpid()})})

        sleeps_ref = sleeps
        waves = run_trials(trials, None, storage_path=str(Path(tempfile.mkdtemp()) / "tune"), name="sim",
                   cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial, max_failures=0,
                   max_concurrent=None, on_result=lambda r: (done_at.append(time.time()), ran.append(r)),
                   on_crash=lambda *a: None, gate=gate, trainable=trainable, wave=wave).waves
    else:
        idle = list(workers)
        running: dict = {}
        spec = None
        while True:
            while idle:
                spec = gate.pop()
                if spec is None or spec == ReadyGate.DONE:
                    break
                w = idle.pop()
                running[w.run.remote(costs.trial_slot_seconds(spec) * scale)] = w
            if not running:
                if spec == ReadyGate.DONE:
                    break
                time.sleep(0.01)
                continue
            refs = list(running)
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.005)   # every slot that is done
            if not ready:
                ready, _ = ray.wait(refs, num_returns=1, timeout=0.05)
            for ref in ready:
                done_at.append(ray.get(ref))
                idle.append(running.pop(ref))
        for w in workers:
            ray.kill(w)
    stream.join()
    t_render = max(stream.ready_at.values(), default=t0) - t0
    first_row = videos_per_row * costs.rendering_seconds(sets[0].dataset, sets[0].perturbation) * scale / cpus_per_actor
    startup = max(0.0, (stream.first_output_at or t0) - t0 - first_row)
    return {"makespan": time.time() - t0, "render_done": t_render, "trials": len(done_at), "startup": startup,
            "first_trial_done": (min(done_at) - t0) if done_at else None, "waves": waves,
            # the slots' busy share between the first trial's start and the last one's end
            "occupancy": (sum(r["end"] - r["start"] for r in ran) / slots
                          / (max(r["end"] for r in ran) - min(r["start"] for r in ran))) if ran else None,
            "trial_workers": len({r["pid"] for r in ran}) if ran else None,
            "done_quartiles": [round(done[int(q * (len(done) - 1))] - t0, 1) for q in (0.25, 0.5, 0.75)]
            if (done := sorted(done_at)) else []}


def smoke_grid(folder: Path) -> Path:
    """The `--smoke` grid: mlvp-micro on a small generated dataset, Source and Tent, two types at two severities
    (10 trials, 5 render sets; the small grid tests/test_cost_model.py prices)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "smoke.yaml"
    path.write_text(yaml.safe_dump({
        "name": "smoke", "models": {"clip_model": "mlvp-micro"},
        "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
        "backbones": ["clip4clip"], "methods": ["source", "tent"],
        "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise", "h264_compression"],
                        "severities": [1, 5]}}))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter,
                                 epilog="example: python -m benchmarks.cluster_sim --cpus 64 --gpus 4 --target 90")
    ap.add_argument("--cpus", type=int, default=64, help="logical CPUs of the simulated cluster (default 64)")
    ap.add_argument("--gpus", type=int, default=4, help="logical GPUs (default 4)")
    ap.add_argument("--gpus-per-trial", type=float, default=None,
                    help="GPU share of a trial slot (default: the grid's runtime.gpus_per_trial, or 1 where it is 0)")
    ap.add_argument("--cost", type=str, default=None, metavar="FIELD=VALUE,...",
                    help="replace figures of orchestrator/planning/cost_model.py's CostModel, e.g. "
                         "trial_s_per_batch=0.5 (the plan line printed uses them too)")
    ap.add_argument("--target", type=float, default=90.0,
                    help="scale costs so the lower bound takes this many seconds (default 90)")
    ap.add_argument("--videos-per-row", type=int, default=100, help="videos per simulated render row (default 100)")
    ap.add_argument("--cpus-per-actor", type=int, default=4,
                    help="CPUs one simulated render actor stands for (default 4: 8 processes for 32 CPUs)")
    ap.add_argument("--datasets", type=str, default=None, help="comma-separated subset of the plan's datasets")
    ap.add_argument("--grid", type=Path, default=FULL_GRID,
                    help="grid file (default grids/full_mlvp.yaml, on stand-in annotations at the real "
                         "test-split sizes; MLVP_DATA and MLVP_WEIGHTS point at them)")
    ap.add_argument("--executor", choices=("slots", "tune"), default="slots",
                    help="trials through one actor per GPU slot (default) or the real run_trials (Ray Tune)")
    ap.add_argument("--designs", type=str, default="overlap,staged", help="which designs to run, in order")
    ap.add_argument("--order", choices=("johnson", "plan"), default="johnson",
                    help="render-set order: by the cost model (Johnson's rule, default) or submit's plan order")
    ap.add_argument("--wave", type=int, default=None,
                    help="with --executor tune: trials per Tuner.fit (default: run_trials' default; 0: one Tuner)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="folder for the stand-in inputs and the plan's results (default: a new temporary folder)")
    ap.add_argument("--totals-only", action="store_true",
                    help="print the cost model's totals, plan's line and the lower bound, and start no Ray")
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: a 10-trial micro grid on 4 logical CPUs and 1 GPU, a 5 s bound, both designs")
    args = ap.parse_args(argv)

    from orchestrator.planning.cost_model import CostModel, PlanCosts, estimate
    from orchestrator.planning.describe import sizing_lines
    from orchestrator.planning.render_sets import ordered_sets
    from orchestrator.planning.work import remaining_work

    tmp = args.workdir or Path(tempfile.mkdtemp(prefix="mlvp-cluster-sim-"))
    if args.smoke:
        args.grid, args.cpus, args.gpus, args.target = smoke_grid(tmp), 4, 1, 5.0
        args.videos_per_row, args.cpus_per_actor = 10, 1
    plan = full_plan(tmp, args.datasets.split(",") if args.datasets else None, args.grid)
    rt = plan.grid.runtime
    # a grid whose trials take no GPU (runtime.gpus_per_trial 0) runs one per simulated GPU slot, as the cost model
    # prices it (CostModel.slots_per_gpu)
    gpus_per_trial = args.gpus_per_trial if args.gpus_per_trial is not None else (rt.gpus_per_trial or 1.0)
    if not 0 < gpus_per_trial <= 1:
        ap.error(f"--gpus-per-trial: a GPU share in (0, 1], got {gpus_per_trial:g}")
    figures = {k: float(v) for k, v in (x.split("=") for x in args.cost.split(","))} if args.cost else {}
    numeric = [f for f, v in CostModel.__dataclass_fields__.items() if f != "render_lines"]   # per type: not a number
    unknown = sorted(set(figures) - set(numeric))
    if unknown:
        ap.error(f"--cost: no such figure {', '.join(unknown)}; known: {', '.join(numeric)}")
    cost = CostModel(**{**figures, "trials_per_gpu": 1 / gpus_per_trial})
    costs = PlanCosts(plan, cost)
    sets = ordered_sets(plan, plan.trials)
    slots = int(args.gpus / gpus_per_trial + 1e-9)
    render_cpu, trial_gpu = slept_totals(plan, costs, args.videos_per_row)
    types = {d: [p for p, _ in plan.renders[d] if p != "clean"] or ["clean"] for d in costs.counts}
    trial_slot = trial_gpu * costs.slots        # what the GPU slots are busy for
    cpus_for_render = max(1, int(args.cpus - slots * rt.cpus_per_trial))
    lb_all = max(render_cpu / args.cpus, trial_slot / slots)
    lb = max(render_cpu / cpus_for_render, trial_slot / slots)
    scale = args.target / lb
    print(f"plan: {len(plan.trials)} trials, {len(sets)} render sets, {plan.render_count():,} clips")
    print("cost model (orchestrator/planning/cost_model.py; real seconds): clips per set "
          + ", ".join(f"{d} {n}" for d, n in costs.counts.items()) + "; CPU s per rendering (cheapest type-most "
          "expensive, clean) "
          + ", ".join(f"{d} {min(per := [costs.rendering_seconds(d, p) for p in types[d]]):.3f}-{max(per):.3f}, "
                      f"{costs.rendering_seconds(d, 'clean'):.3f}" for d in costs.counts)
          + f"; {cost.trial_s_per_batch:g} s per fp32 trial batch of {rt.batch_size} alone on a GPU; "
          f"{1 / gpus_per_trial:g} trials per GPU ({slots} slots, {rt.cpus_per_trial:g} CPUs each)")
    for line in costs.clip_lines():
        print(f"  {line}")
    print(f"totals slept (unscaled): render {render_cpu:,.0f} CPU-s = {render_cpu / 3600:,.1f} CPU-h, trials "
          f"{trial_gpu:,.0f} GPU-s = {trial_gpu / 3600:,.1f} GPU-h ({trial_slot / 3600:,.1f} GPU-slot-h); cluster "
          f"{args.cpus} CPUs ({cpus_for_render} beside the trial slots), {args.gpus} GPUs")
    est = estimate(costs, remaining_work(plan, plan.trials))
    print(f"plan's estimate of the same: render {est.render_cpu_s:,.0f} CPU-s, trials {est.trial_gpu_s:,.0f} "
          f"GPU-s; `mlvp plan` prints:")
    print("  " + next(line for line in sizing_lines(plan, cost, todo=plan.trials) if "GPU-hours" in line))
    print(f"lower bound: {lb / 3600:.2f} h with {cpus_for_render} render CPUs ({lb_all / 3600:.2f} h with all "
          f"{args.cpus}); time scale 1/{1 / scale:.0f}: bound = {lb * scale:.1f} s here")
    if args.totals_only:
        return 0
    import ray

    ray.init(num_cpus=args.cpus, num_gpus=args.gpus, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    import logging

    logging.getLogger("ray.data").setLevel(logging.ERROR)
    from orchestrator.config.schema import TRIALS_PER_WAVE

    wave = TRIALS_PER_WAVE if args.wave is None else (args.wave or None)
    if args.executor == "tune":
        print(f"Ray Tune in waves of {wave or 'all'} trials; load average {os.getloadavg()[0]:.1f}")
    results = {}
    try:
        for design in args.designs.split(","):
            overlap = design == "overlap"
            actors = cpus_for_render if overlap else args.cpus   # staged: every CPU renders (today's default)
            t = time.time()
            r = run_design(plan, costs, scale, actors, overlap, args.executor, args.videos_per_row, slots,
                           rt.cpus_per_trial, gpus_per_trial, args.cpus_per_actor, args.order, wave)
            results[design] = r
            net = r["net"] = r["makespan"] - r["startup"]
            print(f"{design} ({args.order} order): makespan {r['makespan']:6.1f} s, {net:6.1f} s without the "
                  f"render pool's start-up "
                  f"({r['startup']:.1f} s) = {net / scale / 3600:5.2f} h real = {net / (lb * scale):.2f}x bound "
                  f"({net / (lb_all * scale):.2f}x the all-CPU bound); renders done at {r['render_done']:.1f} s, "
                  f"first trial done at {r['first_trial_done']:.1f} s, {r['trials']} trials ({time.time() - t:.0f}s)"
                  + (f"; Tune experiments (waves) {r['waves']}, trial workers {r['trial_workers']}, slots busy "
                     f"{r['occupancy']:.0%}" if r["waves"] is not None else "")
                  + f"; a quarter, half, three quarters of the trials done at {r['done_quartiles']} s")
    finally:
        ray.shutdown()
    if {"overlap", "staged"} <= set(results):
        o, s = results["overlap"]["net"], results["staged"]["net"]
        print(f"side by side: overlap {o:.1f} s | staged {s:.1f} s | bound {lb * scale:.1f} s  ->  overlap "
              f"{o / (lb * scale):.2f}x bound, staged {s / (lb * scale):.2f}x bound, staged/overlap {s / o:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
