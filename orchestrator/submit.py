"""`submit`: a grid, end to end.

    plan -> datasets (generated once) -> checkpoints (fine-tuned once) -> render cache (Ray Data)
         -> trials (Ray Tune; ledger + MLflow as each one finishes) -> result tables

Every stage reuses what exists: a second submission of the same grid trains nothing, renders nothing and runs only
trials without a successful ledger entry (so it also resumes failed ones).

The stages overlap instead of waiting for each other (docs/architecture.md, "Overlap"). A trial needs three
inputs: its checkpoint with its clean check passed (which also encodes its galleries, orchestrator/check.py), its
render set (every clip of its dataset at its perturbation and severity) and, for a perturbed t2v cell, the text
sets. Each input is a *need* of a `ReadyGate` (orchestrator/tune.py); Ray Tune is fed through `GatedSearcher`, which
hands it the next trial, in plan order, whose needs are all met. Three producers run beside Tune:
- the render stream (orchestrator/render.py `RenderStream`): a Ray Data actor pool on CPUs renders the render sets
  the clean ones first (every check reads them), then in Johnson's order under the cost model
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

import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from orchestrator.grid import GridSpec, load_grid
from orchestrator.ledger import TrialLedger
from orchestrator.plan import Paths, Plan, build_plan, missing_videos, plan_for_sizing
from orchestrator.outputs import write_grid_outputs
from orchestrator.tracking import Tracker, TrackerProcess, check_store, default_tracking_uri, error_name, store_key
from workloads.spec import CLEAN, TrialSpec


@dataclass
class SubmitOptions:
    results_dir: str = "results"
    cache_dir: str | None = None
    tracking_uri: str | None = None           # default: sqlite under results_dir
    address: str | None = None                # join a running Ray cluster
    num_cpus: int | None = None               # local Ray only
    dry_run: bool = False
    only_failed: bool = False                 # resume: rerun failed cells only
    incomplete: bool = False                  # resume: also rerun cells done with dropped (undecodable) queries
    rerun: bool = False                       # run every cell again, even successful ones
    dashboard: bool = True
    force: bool = False                       # run even when a checkpoint misses its paper number (orchestrator/check)
    tolerance: float = 5.0                    # R@1 points a clean result may fall below the paper's


@dataclass
class SubmitReport:
    plan: Plan
    to_run: int
    done_before: int
    ok: int = 0
    failed: int = 0
    tables: list[Path] = field(default_factory=list)
    parent_run_id: str | None = None
    tracking_uri: str | None = None
    render: Any = None
    check: Any = None                         # orchestrator.check.CheckReport
    seconds: float = 0.0
    # when things became ready (time.time()): "start", "trials_from" (the first trial handed to Tune) and
    # "render:<dataset>/<perturbation>/<severity>" per render set rendered now (orchestrator/render.py)
    timeline: dict[str, float] = field(default_factory=dict)
    outputs: Any = None                       # orchestrator.outputs.Outputs: what `finish` wrote, its peak memory


def make_console() -> Console:
    """The console every command prints to. Lines are never wrapped (soft wrap): a log file or a pipe keeps paths
    and trial keys whole instead of breaking them at 80 columns."""
    return Console(highlight=False, soft_wrap=True)


def select_trials(plan: Plan, ledger: TrialLedger, only_failed: bool, rerun: bool, incomplete: bool = False):
    """The trials to run and every trial's ledger status ("ok", "failed", "missing"). `incomplete` also reruns cells
    that finished with queries dropped (videos that could not be decoded then: fixed videos are picked up)."""
    entries = {t.key: ledger.get(t.key) for t in plan.trials}
    status = {k: "missing" if e is None else e["status"] for k, e in entries.items()}
    if rerun:
        todo = list(plan.trials)
    elif only_failed:
        todo = [t for t in plan.trials if status[t.key] == "failed"]
    else:
        todo = [t for t in plan.trials if status[t.key] != "ok"
                or (incomplete and entries[t.key] and entries[t.key].get("dropped"))]
    return todo, status


def print_plan(plan: Plan, status: dict[str, str], todo: list, console: Console) -> None:
    from collections import Counter

    c = Counter(status.values())
    console.print(f"[bold]grid[/] {plan.grid.name} ({plan.grid.source}): {len(plan.trials)} trials "
                  f"({c.get('ok', 0)} done, {c.get('failed', 0)} failed, {c.get('missing', 0)} new) -> "
                  f"{len(todo)} to run")
    for scenario, n in Counter(t.scenario for t in plan.trials).items():
        console.print(f"  {scenario}: {n} trials")
    for name, ds in plan.datasets.items():
        announce_generation(name, ds.dataset, console)
        cells = plan.renders.get(name, [])
        n = "unknown" if ds.size is None else ds.size   # annotations not on disk yet (sizing: plan_for_sizing)
        role = f"{len(cells)} render cells ({n * len(cells) if ds.size is not None else n} clips at " \
            f"{plan.resolution}px)" if cells else "training data only"
        console.print(f"  dataset {name}: {n} test pairs, {role}")
    for (backbone, source), m in plan.models.items():
        if m.given_path:
            what = m.given_path
        elif m.clip_only:
            what = f"pretrain here on {m.train_dataset} (image-text)"
        else:
            what = "fine-tune here" + (f" from {m.init_from[0]}" if m.init_from else "")
        cached = not m.given_path and plan.model_path(backbone, source).is_file()
        console.print(f"  checkpoint {backbone}/{source}: {what}{' (cached)' if cached else ''}")
    from orchestrator.plan import sizing_lines

    for line in sizing_lines(plan):
        console.print(f"  {escape(line)}")
    if plan.text_sets:
        cached = sum(1 for j in plan.text_sets if j.key.path(plan.paths.render).is_file())
        stand_in = sum(1 for j in plan.text_sets if j.stand_in is not None)
        console.print(f"  text sets (perturbed captions): {len(plan.text_sets)} ({cached} cached"
                      + (f"; {stand_in} use the backbone's text encoder as the similarity-retry stand-in, flagged "
                         "unfaithful: give assets.sentence_encoder for the reference encoder" if stand_in else "")
                      + ")")
    for note in plan.notes:
        console.print(f"  [yellow]note[/]: {escape(note)}")


def announce_generation(name: str, dataset, console: Console) -> None:
    """Say so before a generated dataset is built on first use (it takes a few seconds and prints nothing)."""
    location = getattr(dataset, "location", None)
    config = getattr(dataset, "config", None)
    if location is None or config is None:
        return
    from workloads.datasets.synthetic import is_complete

    if not is_complete(location, config):
        sizes = f"{config.size}px"
        if getattr(config, "version", 1) == 2:  # test clips at their native size, train clips cheaper
            train_px = min(config.train_size or config.size, config.size)
            sizes = f"test {config.size}px {config.fps} fps, train {train_px}px"
        console.print(f"generating dataset {name} ({config.n_train} train / {config.n_test} test clips, "
                      f"{sizes}, H.264) into {location} (first use only) ...")


def checkpoint_paths(plan: Plan) -> dict[str, dict[str, Any]]:
    """"backbone|source" -> {"path", "clip_only"} of every checkpoint the plan uses (made or not yet)."""
    return {f"{b}|{src}": {"path": str(plan.model_path(b, src)), "clip_only": m.clip_only}
            for (b, src), m in plan.models.items()}


def models_to_make(plan: Plan) -> list[tuple[str, str]]:
    """(backbone, source) of each checkpoint the grid neither supplies nor has in its cache, in plan order."""
    return [key for key, m in plan.models.items() if not m.given_path and not plan.model_path(*key).is_file()]


def launch_models(plan: Plan, console: Console, cpus: int | None = None) -> dict[str, Any]:
    """Fine-tune (or pretrain) the checkpoints the grid does not supply, all at once, as Ray tasks so a cluster's GPU
    nodes do the work in parallel (an X-Pool that starts from a clip4clip waits for that one's task). Returns
    checkpoint path -> ObjectRef of its task's record (only the checkpoints to make). `cpus`: per CPU fine-tune
    (default: every CPU available now)."""
    import ray

    models = checkpoint_paths(plan)
    refs: dict[str, Any] = {}
    most_cpus, gpus = producer_share(plan)
    # at most what one node holds beside one trial slot (producer_share): an X-Pool fine-tune starts when its
    # clip4clip is done, possibly while Ray Tune holds a trial actor
    cpus = 1 if gpus else max(1, min(cpus or int(ray.available_resources().get("CPU", 1)), most_cpus))
    task = ray.remote(num_cpus=cpus, num_gpus=gpus)(_finetune_task)
    for backbone, source in models_to_make(plan):  # plan order: clip4clip before the X-Pool starting from it
        m, path = plan.models[(backbone, source)], plan.model_path(backbone, source)
        if str(path) in refs:
            continue
        ds = m.train_dataset
        dsp = plan.datasets[ds]
        parent = models[f"{m.init_from[0]}|{m.init_from[1]}"]["path"] if m.init_from else None
        init = parent if parent else None if m.clip_only else plan.grid.models.pretrained
        what = f"pretraining the zero-shot CLIP on {ds} single frames" if m.clip_only \
            else f"fine-tuning {backbone} on {ds}"
        console.print(f"{what} ({m.finetune.steps} steps{', from ' + m.init_from[0] if m.init_from else ''}) ...")
        after = refs.get(parent) if parent else None   # a dependency: Ray starts this task when that one is done
        refs[str(path)] = task.remote(m.finetune, ds, dsp.root, dsp.options, dsp.version, str(plan.paths.models),
                                      init, "cuda" if gpus else "cpu", after)
    return refs


def model_line(plan: Plan, path: str, record: dict[str, Any], seconds: float) -> str:
    m = next(m for (b, s), m in plan.models.items() if str(plan.model_path(b, s)) == path)
    mt = record["metrics"]
    return (f"  {m.backbone}/{m.train_dataset}: clean R@1 v2t {mt['v2t_R1']:.1f} / t2v {mt['t2v_R1']:.1f} "
            f"({seconds:.0f}s) -> {Path(path).name}")


def prepare_models(plan: Plan, console: Console) -> dict[str, dict[str, Any]]:
    """Fine-tune (or pretrain) the checkpoints the grid does not supply and wait for them (the `check` command);
    returns "backbone|source" -> {"path", "clip_only"}."""
    import ray

    t0 = time.time()
    refs = launch_models(plan, console)
    for path, ref in refs.items():
        console.print(model_line(plan, path, ray.get(ref), time.time() - t0))
    return checkpoint_paths(plan)


def _finetune_task(config, dataset: str, root, options, data_version: str, cache_dir: str, init_path, device: str,
                   after=None):
    from workloads.backbones.finetune import ensure_finetuned
    from workloads.datasets import create_dataset

    ds = create_dataset(dataset, root=root, **options)
    _, record = ensure_finetuned(config, ds.train_split(), ds.test_split(), cache_dir, data_version,
                                 init_path=init_path, log=lambda s: print(s, flush=True), device=device)
    return record


def submit(grid_path: str, opts: SubmitOptions) -> SubmitReport:
    console = make_console()
    t_start = time.time()
    paths = Paths.make(opts.results_dir, opts.cache_dir)
    if opts.dry_run:  # sized whether or not the data is on disk yet: what is missing is listed (orchestrator/plan.py)
        plan = plan_for_sizing(grid_path, paths)
        grid = plan.grid
    else:
        grid = load_grid(grid_path)
    if not opts.dry_run:  # what would fail later, checked before anything starts: the folders, then the store
        check_writable(paths.results)
        check_writable(paths.cache)
    ledger = TrialLedger(paths.ledger)
    if not opts.dry_run:
        plan = build_plan(grid, paths)
    plan.notes.extend(missing_videos(plan))   # all at once, before anything starts; none of a split's: PlanError
    check_hub_k(plan)
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
                      status="FINISHED", submission=_submission_id())

    from orchestrator import ray_env

    # MLflow in a process of its own (TrackerProcess), started first: it imports while Ray starts
    tracker = TrackerProcess(report.tracking_uri, paths.results)
    try:
        info = ray_env.start_ray(opts.address, opts.num_cpus, opts.dashboard)
        if info.get("dashboard_url"):
            console.print(f"Ray dashboard: {info['dashboard_url']}  ({ray_env.auth_token_hint()})")
        try:
            ray_env.check_resources(grid.runtime.gpus_per_trial, grid.runtime.cpus_per_trial)
            return _run(plan, grid, todo, ledger, report, console, t_start, opts, tracker=tracker)
        finally:
            if opts.address is None:
                ray_env.stop_ray()
    finally:
        tracker.close()


def check_hub_k(plan: Plan) -> None:
    """runtime.hub_k counts how often each gallery item is among a query's k nearest: a k above a target's gallery
    size is an error up front (one line), not a failure in every trial."""
    k = plan.grid.runtime.hub_k
    for name in dict.fromkeys(t.dataset for t in plan.trials):
        try:
            n = len(plan.datasets[name].test)
        except Exception:   # size unknown before the data is on disk (plan lists what is missing)
            continue
        if n and k > n:
            raise ValueError(f"runtime.hub_k is {k} but the test split of {name} has {n} items (the gallery): "
                             f"set hub_k to at most {n} (the paper uses 10)")


def check_writable(folder: Path) -> None:
    """A folder we write (results: ledger, tables, MLflow store; cache) must take files: one line, up front."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{uuid.uuid4().hex[:8]}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise OSError(f"directory {folder} is not writable ({err.strerror or err}); choose another with "
                      "--results-dir / --cache-dir") from None


