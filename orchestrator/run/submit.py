"""`submit`: a grid, end to end.

    plan -> datasets (generated once) -> checkpoints (fine-tuned once) -> render cache (Ray Data)
         -> trials (Ray Tune; ledger + MLflow as each one finishes) -> result tables

Every stage reuses what exists: a second submission of the same grid trains nothing, renders nothing and runs only
trials without a successful ledger entry (so it also resumes failed ones).

The stages overlap instead of waiting for each other (docs/architecture.md, "Overlap"). A trial needs three
inputs: its checkpoint with its clean check passed (which also encodes its galleries, orchestrator/stages/check.py), its
render set (every clip of its dataset at its perturbation and severity) and, for a perturbed t2v cell, the text
sets. Each input is a *need* of a `ReadyGate` (orchestrator/run/tune.py); Ray Tune is fed through `GatedSearcher`, which
hands it the next trial, in plan order, whose needs are all met. Three producers run beside Tune:
- the render stream (orchestrator/stages/render.py `RenderStream`): Ray Data tasks on CPUs render the render sets, the
  clean ones first (every check reads them), then in Johnson's order under the cost model
  (`cost_ordered_sets`: sets whose rendering is short next to their trials first, so the GPUs get work early and
  no trial tail is left after the last render), marking each set ready as its last clip is written; sizing leaves
  the CPUs of the GPU trial slots to the trials;
- the fine-tunes: one Ray task per checkpoint, all launched at once (X-Pool after the clip4clip it starts from);
- the stage thread (`Pipeline`): as each checkpoint is written it runs that checkpoint's check (once the clean sets
  are ready), applies the gate (a miss without --force stops new trials and `submit` raises CheckFailed after the
  running ones end), then the per-video assets of the sets that need a checkpoint (their sets join the render
  stream) and the text sets.
So the trials of one (backbone, dataset) start while another is still fine-tuned and while later render sets are
rendered. The ledger, MLflow logging, resume and the tables are unchanged: the driver still records each trial as it
finishes. The progress display shows the render stream and the trials side by side.
"""
from __future__ import annotations

import os
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.config.grid import load_grid
from orchestrator.config.schema import GridSpec
from orchestrator.planning.environment import checkpoint_paths, trial_environment
from orchestrator.planning.needs import set_need, trial_needs
from orchestrator.planning.paths import Paths, check_writable
from orchestrator.planning.plan import Plan, build_plan, check_hub_k, missing_videos, plan_for_sizing
from orchestrator.planning.search import tpe_streams
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import check_store, default_tracking_uri
from orchestrator.record.recorder import LiveRecorder, TrialColumns
from orchestrator.record.sync import ledger_as_of, new_submission_id, select_trials, start_parent, sync_store
from orchestrator.record.tracker_process import TrackerProcess
from orchestrator.report.outputs import OutputsAhead
from orchestrator.run import ray_env
from orchestrator.run.console import make_console, print_plan
from orchestrator.run.interrupts import raise_if_pending, stopped_by_sigterm, taken
from orchestrator.run.finish import finish
from orchestrator.run.gate import ReadyGate
from orchestrator.run.options import TRIAL_HOOK_ENV, SubmitOptions, SubmitReport
from orchestrator.run.pipeline import Pipeline
from workloads.spec import TrialSpec


