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

A `Submission` owns what it starts, and only that: the results folder's lock, the MLflow tracker process, the outputs'
child process, the pipeline, the TPE searches and Ray, which it stops at `close` only when it started it. In a process
where Ray is already initialised (a notebook, a script that called `ray.init`, a test's shared Ray), it joins that Ray
and leaves it running. `submit()` is `start`, `run` and `close` in one call; `orchestrator.submit` is the same with
keyword options (docs/architecture.md, "The Python API").
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.config.grid import load_grid
from orchestrator.config.schema import GridSpec
from orchestrator.planning.environment import checkpoint_paths, trial_environment
from orchestrator.planning.needs import trial_needs
from orchestrator.planning.paths import Paths, check_writable
from orchestrator.planning.plan import Plan, build_plan, check_hub_k, missing_videos, plan_for_sizing
from orchestrator.planning.search import tpe_streams
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import check_store, default_tracking_uri
from orchestrator.record.recorder import LiveRecorder, TrialColumns
from orchestrator.record.results_lock import results_lock
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


class Submission:
    """One submission of one grid (module docstring), in four steps: `start` plans, prints the plan and starts what the
    run needs (the tracker process, Ray unless the process already has it); `run` runs the trials and the stages that
    feed them and writes the tables; `close` ends what `start` started, in reverse order, and is safe to call twice.
    A dry run, or a grid with nothing to run, ends in `start`'s plan or `run`'s tables without starting Ray.
    Use it as a context manager: `with Submission(grid, opts) as s: report = s.run()`."""

    def __init__(self, grid_path: str, opts: SubmitOptions | None = None, console: Console | None = None):
        self.grid_path, self.opts = grid_path, opts or SubmitOptions()
        self.console = console or make_console()
        self.t_start = time.time()
        self.plan: Plan | None = None
        self.grid: GridSpec | None = None
        self.ledger: TrialLedger | None = None
        self.todo: list[TrialSpec] = []
        self.report: SubmitReport | None = None
        self.submission = new_submission_id()
        # what this submission started, and so ends at `close` (None: not started by it)
        self.tracker: TrackerProcess | None = None
        self.ahead: OutputsAhead | None = None
        self.started_ray = False
        self.ray_info: dict = {}
        self._lock = contextlib.ExitStack()   # the results folder's lock, held from `start` to `close`
        self._started = False

    # -- start: plan, print, start the services ---------------------------------------------------------------------
    def start(self) -> SubmitReport:
        """Plan the grid and print the plan; for a run (not a dry run, something to do) start the tracker process and
        join or start Ray. Returns the report the run will fill."""
        if self._started:
            return self.report
        self._started = True
        opts, console = self.opts, self.console
        paths = Paths.make(opts.results_dir, opts.cache_dir)
        if opts.dry_run:  # sized whether or not the data is on disk yet: what is missing is listed (planning/plan.py)
            plan = plan_for_sizing(self.grid_path, paths)
            grid = plan.grid
        else:  # what would fail later, checked before anything starts: the grid, the folders, then the store
            grid = load_grid(self.grid_path)
            check_writable(paths.results)
            check_writable(paths.cache)
            # one driver per results folder (orchestrator/record/results_lock.py; the CLI holds it already: nested)
            self._lock.enter_context(results_lock(paths.results, f"orchestrator.submit {self.grid_path}"))
        ledger = TrialLedger(paths.ledger, read_only=opts.dry_run)
        if not opts.dry_run:
            plan = build_plan(grid, paths)
        plan.notes.extend(missing_videos(plan))   # all at once, before anything starts; none of a split's: PlanError
        check_hub_k(plan)   # a dry run answers as the submission would (`plan` lists it among its notes)
        todo, status = select_trials(plan, ledger, opts.only_failed, opts.rerun, opts.incomplete)
        done_before = sum(1 for s in status.values() if s == "ok")
        print_plan(plan, status, todo, console)
        self.plan, self.grid, self.ledger, self.todo = plan, grid, ledger, todo
        self.report = SubmitReport(plan, len(todo), done_before)
        if opts.dry_run:
            return self.report
        self.report.tracking_uri = opts.tracking_uri or default_tracking_uri(paths.results)
        check_store(self.report.tracking_uri)
        if todo:
            # MLflow in a process of its own, started first: it imports while Ray starts
            self.tracker = TrackerProcess(self.report.tracking_uri, paths.results, paths.store_templates)
            self.ahead = OutputsAhead(len(plan.trials))   # the outputs' child, started at the first trial result
            self.ray_info = ray_env.start_ray(opts.address, opts.num_cpus, opts.dashboard, ray_env.job_metadata(
                grid.name, self.submission, str(paths.results)))
            self.started_ray = bool(self.ray_info.get("started"))
            if self.ray_info.get("dashboard_url"):
                console.print(f"Ray dashboard: {self.ray_info['dashboard_url']}  ({ray_env.auth_token_hint()})")
            ray_env.check_resources(grid.runtime.gpus_per_trial, grid.runtime.cpus_per_trial)
        return self.report

    # -- run: the trials and their producers, then the tables -------------------------------------------------------
    def run(self) -> SubmitReport:
        """The whole submission after `start` (called here when it was not): nothing for a dry run; with nothing to
        run, MLflow and the tables brought up to date from the ledger; else the trials (`SubmissionRun`). Raises
        KeyboardInterrupt when stopped (the finished trials stay recorded), CheckFailed when a checkpoint misses
        its gate."""
        report = self.start()
        if self.opts.dry_run:
            return report
        if not self.todo:  # nothing to run: no Ray; bring MLflow and the tables up to date from the ledger
            return finish(self.plan, self.grid, self.ledger, report, self.console, self.t_start, summary=None,
                          counts={"ok": 0, "failed": 0}, status="FINISHED", submission=self.submission)
        return SubmissionRun(self).run()

    # -- close: end what start started -------------------------------------------------------------------------------
    def close(self) -> None:
        """End what this submission started, and nothing else: Ray only where `start` started it (a caller's Ray
        stays), the outputs' child (unused when the submission stopped before its outputs), the tracker process, and
        last the results folder's lock."""
        ahead, tracker, self.ahead, self.tracker = self.ahead, self.tracker, None, None
        try:
            if self.started_ray:   # in the reverse order of `start`: Ray, the outputs' child, the tracker
                self.started_ray = False
                ray_env.stop_ray()
        finally:
            try:
                if ahead is not None:
                    ahead.close()
            finally:
                try:
                    if tracker is not None:
                        tracker.close()
                finally:
                    self._lock.close()

    def __enter__(self) -> "Submission":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SubmissionRun:
    """The trials of a started submission and the stages feeding them, on the connected Ray cluster: the progress
    display, the gate, the pipeline (orchestrator/run/pipeline.py), the recorder of results (ledger, then MLflow
    through the submission's tracker process), the TPE searches when the grid searches with TPE, and the end: MLflow
    and the tables (orchestrator/run/finish.py)."""

    def __init__(self, sub: Submission):
        from orchestrator.run.search import TPESearches  # Optuna: only a submission that searches with TPE uses it

        self.sub = sub
        plan, opts, report = sub.plan, sub.opts, sub.report
        self.checkpoints = checkpoint_paths(plan)
        self.env = trial_environment(plan, self.checkpoints,
                                     opts.trial_hook or os.environ.get(TRIAL_HOOK_ENV) or None)
        self.progress = Progress(TextColumn("{task.description:9s}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[failed]} failed"),
                                 TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=sub.console,
                                 # Python's output into the display only where it is the terminal (run/console.py)
                                 redirect_stdout=sys.stdout.isatty(), redirect_stderr=sys.stderr.isatty())
        self.gate = ReadyGate(sub.todo, lambda t: trial_needs(plan, t))
        self.pipeline = Pipeline(plan, self.gate, sub.ledger, sub.console, self.progress, opts, report,
                                 sub.submission)
        self.recorder = LiveRecorder(sub.ledger, sub.tracker, lambda: report.parent_run_id, sub.grid.name,
                                     sub.submission, self.progress,
                                     self.progress.add_task("trials", total=len(sub.todo), unit="trials", failed=0,
                                                            note=""),
                                     TrialColumns.for_plan(plan))
        self.tpe = TPESearches(plan, sub.ledger, self.gate) if tpe_streams(plan) else None   # proposes as results come
        self.as_of = ledger_as_of(plan, sub.ledger, sub.todo)

    # Tune's callbacks, on the driver
    def on_result(self, result) -> None:
        self.sub.ahead.start()   # from the first result on (the trial workers are up): nothing after the first
        self.recorder.result(result)
        if self.tpe is not None:
            self.tpe.on_result(result)

    def on_crash(self, spec, message) -> None:
        self.sub.ahead.start()
        self.recorder.crash(spec, message)
        if self.tpe is not None:
            self.tpe.on_result({"key": TrialSpec.from_dict(spec).key, "status": "failed", "metrics": {}})

    def open_store(self) -> None:
        """On the tracker's thread, before any trial run it logs: the stages and trials do not wait for the store
        (MLflow's start, a new store's migrations: ~3 s), nor for the sync of what the ledger has and it lacks."""
        sub, report = self.sub, self.sub.report
        report.parent_run_id = start_parent(sub.tracker, sub.plan, sub.submission, report.to_run, report.done_before)
        sub.console.print(f"MLflow: parent run {report.parent_run_id} in {report.tracking_uri}  "
                          f"(mlflow ui --backend-store-uri {report.tracking_uri})")
        sync_store(sub.tracker, sub.plan, sub.ledger, lambda: report.parent_run_id, sub.console, self.as_of)

    def run(self) -> SubmitReport:
        """The trials, then the end; a Ctrl-C or SIGTERM ends as KILLED (re-raised after the tables), any other error
        closes the parent run FAILED and propagates."""
        from orchestrator.run.tune import run_trials  # Ray Tune (~1.5 s): only a submission that runs trials imports it

        sub = self.sub
        sub.tracker.later(self.open_store, self.recorder.untracked)
        status, stopped = "FINISHED", None
        try:
            self._trials(run_trials)
        except KeyboardInterrupt as err:   # Ctrl-C, or SIGTERM (Terminated): the finished trials stay recorded
            taken()   # not raised again by Tune's loop (orchestrator/run/interrupts.py)
            status, stopped = "KILLED", err
            self.pipeline.stop()
            why = "stopped by SIGTERM" if stopped_by_sigterm(err) else "interrupted"
            sub.console.print(f"[yellow]{why}: every finished trial is in the ledger; run the rest with: "
                              f"mlvp resume {sub.grid.source}[/]")
        except BaseException:
            self.pipeline.stop()
            self._close_parent_failed()
            raise
        self._finish(status)
        if stopped is not None:
            raise stopped
        return sub.report

    def _trials(self, run_trials) -> None:
        sub, rt = self.sub, self.sub.grid.runtime
        with self.progress:
            if self.tpe is not None:
                self.tpe.start()
                self.progress.update(self.recorder.task, total=len(self.gate) + self.gate.promised)
            self.pipeline.start()
            # one trial slot: no actor reuse, or an idle cached trial actor would hold the only slot that a check or
            # fine-tune still to come needs (producer_share)
            run_trials(sub.todo, self.env, storage_path=str(sub.plan.paths.grid_dir(sub.grid.name) / "tune"),
                       name=sub.submission, cpus_per_trial=rt.cpus_per_trial, gpus_per_trial=rt.gpus_per_trial,
                       max_failures=rt.max_failures, max_concurrent=rt.max_concurrent_trials,
                       on_result=self.on_result, on_crash=self.on_crash, gate=self.gate,
                       reuse_actors=self.pipeline.slots >= 2, wave=rt.trials_per_wave)
            self.pipeline.finish()   # the render sets no remaining trial needed, the text sets; re-raises a stage error
            raise_if_pending()   # a Ctrl-C swallowed on its way (orchestrator/run/interrupts.py)
            self.progress.update(self.recorder.task, advance=self.pipeline.checked)   # the clean cells the check ran

    def _close_parent_failed(self) -> None:
        """Refused (check) or broken: the parent run says so; no tables (nothing complete was produced)."""
        sub = self.sub
        try:
            sub.tracker.flush()
            if sub.report.parent_run_id:
                sub.tracker.finish_parent(sub.report.parent_run_id,
                                          {"ran_now_ok": self.recorder.counts["ok"],
                                           "ran_now_failed": self.recorder.counts["failed"]}, [], "FAILED")
        except Exception:   # the store is what failed: the ledger has every result, `mlvp sync` closes the parent
            pass

    def _finish(self, status: str) -> None:
        sub, report, pipeline, recorder = self.sub, self.sub.report, self.pipeline, self.recorder
        if self.tpe is not None:   # the tables and the report read every proposal, this submission's included
            known = {t.key for t in sub.plan.trials}
            sub.plan.trials.extend(t for t in self.tpe.specs() if t.key not in known)
        summary = report.render = pipeline.stream.summary
        report.timeline = {"start": pipeline.t0, "trials_from": self.gate.first_ready or 0.0,
                           **{rs.need: t for rs, t in pipeline.stream.ready_at.items()}}
        pipeline.print_render(sub.console)
        recorder.counts["ok"] += pipeline.checked   # the clean source cells `check` ran (sync_store logs them)
        if pipeline.checked and recorder.tracking:
            # the trial runs still queued on the tracker's thread (LiveRecorder) must reach the ledger first, or the
            # sync would log them a second time
            sub.tracker.flush()
            try:
                if recorder.tracking:   # the store may have stopped answering while the queue drained
                    sync_store(sub.tracker, sub.plan, sub.ledger, lambda: report.parent_run_id, sub.console,
                               what=f"trial{'s' if pipeline.checked > 1 else ''} of the clean check")
            except Exception as err:   # the ledger has them: the next submit or `sync` logs them
                recorder.untracked(err)
        report.ok, report.failed = recorder.counts["ok"], recorder.counts["failed"]
        finish(sub.plan, sub.grid, sub.ledger, report, sub.console, sub.t_start, summary, recorder.counts, status,
               sub.submission, sub.tracker if recorder.tracking else None, sub.ahead)


def submit(grid_path: str, opts: SubmitOptions | None = None, console: Console | None = None) -> SubmitReport:
    """Run a grid end to end (module docstring): `Submission`'s start, run and close. `console`: where our lines go
    (default: stdout). A dry run plans and prints only: it writes nothing and starts nothing."""
    with Submission(grid_path, opts, console) as sub:
        return sub.run()