def _submission_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def _run(plan: Plan, grid: GridSpec, todo: list, ledger: TrialLedger, report: SubmitReport, console: Console,
         t_start: float, opts: SubmitOptions | None = None, *, tracker: TrackerProcess) -> SubmitReport:
    """The trials of `todo` and the stages feeding them, on the connected Ray cluster; results through `tracker`
    (the caller's: `submit` closes it)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator.check import trial_environment
    from orchestrator.render import set_need
    from orchestrator.tune import ReadyGate, run_trials

    opts = opts or SubmitOptions()
    paths = plan.paths
    rt = grid.runtime
    checkpoints = checkpoint_paths(plan)
    submission = _submission_id()
    env = trial_environment(plan, checkpoints)
    progress = Progress(TextColumn("{task.description:9s}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[failed]} failed"),
                        TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console)
    gate = ReadyGate(todo, lambda t: trial_needs(plan, t))
    pipeline = Pipeline(plan, gate, ledger, console, progress, opts, report, submission)
    recorder = LiveRecorder(ledger, tracker, lambda: report.parent_run_id, grid.name, submission, progress,
                            progress.add_task("trials", total=len(todo), unit="trials", failed=0, note=""))
    as_of = ledger_as_of(plan, ledger, todo)

    def open_store() -> None:
        # on the tracker's thread, before any trial run it logs: the stages and trials do not wait for the store
        # (MLflow's start, a new store's migrations: ~3 s), nor for the sync of what the ledger has and it lacks
        report.parent_run_id = start_parent(tracker, plan, report, submission)
        console.print(f"MLflow: parent run {report.parent_run_id} in {report.tracking_uri}  "
                      f"(mlflow ui --backend-store-uri {report.tracking_uri})")
        sync_store(tracker, plan, ledger, lambda: report.parent_run_id, console, as_of)

    tracker.later(open_store, recorder.untracked)
    status = "FINISHED"
    try:
        with progress:
            pipeline.start()
            # one trial slot: no actor reuse, or an idle cached trial actor would hold the only slot that a check or
            # fine-tune still to come needs (producer_share)
            run_trials(todo, env, storage_path=str(paths.grid_dir(grid.name) / "tune"), name=submission,
                       cpus_per_trial=rt.cpus_per_trial, gpus_per_trial=rt.gpus_per_trial,
                       max_failures=rt.max_failures, max_concurrent=rt.max_concurrent_trials,
                       on_result=recorder.result, on_crash=recorder.crash, gate=gate,
                       reuse_actors=pipeline.slots >= 2, wave=rt.trials_per_wave)
            pipeline.finish()   # the render sets no remaining trial needed, the text sets; re-raises a stage error
            progress.update(recorder.task, total=len(todo) - pipeline.checked)
    except KeyboardInterrupt:
        status = "KILLED"
        pipeline.stop()
        console.print(f"[yellow]interrupted: every finished trial is in the ledger; run the rest with: "
                      f"python -m orchestrator resume {grid.source}[/]")
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
                sync_store(tracker, plan, ledger, lambda: report.parent_run_id, console)
        except Exception as err:   # the ledger has them: the next submit or `sync` logs them
            recorder.untracked(err)
    report.ok, report.failed = recorder.counts["ok"], recorder.counts["failed"]
    finish(plan, grid, ledger, report, console, t_start, summary, recorder.counts, status, submission,
           tracker if recorder.tracking else None)
    if status == "KILLED":
        raise KeyboardInterrupt
    return report


def trial_needs(plan: Plan, spec: TrialSpec) -> list[str]:
    """What a trial waits for (ReadyGate needs): its checkpoint's check (checkpoint made, galleries encoded, gate
    passed), its render sets, and for a perturbed t2v cell the text sets."""
    from orchestrator.render import set_need, trial_render_sets

    needs = [check_need(spec.backbone, spec.source_dataset or spec.dataset)]
    needs += [set_need(*rs) for rs in trial_render_sets(spec) if rs[0] in plan.renders]
    if spec.direction == "t2v" and (spec.mix or spec.perturbation != CLEAN):
        needs.append("text:all")
    return needs


def check_need(backbone: str, source: str) -> str:
    return f"check:{backbone}|{source}"


def render_actors(plan: Plan, actors: int | None = None) -> int:
    """Render actors beside the trials: the grid's `runtime.render_actors`, else the CPUs the trial slots leave
    (GPU trials: each GPU slot keeps its `cpus_per_trial`; CPU trials: one trial's CPUs), at least one."""
    import ray

    if actors:
        return actors
    rt = plan.grid.runtime
    cpus = int(ray.cluster_resources().get("CPU", 1))
    keep = _slots(plan) * rt.cpus_per_trial if rt.gpus_per_trial > 0 else rt.cpus_per_trial
    return max(1, int(cpus - keep))


def producer_share(plan: Plan) -> tuple[int, float]:
    """(CPUs, GPUs) a task that makes trial inputs (a fine-tune, the per-video assets) may ask for while Ray Tune
    runs: what the largest node holds less one trial slot, so it starts beside a trial actor Tune holds (running, or
    cached: TuneController's actor cache, `may_keep_one`) instead of waiting until Tune's wave goes idle and gives
    its actors back (orchestrator/tune.py GatedSearcher; before idle waves ended, a render stage test hung on an
    asset task asking for every CPU). GPUs: a whole GPU where the cluster has two or more (a held actor has a share
    of one), else what one slot leaves of the single GPU, at least one slot's share. A single-slot cluster runs its
    trials without actor reuse instead (`trial_slots`, submit)."""
    from orchestrator import ray_env

    rt = plan.grid.runtime
    cpus = max(1, ray_env.largest_node_cpus() - int(math.ceil(rt.cpus_per_trial)))
    if rt.gpus_per_trial <= 0:
        return cpus, 0.0
    import ray

    total = ray.cluster_resources().get("GPU", 0)
    gpus = 1.0 if total >= 2 else max(rt.gpus_per_trial, min(1.0, total) - rt.gpus_per_trial)
    return 1, round(gpus, 4)


def _slots(plan: Plan) -> int:
    """Trials the cluster can run at once, possibly none (GPU trials on a cluster without GPUs): its GPUs over
    `gpus_per_trial` (GPU trials) or its CPUs over `cpus_per_trial`, capped by `max_concurrent_trials`."""
    import ray

    rt = plan.grid.runtime
    total = ray.cluster_resources()
    if rt.gpus_per_trial > 0:
        slots = total.get("GPU", 0) / rt.gpus_per_trial
    else:
        slots = total.get("CPU", 1) / max(rt.cpus_per_trial, 1e-9)
    if rt.max_concurrent_trials:
        slots = min(slots, rt.max_concurrent_trials)
    return int(slots + 1e-9)


def trial_slots(plan: Plan) -> float:
    """Trials that can run at once on the cluster (`_slots`), at least one."""
    return max(1.0, float(_slots(plan)))


class Pipeline:
    """The producers of a submission's trial inputs, beside Ray Tune (module docstring): the render stream, the
    fine-tune tasks and the stage thread (checks, prepared assets, text sets)."""

    def __init__(self, plan: Plan, gate, ledger: TrialLedger, console: Console, progress, opts: SubmitOptions,
                 report: SubmitReport, submission: str):
        self.plan, self.gate, self.ledger, self.console, self.progress = plan, gate, ledger, console, progress
        self.opts, self.report, self.submission = opts, report, submission
        self.checkpoints = checkpoint_paths(plan)
        self.checked = 0                    # clean source cells of the list to run that `check` ran
        self.text = None
        self.error: BaseException | None = None
        self._stopped = threading.Event()
        self.stream = None
        self.slots = 1.0                    # trials at once on the cluster (`trial_slots`), set by `start`
        self.deferred: list = []
        self.model_refs: dict[str, Any] = {}
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._stage, name="submit-stages", daemon=True)

    def start(self) -> None:
        import ray

        from orchestrator.assets import dataset_assets
        from orchestrator.render import RenderStream, cost_ordered_sets, ordered_sets

        plan = self.plan
        self.slots = trial_slots(plan)
        actors = render_actors(plan, plan.grid.runtime.render_actors)
        sets = cost_ordered_sets(plan, ordered_sets(plan, self.gate.specs()), self.gate.specs(),
                                 render_cpus=actors, trial_slots=self.slots)
        self.deferred = [rs for rs in sets if _prepares(rs[1])]
        self.stream = RenderStream(plan, self.gate.ready, actors=actors, progress=self.progress,
                                   assets={n: dataset_assets(plan.grid, n) for n in plan.renders})
        self.stream.add([rs for rs in sets if rs not in self.deferred])
        cpu_total = int(ray.cluster_resources().get("CPU", 1))
        self.t0 = time.time()
        self.model_refs = launch_models(plan, self.console, cpus=max(1, cpu_total - actors))
        self._thread.start()

    # -- the stage thread ----------------------------------------------------------------------------------------
    def _stage(self) -> None:
        try:
            self._stages()
        except BaseException as err:  # noqa: BLE001 - handed to the driver: no new trials, raised after Tune ends
            if not self._stopped.is_set():
                self.error = err
            self.gate.close(err)
            if self.stream is not None:
                self.stream.stop()

    def _stages(self) -> None:
        import ray

        from orchestrator.check import check_cases

        plan = self.plan
        pending = dict(self.model_refs)                    # checkpoint path -> task
        made: set[str] = {m["path"] for m in self.checkpoints.values() if m["path"] not in pending}
        groups = list(dict.fromkeys((c.backbone, c.source) for c in check_cases(plan)))
        reports: list = []
        embedders = {self.checkpoints[f"{b}|{d}"]["path"] for d, (b, _, _) in plan.embedders.items()
                     if b is not None and any(rs[0] == d for rs in self.deferred)}
        stand_ins = {self.checkpoints[f"{j.stand_in[0]}|{j.stand_in[1]}"]["path"] for j in plan.text_sets
                     if j.stand_in is not None}
        assets_done, text_done = not self.deferred, not plan.text_sets
        while not self._stopped.is_set():
            for group in [g for g in groups if self.checkpoints[f"{g[0]}|{g[1]}"]["path"] in made]:
                groups.remove(group)
                reports.append(self._check(group))
                self.report.check = _merge(reports, self.opts.tolerance)
            if not assets_done and embedders <= made:
                assets_done = True
                self._prepare_assets()
            if not text_done and stand_ins <= made:
                text_done = True
                self._text_sets()
            if not groups and assets_done and text_done:
                break
            if not pending:
                raise RuntimeError(f"internal: checks {groups} wait for checkpoints that are not being made")
            done, _ = ray.wait(list(pending.values()), num_returns=1, timeout=1.0)
            for path, ref in list(pending.items()):
                if ref in done:
                    record = ray.get(ref)   # a failed fine-tune raises here: the submission stops
                    del pending[path]
                    made.add(path)
                    self.console.print(model_line(plan, path, record, time.time() - self.t0))
        if self.stream is not None:
            self.stream.close()

    def _wait(self, needs: list[str]) -> None:
        while not all(self.gate.is_ready(n) for n in needs):
            if self._stopped.is_set():
                raise KeyboardInterrupt
            if self.stream.error is not None or not self.stream.alive():
                self.stream.join(0)      # re-raises the render stream's error
                missing = [n for n in needs if not self.gate.is_ready(n)]
                raise RuntimeError(f"render stream ended before {missing[:3]}")
            time.sleep(0.1)

    def _check(self, group: tuple[str, str]):
        """The check of one checkpoint (all its targets), once its clean render sets are ready; then the gate."""
        from dataclasses import replace

        from orchestrator.check import gate, run_check
        from orchestrator.render import set_need

        backbone, source = group
        trials = [t for t in self.plan.trials if (t.backbone, t.source_dataset or t.dataset) == group]
        targets = list(dict.fromkeys(t.dataset for t in trials))
        self._wait([set_need(d, CLEAN, 0) for d in targets if d in self.plan.renders])
        report = run_check(replace(self.plan, trials=trials), self.checkpoints, self.ledger, self.console,
                           self.opts.tolerance, submission=self.submission)
        gate(report, self.opts.force, self.console)
        fresh = {c.case.specs[c.direction].key for c in report.comparisons
                 if c.metrics is not None and not c.case.reused.get(c.direction)}
        self.checked += self.gate.drop(fresh)
        self.gate.ready(check_need(backbone, source))
        return report

    def _prepare_assets(self) -> None:
        from dataclasses import replace

        renders = {d: [c for c in cells if (d, c[0], int(c[1])) in self.deferred]
                   for d, cells in self.plan.renders.items()}
        sub = replace(self.plan, renders={d: c for d, c in renders.items() if c})
        _, video_assets = prepare_assets(sub, self.checkpoints, self.console)
        self.stream.add(self.deferred, video_assets)

    def _text_sets(self) -> None:
        from orchestrator.text_render import render_text_sets

        self.text = render_text_sets(self.plan, self.checkpoints, self.console, progress=self.progress)
        self.gate.ready("text:all")

    # -- the driver's side -------------------------------------------------------------------------------------
    def finish(self) -> None:
        """After Tune: wait for what no remaining trial needed (render sets of cells already done), then raise what
        stopped a stage (CheckFailed, a failed fine-tune)."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        if self.gate.error is not None:
            raise self.gate.error
        self.stream.join()

    def stop(self) -> None:
        self._stopped.set()
        self.gate.close()
        if self.stream is not None:
            self.stream.stop()

    def print_render(self, console: Console) -> None:
        summary = self.stream.summary
        console.print(summary.line())
        if self.text is not None:
            console.print(self.text.line())
            for f in self.text.failures[:10]:
                console.print(f"  [red]text set failed[/] {f['set']}: {escape(f['error'])}")
        for f in summary.failures[:10]:
            console.print(f"  [red]render failed[/] {f['dataset']}/{f['video_id']} {f['perturbation']}/"
                          f"{f['severity']} ({f['video_path']}): {f['error']}")
        if summary.nonfaithful:
            console.print("  fallbacks used (non-faithful renders): " +
                          ", ".join(f"{k} x{v}" for k, v in summary.nonfaithful.items()))


def _prepares(perturbation: str) -> bool:
    """Whether a perturbation's per-video assets are chosen with a checkpoint (event insertion's distractors)."""
    from workloads.perturbations.video import get as perturbation_info

    if perturbation == CLEAN:
        return False
    needs = perturbation_info(perturbation).assets
    return needs is not None and needs.prepare is not None


def _merge(reports: list, tolerance: float):
    from orchestrator.check import CheckReport

    return CheckReport([c for r in reports for c in r.comparisons], tolerance, sum(r.seconds for r in reports))


def start_parent(tracker, plan: Plan, report: SubmitReport, submission: str) -> str:
    closed = tracker.close_stale_parents(plan.grid.name)
    parent = tracker.start_parent(plan.grid, Path(plan.grid.source).read_text(),
                                  {"submission": submission, **plan.summary(), "to_run": report.to_run,
                                   "done_before": report.done_before, "closed_stale_parents": len(closed)})
    return parent


def sync_store(tracker, plan: Plan, ledger: TrialLedger, parent, console: Console,
               entries: tuple[list[dict], Callable[[str], dict | None]] | None = None) -> int:
    """Log to this store every trial of the plan the ledger holds and the store lacks (a driver killed between
    the ledger and MLflow, a store that was down, another store); `parent()` gives the parent run. `entries`: the
    entries to compare and how to read one whole (`ledger_as_of`), else the ledger as it is now."""
    store = store_key(tracker.uri)
    entries, whole = entries or ledger_as_of(plan, ledger, ())
    created = tracker.sync(plan.grid.name, entries, parent, lambda key, rid: ledger.record_run(key, store, rid),
                           whole=whole)
    if created:
        console.print(f"MLflow: {created} trials from the ledger logged to {tracker.uri} (missing there)")
    return created


def ledger_as_of(plan: Plan, ledger: TrialLedger, todo: list[TrialSpec]
                 ) -> tuple[list[dict], Callable[[str], dict | None]]:
    """The plan's ledger entries as they are now, for `sync_store`, and how to read one whole: entries of `todo`
    whole now, since trials about to run rewrite them (a sync running beside them would otherwise log a new result
    that the trial's own logging logs again)."""
    # read without the per-query lists (a resume of a full grid reads every entry); a run it logs reads its entry whole
    entries = ledger.entries((t.key for t in plan.trials), lists=False)
    rerun = {t.key for t in todo}
    now = {e["key"]: ledger.get(e["key"]) for e in entries if e["key"] in rerun}
    return entries, lambda key: now[key] if key in now else ledger.get(key)


def finish(plan: Plan, grid: GridSpec, ledger: TrialLedger, report: SubmitReport, console: Console, t_start: float,
           summary, counts: dict[str, int], status: str, submission: str, tracker=None) -> SubmitReport:
    """Tables from the ledger, and the MLflow parent closed with them. Without a run (nothing to do) a parent run is
    made only when the store lacks some of the grid's trials."""
    paths = plan.paths
    if tracker is not None:
        tracker.flush()   # trial runs still queued on its thread (LiveRecorder): their run ids reach the ledger first
    # tables and report, in a child process for a large grid: the driver does not grow by their frames and plots
    # (orchestrator/outputs.py)
    outputs = write_grid_outputs(grid, plan.trials, paths.grid_dir(grid.name), paths.ledger)
    if outputs.error:
        console.print(f"[red]tables and report not written ({outputs.error}); the ledger has every result: "
                      f"python -m orchestrator report {grid.source}[/]")
    elif outputs.report_error:
        console.print(f"[yellow]report not written ({outputs.report_error}); python -m orchestrator report "
                      f"{grid.source}[/]")
    report.tables, report.outputs = outputs.files, outputs
    n_ok = outputs.ok
    try:
        if summary is None:  # nothing ran: sync only, with a parent run only when something is logged
            tracker = Tracker(report.tracking_uri, paths.results)
            tracker.close_stale_parents(grid.name)

            def parent_on_demand() -> str:
                if report.parent_run_id is None:
                    report.parent_run_id = start_parent(tracker, plan, report, submission)
                return report.parent_run_id

            sync_store(tracker, plan, ledger, parent_on_demand, console)
        if tracker is not None and report.parent_run_id:
            tracker.finish_parent(report.parent_run_id, {
                "trials_ok": n_ok, "trials_failed": outputs.failed,
                "trials_missing": len(plan.trials) - outputs.present,
                "ran_now_ok": counts["ok"], "ran_now_failed": counts["failed"],
                "render_failed": summary.failed if summary is not None else 0},
                report.tables, status if counts["failed"] == 0 or status == "KILLED" else "FAILED")
    except Exception as err:  # the ledger and tables are safe; the next submit or `sync` updates the store
        console.print(f"[yellow]MLflow store {report.tracking_uri} not updated ({error_name(err)}: "
                      f"{_first_line(err)}); results are in the ledger: "
                      f"python -m orchestrator sync {grid.source} brings the store up to date[/]")
    report.seconds = time.time() - t_start
    console.print(f"done in {report.seconds:.0f}s: {counts['ok']} trials ok, {counts['failed']} failed now; "
                  f"{n_ok}/{len(plan.trials)} cells of the grid done")
    for f in report.tables:
        console.print(f"  {f}")
    return report


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "message", err))   # a TrackingError's message, without its type name
    return text.splitlines()[0] if text else ""


