"""What each command does (argument parsing is orchestrator/cli/main.py). Every command takes a grid as a file, a
shipped grid's name or the name of a grid with results (orchestrator/config/shipped.py); the commands that start Ray
or open an MLflow store send those libraries' output to results/<grid>/logs/ (orchestrator/run/console.py)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
import os
from pathlib import Path

from rich.markup import escape

from orchestrator.config.grid import load_grid
from orchestrator.config.schema import GridSpec
from orchestrator.config.shipped import describe, resolve_grid, shipped_grids
from orchestrator.planning.clean_check import check_cases
from orchestrator.planning.describe import wall_lines
from orchestrator.planning.environment import checkpoint_paths, models_to_make
from orchestrator.planning.paths import Paths, check_writable
from orchestrator.planning.plan import Plan, build_plan, missing_videos, plan_for_sizing
from orchestrator.record.ledger import TrialLedger, count_text
from orchestrator.record.results_lock import results_lock
from orchestrator.record.mlflow_store import (CorruptStore, StoreOfAnotherFolder, Tracker, check_store,
                                              corrupt_store_line, default_tracking_uri, is_corrupt_store_error)
from orchestrator.record.sync import select_trials, sync_grid
from orchestrator.report.page import write_report
from orchestrator.report.formats import LEGEND, table_markdown
from orchestrator.report.results import scenario_tables, write_tables
from orchestrator.report.rows import planned_rows
from orchestrator.run import ray_env
from orchestrator.run.console import log_path, make_console, print_plan, quiet_libraries
from orchestrator.run.options import SubmitOptions
from orchestrator.stages import render as render_stage
from orchestrator.stages.assets import prepare_assets
from orchestrator.stages.check import reuse_ledger, run_check
from orchestrator.stages.contact import write_contact_sheet
from orchestrator.stages.finetune import prepare_models
from workloads.atomic import sweep_temporaries


# the commands that write a results folder: each holds its lock (orchestrator/record/results_lock.py) while it runs;
# `status`, `plan` and `submit --dry-run` read without it
WRITERS = ("submit", "resume", "check", "sync", "report")
# the ones that also write the cache: they sweep the temporary files a killed run left there (workloads/atomic.py)
SWEEPERS = ("submit", "resume", "check")


def dispatch(args: argparse.Namespace) -> int:
    command = {"submit": cmd_submit, "resume": cmd_resume, "plan": cmd_plan, "status": cmd_status,
               "report": cmd_report, "render": cmd_render, "sync": cmd_sync, "grids": cmd_grids,
               "convert-checkpoint": cmd_convert_checkpoint, "check": cmd_check}[args.command]
    if args.command not in WRITERS or getattr(args, "dry_run", False):
        return command(args)
    resolve_grid(args.grid, args.results_dir)   # a grid that is not there makes no results folder
    if args.command == "report" and not Path(args.results_dir).expanduser().is_dir():
        return command(args)   # nothing to report, nothing written (the command says so)
    with results_lock(args.results_dir, f"mlvp {args.command} {args.grid}", getattr(args, "break_lock", False)) \
            as holder:
        if args.command in SWEEPERS:
            _sweep(args, holder["started_unix"])
        return command(args)


def _sweep(args: argparse.Namespace, started: float) -> None:
    """The temporary files that writers killed mid-write left in the cache and the results folder (workloads/
    atomic.py `sweep_temporaries`): removed, in one line."""
    paths = Paths.make(args.results_dir, args.cache_dir)
    removed, freed = sweep_temporaries([paths.cache, paths.results], started)
    if removed:
        print(f"note: removed {removed} stale temporary file{'s' if removed > 1 else ''} ({freed / 2**20:.1f} MB) "
              f"left by an earlier run that was killed mid-write under {paths.cache} and {paths.results}",
              file=sys.stderr, flush=True)


def _grid(args: argparse.Namespace) -> tuple[str, GridSpec, Paths]:
    """The grid file the argument names, the grid, and the folders."""
    path = resolve_grid(args.grid, args.results_dir)
    return path, load_grid(path), Paths.make(args.results_dir, args.cache_dir)


def _options(args: argparse.Namespace, **kw) -> SubmitOptions:
    return SubmitOptions(results_dir=args.results_dir, cache_dir=args.cache_dir,
                         tracking_uri=getattr(args, "tracking_uri", None), address=getattr(args, "address", None),
                         num_cpus=getattr(args, "num_cpus", None),
                         dashboard=not getattr(args, "no_dashboard", False), **kw)


def _libraries(args: argparse.Namespace, paths: Paths, grid: GridSpec, command: str):
    """Ray's, Tune's and MLflow's output to results/<grid>/logs/ (or here with --verbose); says where, once."""
    check_writable(paths.results)   # before the log file: a results folder that cannot be made is named as such
    log = log_path(paths.grid_dir(grid.name), command)
    verbose = getattr(args, "verbose", False)
    if not verbose:
        make_console().print(f"log: {log} (Ray, Ray Tune and MLflow output; --verbose shows it here)")
    return quiet_libraries(log, verbose)