def submit(grid_path: str, opts: SubmitOptions, console: Console | None = None) -> SubmitReport:
    """Run a grid end to end (module docstring); `console`: where our lines go (default: stdout). A dry run plans
    and prints only: it writes nothing and starts nothing."""
    console = console or make_console()
    t_start = time.time()
    paths = Paths.make(opts.results_dir, opts.cache_dir)
    if opts.dry_run:  # sized whether or not the data is on disk yet: what is missing is listed (planning/plan.py)
        plan = plan_for_sizing(grid_path, paths)
        grid = plan.grid
    else:
        grid = load_grid(grid_path)
    if not opts.dry_run:  # what would fail later, checked before anything starts: the folders, then the store
        check_writable(paths.results)
        check_writable(paths.cache)
    ledger = TrialLedger(paths.ledger, read_only=opts.dry_run)
    if not opts.dry_run:
        plan = build_plan(grid, paths)
    plan.notes.extend(missing_videos(plan))   # all at once, before anything starts; none of a split's: PlanError
    check_hub_k(plan)   # a dry run answers as the submission would (`plan` lists it among its notes)
    todo, status = select_trials(plan, ledger, opts.only_failed, opts.rerun, opts.incomplete)
    done_before = sum(1 for s in status.values() if s == "ok")
    print_plan(plan, status, todo, console)
    report = SubmitReport(plan, len(todo), done_before)
    if opts.dry_run:
        return report

    report.tracking_uri = opts.tracking_uri or default_tracking_uri(paths.results)
    check_store(report.tracking_uri)
    if not todo:  # nothing to run: no Ray; bring MLflow and the tables up to date from the ledger
        return finish(plan, grid, ledger, report, console, t_start, summary=None, counts={"ok": 0, "failed": 0},
                      status="FINISHED", submission=new_submission_id())


    # MLflow in a process of its own (TrackerProcess), started first: it imports while Ray starts
    tracker = TrackerProcess(report.tracking_uri, paths.results)
    ahead = OutputsAhead(len(plan.trials))   # the outputs' child, started at the first trial result
    try:
        info = ray_env.start_ray(opts.address, opts.num_cpus, opts.dashboard)
        if info.get("dashboard_url"):
            console.print(f"Ray dashboard: {info['dashboard_url']}  ({ray_env.auth_token_hint()})")
        try:
            ray_env.check_resources(grid.runtime.gpus_per_trial, grid.runtime.cpus_per_trial)
            return _run(plan, grid, todo, ledger, report, console, t_start, opts, tracker=tracker, ahead=ahead)
        finally:
            if opts.address is None:
                ray_env.stop_ray()
    finally:
        ahead.close()   # unused when the submission stopped before its outputs
        tracker.close()