class LiveRecorder:
    """The driver's side of every finished trial, in this order: the ledger (so nothing is lost if anything after
    fails), its MLflow child run, a console line and the progress bar. When the tracking store stops answering,
    logging stops for the rest of the submission (one message); the ledger keeps everything and the next submit or
    `sync` brings the store up to date. `parent`: the parent run's id, or a callable that gives it on the tracker's
    thread (`submit` starts the parent run there)."""

    def __init__(self, ledger: TrialLedger, tracker, parent: str | Callable[[], str], grid_name: str, submission: str,
                 progress, task):
        self.ledger, self.tracker, self.parent = ledger, tracker, parent
        self.store = store_key(tracker.uri)
        self.grid_name, self.submission = grid_name, submission
        self.progress, self.task = progress, task
        self.counts = {"ok": 0, "failed": 0}
        self.tracking = True

    def result(self, result: dict[str, Any]) -> None:
        try:
            entry = self.ledger.put(result, submission=self.submission)
        except OSError as err:  # a full or read-only disk: say so once per trial, in one line, and go on
            self.progress.console.print(f"[red]ledger write failed for {result['key']} ({err.strerror or err}): "
                                        f"free space under {self.ledger.root} and resume[/]")
            entry = None
        if entry is not None and self.tracking:   # on the tracker's thread: this callback returns now
            key = result["key"]
            self.tracker.log_trial_later(
                self.parent, self.grid_name, entry,
                lambda rid: self.ledger.record_run(key, self.store, rid, entry),   # the entry as written: not re-read
                self.untracked)
        ok = result["status"] == "ok"
        self.counts["ok" if ok else "failed"] += 1
        spec = TrialSpec.from_dict(result["spec"])
        if ok:
            m = result["metrics"]
            line = f"R@1 {m['R1']:5.1f}  skew {m['hub_skewness']:5.2f}  ({result['timings'].get('total_s', 0):.1f}s)"
        else:
            line = f"[red]FAILED[/] {escape(str(result['error']))}"
        where = spec.dataset if spec.source_dataset in ("", spec.dataset) else f"{spec.source_dataset}->{spec.dataset}"
        self.progress.console.print(f"  {where:12s} {spec.backbone:9s} {spec.method_label:12s} {spec.direction} "
                                    f"{spec.cell:22s} {line}")
        self.progress.update(self.task, advance=1, failed=self.counts["failed"])

    def untracked(self, err: Exception) -> None:
        """Tracking trouble must not lose the result: the ledger has it."""
        self.tracking = False
        self.progress.console.print(
            f"[yellow]MLflow store {self.tracker.uri} stopped answering ({error_name(err)}); results "
            f"stay in the ledger and the next submit (or `python -m orchestrator sync`) logs them[/]")

    def crash(self, spec: dict[str, Any], message: str) -> None:
        """A trial whose worker died (after Tune's retries): recorded as failed, like any other failure."""
        self.result({"key": TrialSpec.from_dict(spec).key, "spec": spec, "status": "failed",
                     "error": f"worker crashed: {message}", "metrics": {}, "timings": {}})