def cmd_submit(args) -> int:
    from orchestrator.run.submit import submit   # imports Ray Tune (~1.5 s): only the commands that run trials

    path = resolve_grid(args.grid, args.results_dir)
    opts = _options(args, dry_run=args.dry_run, rerun=args.rerun, force=args.force, tolerance=args.tolerance)
    if args.dry_run:   # plans only: writes nothing, starts nothing
        report = submit(path, opts)
        unknown = [d for d, n in report.plan.clip_counts().items() if n is None]
        clips = f"{report.plan.render_count()} clips to render" + (
            f" (unknown for {', '.join(unknown)})" if unknown else "")
        print(f"dry run: {len(report.plan.trials)} trials ({report.to_run} to run), "
              f"{sum(len(r) for r in report.plan.renders.values())} render sets, {clips}; nothing started")
        return 0
    grid, paths = load_grid(path), Paths.make(args.results_dir, args.cache_dir)
    check_store(args.tracking_uri or default_tracking_uri(paths.results), grid=args.grid)   # a corrupt one: rebuilt
    with _libraries(args, paths, grid, "submit") as console:
        report = submit(path, opts, console)
    return 0 if report.failed == 0 else 1


def cmd_resume(args) -> int:
    path, grid, paths = _grid(args)
    plan = build_plan(grid, paths)
    ledger = TrialLedger(paths.ledger)
    todo, status = select_trials(plan, ledger, args.only_failed, False, args.incomplete)
    console = make_console()
    for line in ledger.damaged_lines():
        console.print(f"[yellow]{escape(line)}[/]")
    c = Counter(status.values())
    if args.only_failed and c.get("missing", 0) + c.get("damaged", 0):
        console.print(f"--only-failed: {c.get('missing', 0)} never-run and {c.get('damaged', 0)} damaged cells are "
                      f"not rerun (resume without --only-failed runs them)")
    if not todo:
        console.print(f"nothing to resume: {c.get('ok', 0)}/{len(plan.trials)} cells done, {c.get('failed', 0)} "
                      f"failed" + (f", {c['damaged']} damaged" if c.get("damaged") else "")
                      + (f", {c.get('missing', 0)} never run" if c.get("missing") else ""))
        return 0
    from orchestrator.run.submit import submit   # imports Ray Tune (~1.5 s): only the commands that run trials

    opts = _options(args, only_failed=args.only_failed, incomplete=args.incomplete, force=args.force,
                    tolerance=args.tolerance)
    check_store(args.tracking_uri or default_tracking_uri(paths.results), grid=args.grid)
    with _libraries(args, paths, grid, "resume") as console:
        report = submit(path, opts, console)
    return 0 if report.failed == 0 else 1