def _run(plan: Plan, grid: GridSpec, todo: list, ledger: TrialLedger, report: SubmitReport, console: Console,
         t_start: float, opts: SubmitOptions | None = None, *, tracker: TrackerProcess,
         ahead: OutputsAhead | None = None) -> SubmitReport:
    """The trials of `todo` and the stages feeding them, on the connected Ray cluster; results through `tracker`
    (the caller's: `submit` closes it); `ahead`: the outputs' child, started at the first result (the caller's)."""

    from orchestrator.run.search import TPESearches  # Optuna: only a submission that searches with TPE uses it
    from orchestrator.run.tune import run_trials  # Ray Tune (~1.5 s): only a submission that runs trials imports it

    opts = opts or SubmitOptions()
    paths = plan.paths
    rt = grid.runtime
    checkpoints = checkpoint_paths(plan)
    submission = new_submission_id()
    env = trial_environment(plan, checkpoints, opts.trial_hook or os.environ.get(TRIAL_HOOK_ENV) or None)
    progress = Progress(TextColumn("{task.description:9s}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[failed]} failed"),
                        TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console,
                        # Python's output into the display only where it is the terminal (orchestrator/run/console.py)
                        redirect_stdout=sys.stdout.isatty(), redirect_stderr=sys.stderr.isatty())
    gate = ReadyGate(todo, lambda t: trial_needs(plan, t))
    pipeline = Pipeline(plan, gate, ledger, console, progress, opts, report, submission)
    recorder = LiveRecorder(ledger, tracker, lambda: report.parent_run_id, grid.name, submission, progress,
                            progress.add_task("trials", total=len(todo), unit="trials", failed=0, note=""),
                            TrialColumns.for_plan(plan))
    tpe = TPESearches(plan, ledger, gate) if tpe_streams(plan) else None   # TPE proposes as results come in
    ahead = ahead or OutputsAhead(0)

    def on_result(result):
        ahead.start()   # from the first result on (the trial workers are up): nothing after the first
        recorder.result(result)
        if tpe is not None:
            tpe.on_result(result)

    def on_crash(spec, message):
        ahead.start()
        recorder.crash(spec, message)
        if tpe is not None:
            tpe.on_result({"key": TrialSpec.from_dict(spec).key, "status": "failed", "metrics": {}})

    as_of = ledger_as_of(plan, ledger, todo)

    def open_store() -> None:
        # on the tracker's thread, before any trial run it logs: the stages and trials do not wait for the store
        # (MLflow's start, a new store's migrations: ~3 s), nor for the sync of what the ledger has and it lacks
        report.parent_run_id = start_parent(tracker, plan, submission, report.to_run, report.done_before)
        console.print(f"MLflow: parent run {report.parent_run_id} in {report.tracking_uri}  "
                      f"(mlflow ui --backend-store-uri {report.tracking_uri})")
        sync_store(tracker, plan, ledger, lambda: report.parent_run_id, console, as_of)

    tracker.later(open_store, recorder.untracked)
    status, stopped = "FINISHED", None
    try:
        with progress:
            if tpe is not None:
                tpe.start()
                progress.update(recorder.task, total=len(gate) + gate.promised)
            pipeline.start()
            # one trial slot: no actor reuse, or an idle cached trial actor would hold the only slot that a check or
            # fine-tune still to come needs (producer_share)
            run_trials(todo, env, storage_path=str(paths.grid_dir(grid.name) / "tune"), name=submission,
                       cpus_per_trial=rt.cpus_per_trial, gpus_per_trial=rt.gpus_per_trial,
                       max_failures=rt.max_failures, max_concurrent=rt.max_concurrent_trials,
                       on_result=on_result, on_crash=on_crash, gate=gate,
                       reuse_actors=pipeline.slots >= 2, wave=rt.trials_per_wave)
            pipeline.finish()   # the render sets no remaining trial needed, the text sets; re-raises a stage error
            raise_if_pending()   # a Ctrl-C swallowed on its way (orchestrator/run/interrupts.py)
            progress.update(recorder.task, advance=pipeline.checked)   # the clean cells the check ran: of the total
    except KeyboardInterrupt as err:   # Ctrl-C, or SIGTERM (Terminated): the finished trials stay recorded
        taken()   # not raised again by Tune's loop (orchestrator/run/interrupts.py)
        status, stopped = "KILLED", err
        pipeline.stop()
        why = "stopped by SIGTERM" if stopped_by_sigterm(err) else "interrupted"
        console.print(f"[yellow]{why}: every finished trial is in the ledger; run the rest with: "
                      f"mlvp resume {grid.source}[/]")
    except BaseException:
        pipeline.stop()
        try:  # refused (check) or broken: the parent run says so; no tables (nothing complete was produced)
            tracker.flush()
            if report.parent_run_id:
                tracker.finish_parent(report.parent_run_id, {"ran_now_ok": recorder.counts["ok"],
                                                             "ran_now_failed": recorder.counts["failed"]}, [],
                                      "FAILED")
        except Exception:
            pass
        raise
    if tpe is not None:   # the tables and the report read every proposal, this submission's included
        known = {t.key for t in plan.trials}
        plan.trials.extend(t for t in tpe.specs() if t.key not in known)
    summary = report.render = pipeline.stream.summary
    report.timeline = {"start": pipeline.t0, "trials_from": gate.first_ready or 0.0,
                       **{set_need(*rs): t for rs, t in pipeline.stream.ready_at.items()}}
    pipeline.print_render(console)
    recorder.counts["ok"] += pipeline.checked   # the clean source cells `check` ran (logged to MLflow by sync_store)
    if pipeline.checked and recorder.tracking:
        # the trial runs still queued on the tracker's thread (LiveRecorder) must reach the ledger first, or the
        # sync would log them a second time
        tracker.flush()
        try:
            if recorder.tracking:   # the store may have stopped answering while the queue drained
                sync_store(tracker, plan, ledger, lambda: report.parent_run_id, console,
                           what=f"trial{'s' if pipeline.checked > 1 else ''} of the clean check")
        except Exception as err:   # the ledger has them: the next submit or `sync` logs them
            recorder.untracked(err)
    report.ok, report.failed = recorder.counts["ok"], recorder.counts["failed"]
    finish(plan, grid, ledger, report, console, t_start, summary, recorder.counts, status, submission,
           tracker if recorder.tracking else None, ahead)
    if status == "KILLED":
        raise stopped
    return report