def prepare_assets(plan: Plan, checkpoints: dict[str, dict[str, Any]], console: Console
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, dict]]]:
    """Per-dataset perturbation assets, and per-video ones: what a perturbation's registration says it prepares
    once per dataset (event insertion: each query video's distractor, chosen by embedding pool videos with CLIP)."""
    from orchestrator.assets import dataset_assets, prepare_video_assets
    from workloads.perturbations.video import get as perturbation_info

    assets = {name: dataset_assets(plan.grid, name) for name in plan.renders}
    video_assets: dict[str, dict[str, dict]] = {}
    for name, cells in plan.renders.items():
        for pert in dict.fromkeys(p for p, _ in cells):
            needs = perturbation_info(pert).assets if pert != CLEAN else None
            if needs is None or needs.prepare is None:
                continue
            backbone, _, kind = plan.embedders[name]
            weights = plan.grid.models.pretrained if backbone is None else checkpoints[f"{backbone}|{name}"]["path"]
            t0 = time.time()
            chosen = prepare_video_assets(plan, name, pert, weights, kind, plan.render_assets[(name, pert)])
            for video_id, extra in chosen.items():
                video_assets.setdefault(name, {}).setdefault(video_id, {}).update(extra)
            console.print(f"{pert} assets for {name}: {len(chosen)} videos prepared ({time.time() - t0:.0f}s)")
    return assets, video_assets


__all__ = ["SubmitOptions", "SubmitReport", "submit", "select_trials", "print_plan", "make_console"]