def cmd_plan(args) -> int:
    """Sizes a grid whether or not its data is on disk (what is not there is listed, clip counts unknown), and
    writes nothing: no dataset is generated, no folder made, no damaged ledger entry moved."""
    path = resolve_grid(args.grid, args.results_dir)
    plan = plan_for_sizing(path, Paths.make(args.results_dir, args.cache_dir))
    plan.notes.extend(missing_videos(plan))
    ledger = TrialLedger(plan.paths.ledger, read_only=True)
    todo, status = select_trials(plan, ledger, False, False)
    console = make_console()
    for line in ledger.damaged_lines():
        console.print(f"[yellow]{escape(line)}[/]")
    print_plan(plan, status, todo, console, verbose=args.verbose)
    if args.gpus:
        for line in wall_lines(plan, todo, args.gpus, args.cpus or 16 * args.gpus):
            console.print(escape(line))
    by = Counter((t.scenario, t.dataset if t.source_dataset in ("", t.dataset) else f"{t.source_dataset}->{t.dataset}",
                  t.direction, t.backbone_label, _backbone_config(t)) for t in plan.trials)
    for (scenario, where, d, b, config), n in by.items():
        console.print(escape(f"  {scenario:14s} {where:26s} {d} {b:10s} {n} trials{config}"))
    return 0


def _backbone_config(t) -> str:
    """What a `plan` line adds for a backbone with options: " (tcd: ocr=false)"; "" for one as registered."""
    options = t.backbone_kwargs
    if not options:
        return ""
    return f" ({t.backbone}: {', '.join(f'{k}={json.dumps(v)}' for k, v in options.items())})"


def cmd_check(args) -> int:
    """Checkpoints (fine-tuned when missing), clean clips, then the clean retrieval beside the paper."""
    _, grid, paths = _grid(args)
    check_writable(paths.results)
    check_writable(paths.cache)
    plan = build_plan(grid, paths)
    ledger = TrialLedger(paths.ledger)
    if not models_to_make(plan) and not reuse_ledger(check_cases(plan), ledger):
        # every checkpoint made and every clean result in the ledger: compared again without starting Ray
        report = run_check(plan, checkpoint_paths(plan), ledger, make_console(), args.tolerance)
        return 1 if report.misses() or report.failures() else 0
    with _libraries(args, paths, grid, "check") as console:
        for note in missing_videos(plan):
            console.print(f"[yellow]note[/]: {escape(note)}")
        ray_env.start_ray(args.address, args.num_cpus, dashboard=False)
        try:
            report = run_check(plan, prepare_models(plan, console), ledger, console, args.tolerance)
        finally:
            if args.address is None:
                ray_env.stop_ray()
    return 1 if report.misses() or report.failures() else 0


def cmd_status(args) -> int:
    """Exit status: 0 every cell done, 1 some failed or damaged, 3 some never run (none failed)."""
    _, grid, paths = _grid(args)
    plan = build_plan(grid, paths)
    ledger = TrialLedger(plan.paths.ledger)
    console = make_console()
    _, status = select_trials(plan, ledger, False, False)
    for line in ledger.damaged_lines():
        console.print(f"[yellow]{escape(line)}[/]")
    entries = {t.key: ledger.get(t.key) for t in plan.trials}
    counts = Counter(status.values())
    console.print(f"{grid.name}: {len(plan.trials)} cells: {count_text(counts)}")
    failed = [(t, entries[t.key]) for t in plan.trials if status[t.key] == "failed"]
    for t, e in failed if args.all else failed[:20]:
        first_line = ((e.get("error") or "no error recorded").splitlines() or [""])[0]
        console.print(f"  [red]failed[/] {escape(t.label)} {escape('[' + t.key[:10] + ']')}: {escape(first_line)}")
    if len(failed) > 20 and not args.all:
        console.print(f"  ... {len(failed) - 20} more (--all)")
    # damaged cells by their file, every time (the line naming one as it is set aside comes once, above)
    files = ledger.damaged_files()
    damaged = [t for t in plan.trials if status[t.key] == "damaged"]
    for t in damaged if args.all else damaged[:20]:
        console.print(f"  [yellow]damaged[/] {escape(t.label)} {escape('[' + t.key[:10] + ']')}: "
                      f"{escape(files.get(t.key, ''))}")
    if len(damaged) > 20 and not args.all:
        console.print(f"  ... {len(damaged) - 20} more (--all)")
    if counts.get("failed") or counts.get("missing") or counts.get("damaged"):
        console.print(f"rerun them with: mlvp resume {args.grid}")
    # done, but some queries were dropped (videos that could not be decoded): fixed videos are re-read on request
    incomplete = [(t, e) for t in plan.trials if (e := entries[t.key]) and e["status"] == "ok" and e.get("dropped")]
    if incomplete:
        console.print(f"{len(incomplete)} done cells ran with dropped queries (undecodable videos):")
        for t, e in incomplete if args.all else incomplete[:20]:
            first = e["dropped"][0]
            console.print(f"  {escape(t.label)}: {len(e['dropped'])} of {len(e['dropped']) + (e.get('n_queries') or 0)}"
                          f" queries dropped (first: {escape(str(first.get('video_id')))}: "
                          f"{escape(str(first.get('reason', '')))})")
        console.print(f"after fixing the videos, rerun those cells with: mlvp resume {args.grid} --incomplete")
    if counts.get("failed") or counts.get("damaged"):
        return 1
    return 3 if counts.get("missing") else 0


