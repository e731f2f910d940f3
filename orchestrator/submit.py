"""`submit`: a grid, end to end.

    plan -> datasets (generated once) -> checkpoints (fine-tuned once) -> render cache (Ray Data)
         -> trials (Ray Tune; ledger + MLflow as each one finishes) -> result tables

Every stage reuses what exists: a second submission of the same grid trains nothing, renders nothing and runs only
trials without a successful ledger entry (so it also resumes failed ones).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from orchestrator.grid import GridSpec, load_grid
from orchestrator.ledger import TrialLedger
from orchestrator.plan import Paths, Plan, build_plan, missing_videos, plan_for_sizing
from orchestrator.results import write_tables
from orchestrator.tracking import Tracker, check_store, default_tracking_uri, store_key
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
        console.print(f"generating dataset {name} ({config.n_train} train / {config.n_test} test clips, "
                      f"{config.size}px, H.264) into {location} (first use only) ...")


def prepare_models(plan: Plan, console: Console) -> dict[str, dict[str, Any]]:
    """Fine-tune (or pretrain) the checkpoints the grid does not supply, as Ray tasks so a cluster's GPU node does the
    work; returns "backbone|source" -> {"path", "clip_only"}."""
    import ray

    models: dict[str, dict[str, Any]] = {}
    pending, seen = [], set()
    for (backbone, source), m in plan.models.items():
        path = plan.model_path(backbone, source)
        models[f"{backbone}|{source}"] = {"path": str(path), "clip_only": m.clip_only}
        if m.given_path or path.is_file() or path in seen:
            continue
        seen.add(path)
        pending.append((m.backbone, m.train_dataset, m, path))
    gpus = 1 if plan.grid.runtime.gpus_per_trial > 0 else 0
    from orchestrator import ray_env

    cpus = ray_env.largest_node_cpus() if not gpus else 1   # fits on one node
    task = ray.remote(num_cpus=cpus, num_gpus=gpus)(_finetune_task)
    for backbone, ds, m, path in pending:  # in plan order: clip4clip before the X-Pool that starts from it
        dsp = plan.datasets[ds]
        init = models[f"{m.init_from[0]}|{m.init_from[1]}"]["path"] if m.init_from else \
            None if m.clip_only else plan.grid.models.pretrained
        what = f"pretraining the zero-shot CLIP on {ds} single frames" if m.clip_only \
            else f"fine-tuning {backbone} on {ds}"
        console.print(f"{what} ({m.finetune.steps} steps{', from ' + m.init_from[0] if m.init_from else ''}) ...")
        t0 = time.time()
        record = ray.get(task.remote(m.finetune, ds, dsp.root, dsp.options, dsp.version, str(plan.paths.models),
                                     init, "cuda" if gpus else "cpu"))
        mt = record["metrics"]
        console.print(f"  {backbone}/{ds}: clean R@1 v2t {mt['v2t_R1']:.1f} / t2v {mt['t2v_R1']:.1f} "
                      f"({time.time() - t0:.0f}s) -> {path.name}")
    return models


def _finetune_task(config, dataset: str, root, options, data_version: str, cache_dir: str, init_path, device: str):
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
    check_hub_k(plan)
    plan.notes.extend(missing_videos(plan))   # all at once, before anything starts; none of a split's: PlanError
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

    info = ray_env.start_ray(opts.address, opts.num_cpus, opts.dashboard)
    if info.get("dashboard_url"):
        console.print(f"Ray dashboard: {info['dashboard_url']}  ({ray_env.auth_token_hint()})")
    try:
        ray_env.check_resources(grid.runtime.gpus_per_trial, grid.runtime.cpus_per_trial)
        return _run(plan, grid, todo, ledger, report, console, t_start, opts)
    finally:
        if opts.address is None:
            ray_env.stop_ray()


def check_hub_k(plan: Plan) -> None:
    """runtime.hub_k counts how often each gallery item is among a query's k nearest: a k above a target's gallery
    size is an error up front (one line), not a failure in every trial."""
    k = plan.grid.runtime.hub_k
    for name in dict.fromkeys(t.dataset for t in plan.trials):
        try:
            n = len(plan.datasets[name].test)
        except (KeyError, TypeError, AttributeError):   # size unknown before the data is on disk
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
         t_start: float, opts: SubmitOptions | None = None) -> SubmitReport:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator import render as render_stage
    from orchestrator.check import fold_render, trial_environment
    from orchestrator.tune import run_trials

    paths = plan.paths
    checkpoints = prepare_models(plan, console)
    todo, checked = _check_checkpoints(plan, checkpoints, ledger, console, opts or SubmitOptions(), report, todo)
    assets, video_assets = prepare_assets(plan, checkpoints, console)
    summary = render_stage.render(plan, assets, video_assets, actors=grid.runtime.render_actors, console=console)
    fold_render(report.check, summary)   # the clean clips check rendered count as rendered by this submission
    report.render = summary
    console.print(summary.line())
    if plan.text_sets:
        from orchestrator.text_render import render_text_sets

        text = render_text_sets(plan, checkpoints, console)
        console.print(text.line())
        for f in text.failures[:10]:
            console.print(f"  [red]text set failed[/] {f['set']}: {escape(f['error'])}")
    for f in summary.failures[:10]:
        console.print(f"  [red]render failed[/] {f['dataset']}/{f['video_id']} {f['perturbation']}/{f['severity']}"
                      f" ({f['video_path']}): {f['error']}")
    if summary.nonfaithful:
        console.print("  fallbacks used (non-faithful renders): " +
                      ", ".join(f"{k} x{v}" for k, v in summary.nonfaithful.items()))

    tracker = Tracker(report.tracking_uri, paths.results)
    submission = _submission_id()
    parent = report.parent_run_id = start_parent(tracker, plan, report, submission)
    console.print(f"MLflow: parent run {parent} in {report.tracking_uri}  "
                  f"(mlflow ui --backend-store-uri {report.tracking_uri})")
    sync_store(tracker, plan, ledger, lambda: parent, console)

    rt = grid.runtime
    env = trial_environment(plan, checkpoints)
    progress = Progress(TextColumn("trials"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(), console=console)
    recorder = LiveRecorder(ledger, tracker, parent, grid.name, submission, progress,
                            progress.add_task("trials", total=len(todo), failed=0))
    recorder.counts["ok"] += checked   # the clean source cells `check` ran (logged to MLflow by sync_store above)
    status = "FINISHED"
    try:
        with progress:
            run_trials(todo, env, storage_path=str(paths.grid_dir(grid.name) / "tune"), name=submission,
                       cpus_per_trial=rt.cpus_per_trial, gpus_per_trial=rt.gpus_per_trial,
                       max_failures=rt.max_failures, max_concurrent=rt.max_concurrent_trials,
                       on_result=recorder.result, on_crash=recorder.crash)
    except KeyboardInterrupt:
        status = "KILLED"
        console.print(f"[yellow]interrupted: every finished trial is in the ledger; run the rest with: "
                      f"python -m orchestrator resume {grid.source}[/]")
    report.ok, report.failed = recorder.counts["ok"], recorder.counts["failed"]
    finish(plan, grid, ledger, report, console, t_start, summary, recorder.counts, status, submission,
           tracker if recorder.tracking else None)
    if status == "KILLED":
        raise KeyboardInterrupt
    return report


def _check_checkpoints(plan: Plan, checkpoints, ledger: TrialLedger, console: Console, opts: SubmitOptions,
                       report: SubmitReport, todo: list) -> tuple[list, int]:
    """`check` before anything else is rendered or run: refuse (unless --force) a checkpoint whose clean R@1 misses
    the paper's. The clean source cells it ran are in the ledger now: they leave the list to run and count as run
    now (returns the rest and their number)."""
    from orchestrator.check import gate, run_check

    report.check = run_check(plan, checkpoints, ledger, console, opts.tolerance)
    gate(report.check, opts.force, console)
    fresh = {c.case.specs[c.direction].key for c in report.check.comparisons
             if c.metrics is not None and not c.case.reused.get(c.direction)}
    remaining = [t for t in todo if t.key not in fresh]
    return (remaining, len(todo) - len(remaining)) if remaining else (todo, 0)


def start_parent(tracker, plan: Plan, report: SubmitReport, submission: str) -> str:
    closed = tracker.close_stale_parents(plan.grid.name)
    parent = tracker.start_parent(plan.grid, Path(plan.grid.source).read_text(),
                                  {"submission": submission, **plan.summary(), "to_run": report.to_run,
                                   "done_before": report.done_before, "closed_stale_parents": len(closed)})
    return parent


def sync_store(tracker, plan: Plan, ledger: TrialLedger, parent, console: Console) -> int:
    """Log to this store every trial of the plan the ledger holds and the store lacks (a driver killed between
    the ledger and MLflow, a store that was down, another store); `parent()` gives the parent run."""
    store = store_key(tracker.uri)
    entries = ledger.entries(t.key for t in plan.trials)
    created = tracker.sync(plan.grid.name, entries, parent, lambda key, rid: ledger.record_run(key, store, rid))
    if created:
        console.print(f"MLflow: {created} trials from the ledger logged to {tracker.uri} (missing there)")
    return created


def finish(plan: Plan, grid: GridSpec, ledger: TrialLedger, report: SubmitReport, console: Console, t_start: float,
           summary, counts: dict[str, int], status: str, submission: str, tracker=None) -> SubmitReport:
    """Tables from the ledger, and the MLflow parent closed with them. Without a run (nothing to do) a parent run is
    made only when the store lacks some of the grid's trials."""
    paths = plan.paths
    if tracker is not None:
        tracker.flush()   # trial runs still queued on its thread (LiveRecorder): their run ids reach the ledger first
    entries = ledger.entries(t.key for t in plan.trials)
    report.tables = write_tables(entries, paths.grid_dir(grid.name), grid)
    try:  # the HTML report and its plots (orchestrator/report.py); the parent run gets them with the tables
        from orchestrator.report import write_report

        report.tables += write_report(grid, plan.trials, entries, paths.grid_dir(grid.name))
    except Exception as err:  # a plot must not fail a submission: `report GRID` rebuilds it
        console.print(f"[yellow]report not written ({type(err).__name__}: {err}); python -m orchestrator report "
                      f"{grid.source}[/]")
    n_ok = sum(e["status"] == "ok" for e in entries)
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
            failed = sum(e["status"] == "failed" for e in entries)
            tracker.finish_parent(report.parent_run_id, {
                "trials_ok": n_ok, "trials_failed": failed, "trials_missing": len(plan.trials) - len(entries),
                "ran_now_ok": counts["ok"], "ran_now_failed": counts["failed"],
                "render_failed": summary.failed if summary is not None else 0},
                report.tables, status if counts["failed"] == 0 or status == "KILLED" else "FAILED")
    except Exception as err:  # the ledger and tables are safe; the next submit or `sync` updates the store
        console.print(f"[yellow]MLflow store {report.tracking_uri} not updated ({type(err).__name__}: "
                      f"{str(err).splitlines()[0] if str(err) else ''}); results are in the ledger: "
                      f"python -m orchestrator sync {grid.source} brings the store up to date[/]")
    report.seconds = time.time() - t_start
    console.print(f"done in {report.seconds:.0f}s: {counts['ok']} trials ok, {counts['failed']} failed now; "
                  f"{n_ok}/{len(plan.trials)} cells of the grid done")
    for f in report.tables:
        console.print(f"  {f}")
    return report


class LiveRecorder:
    """The driver's side of every finished trial, in this order: the ledger (so nothing is lost if anything after
    fails), its MLflow child run, a console line and the progress bar. When the tracking store stops answering,
    logging stops for the rest of the submission (one message); the ledger keeps everything and the next submit or
    `sync` brings the store up to date."""

    def __init__(self, ledger: TrialLedger, tracker, parent: str, grid_name: str, submission: str, progress, task):
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
            self.tracker.log_trial_later(self.parent, self.grid_name, entry,
                                         lambda rid: self.ledger.record_run(key, self.store, rid), self._untracked)
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

    def _untracked(self, err: Exception) -> None:
        """Tracking trouble must not lose the result: the ledger has it."""
        self.tracking = False
        self.progress.console.print(
            f"[yellow]MLflow store {self.tracker.uri} stopped answering ({type(err).__name__}); results "
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