def cmd_sync(args) -> int:
    """Bring a tracking store up to date from the ledger: every trial of the grid the store lacks is logged."""
    t0 = time.time()
    _, grid, paths = _grid(args)
    check_writable(paths.results)
    uri = args.tracking_uri or default_tracking_uri(paths.results)
    check_store(uri, grid=args.grid)   # before the plan, which may generate a dataset
    plan = build_plan(grid, paths)
    ledger = TrialLedger(paths.ledger)
    try:
        with _libraries(args, paths, grid, "sync") as console:
            created, parent = sync_grid(Tracker(uri, paths.results, paths.store_templates), plan, ledger, console)
    except Exception as err:   # damaged past what check_store reads: the same one line, not MLflow's traceback
        if uri.startswith("sqlite:///") and is_corrupt_store_error(err):
            raise CorruptStore(corrupt_store_line(uri, str(err).strip().splitlines()[0][:200], args.grid)) from None
        raise
    present = sum(1 for t in plan.trials if ledger.get(t.key) is not None)
    make_console().print(f"sync: {created} trial runs logged to {uri}" + (f" (parent run {parent})" if parent else "")
                         + f"; {present - created} of the ledger's {present} were there already "
                         f"({time.time() - t0:.1f} s)")
    return 0


def cmd_report(args) -> int:
    """Tables from the ledger (results/<grid>/*.parquet), the report (results/<grid>/report/: index.html with its
    plots, report.md, report_tables.parquet; orchestrator/report/page.py), the chosen metric's tables printed, and the
    report logged to the grid's newest MLflow parent run when the store has one."""
    path, grid, paths = _grid(args)
    plan = build_plan(grid, paths)
    ledger = TrialLedger(plan.paths.ledger)
    entries = ledger.entries((t.key for t in plan.trials), lists=False)
    console = make_console()
    for line in ledger.damaged_lines():
        console.print(f"[yellow]{escape(line)}[/]")
    damaged = ledger.damaged_files()   # after the entries are read: those found damaged just now are set aside
    if not entries and not any(t.key in damaged for t in plan.trials):
        console.print(f"{grid.name}: none of its {len(plan.trials)} cells is in the ledger under {paths.ledger}; "
                      f"nothing to report: run it first (mlvp submit {args.grid}) or give --results-dir")
        return 1
    grid_dir = plan.paths.grid_dir(grid.name)
    df = planned_rows(plan.trials, entries, lists=False, damaged=damaged)
    if args.metric not in df.columns:
        metrics = [c for c in df.columns if c[0].isupper() or c.startswith("hub_")]
        raise ValueError(f"unknown metric {args.metric!r}; metrics: {', '.join(metrics)}")
    computed = scenario_tables(grid, df)   # once: the table files and the report show the same tables
    files = write_tables(entries, grid_dir, grid, plan.trials, df, computed)
    report_files = write_report(grid, plan.trials, entries, grid_dir, ledger, computed=computed)
    counts = Counter(df["status"])
    console.print(f"{grid.name}: {len(plan.trials)} cells: {count_text(counts)}. {LEGEND}")
    for tables in scenario_tables(grid, df, args.metric).values():   # the headline tables come first
        for t in tables:
            console.print(f"\n{t.title}\n{escape(table_markdown(t))}")
    for f in files:
        console.print(f"wrote {f}")
    console.print(f"wrote {grid_dir / 'report' / 'index.html'} ({len(report_files)} report files)")
    if not args.no_mlflow:
        _log_report(args, grid, plan, files + report_files, console)
    return 0


def _log_report(args, grid: GridSpec, plan: Plan, files, console) -> None:
    """The tables and the report as artifacts of the grid's newest parent run (tables/, report/)."""
    uri = args.tracking_uri or default_tracking_uri(plan.paths.results)
    try:
        if uri.startswith("sqlite:///") and not os.path.exists(uri[len("sqlite:///"):]):
            return   # no local store yet: nothing was submitted here
        check_store(uri, grid=args.grid)
        with quiet_libraries(log_path(plan.paths.grid_dir(grid.name), "report")):
            tracker = Tracker(uri, plan.paths.results)
            parent = tracker.latest_parent(grid.name)
            if parent is not None:
                tracker.log_outputs(parent, files)
        if parent is not None:
            console.print(f"logged the report to MLflow run {parent} ({uri}, artifacts report/ and tables/)")
    except StoreOfAnotherFolder as err:
        console.print(f"[yellow]report not logged to MLflow: {escape(str(err))}[/]")
    except Exception as err:  # the files are written; the store is a view
        console.print(f"[yellow]report not logged to MLflow {uri}: {type(err).__name__}: "
                      f"{escape(str(err).splitlines()[0] if str(err) else '')}[/]")


def cmd_render(args) -> int:
    if args.contact_sheet:
        write_contact_sheet(args.contact_sheet)
        print(f"wrote {args.contact_sheet}")
        return 0
    if not args.grid:
        raise ValueError("render needs a grid (a file or a shipped grid's name), or --contact-sheet OUT.png")
    _, grid, paths = _grid(args)
    plan = build_plan(grid, paths)
    with _libraries(args, paths, grid, "render") as console:
        ray_env.start_ray(args.address, args.num_cpus, dashboard=False)
        try:
            # event insertion chooses distractors with the grid's CLIP, so its checkpoints must exist
            checkpoints = prepare_models(plan, console)
            assets, video_assets = prepare_assets(plan, checkpoints, console)
            summary = render_stage.render(plan, assets, video_assets, actors=grid.runtime.render_actors,
                                          console=console)
        finally:
            if args.address is None:
                ray_env.stop_ray()
    console = make_console()
    console.print(summary.line())
    for f in summary.failures:
        console.print(f"  failed {f['dataset']}/{f['video_id']} {f['perturbation']}/{f['severity']} "
                      f"({f['video_path']}): {escape(f['error'])}")
    return 0 if summary.failed == 0 else 1


def cmd_grids(args) -> int:
    """The shipped grids, or one's file (`--path NAME`)."""
    grids = shipped_grids()
    if args.path is not None:
        print(resolve_grid(args.path))
        return 0
    width = max(map(len, grids))
    for name, path in grids.items():
        print(f"{name:{width}s}  {describe(path)}")
    print(f"(files in {next(iter(grids.values())).parent}; `mlvp grids --path NAME` prints one)")
    return 0


def cmd_convert_checkpoint(args) -> int:
    from workloads.backbones import create_backbone, detect_format, save_backbone   # torch (~1 s)
    from workloads.backbones.convert import read_weights   # imports torch (seconds): only when weights are read

    fmt = detect_format(args.input)
    model = create_backbone(args.backbone, args.clip_model, pretrained=args.input, clip_only=args.clip_only)
    source = read_weights(args.input).describe() if fmt != "mlvp-backbone/1" else f"{args.input}: {fmt}"
    save_backbone(model, args.output, converted_from=str(Path(args.input).resolve()), source_format=fmt)
    print(f"read {source}")
    print(f"wrote {args.output}: backbone {args.backbone} on {args.clip_model} (mlvp-backbone/1)")
    return 0
