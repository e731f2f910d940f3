"""What each command does (argument parsing is orchestrator/cli/main.py)."""
from __future__ import annotations

import argparse
from collections import Counter

from rich.markup import escape

from orchestrator.stages import render as render_stage
from orchestrator.config.grid import load_grid
from orchestrator.config.shipped import resolve_grid
from orchestrator.planning.clean_check import check_cases
from orchestrator.planning.environment import checkpoint_paths, models_to_make
from orchestrator.planning.paths import Paths, check_writable
from orchestrator.planning.plan import build_plan, missing_videos, plan_for_sizing
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import Tracker, check_store, default_tracking_uri
from orchestrator.record.sync import new_submission_id, select_trials
from orchestrator.report.page import write_report
from orchestrator.report.results import scenario_tables, to_markdown, write_tables
from orchestrator.run import ray_env
from orchestrator.run.console import make_console, print_plan
from orchestrator.run.finish import finish
from orchestrator.run.options import SubmitOptions, SubmitReport
from orchestrator.stages.assets import prepare_assets
from orchestrator.stages.check import reuse_ledger, run_check
from orchestrator.stages.contact import write_contact_sheet
from orchestrator.stages.finetune import prepare_models


def dispatch(args: argparse.Namespace) -> int:
    return {"submit": cmd_submit, "resume": cmd_resume, "plan": cmd_plan, "status": cmd_status,
            "report": cmd_report, "render": cmd_render, "sync": cmd_sync,
            "convert-checkpoint": cmd_convert_checkpoint, "check": cmd_check}[args.command](args)


def _options(args: argparse.Namespace, **kw) -> SubmitOptions:
    return SubmitOptions(results_dir=args.results_dir, cache_dir=args.cache_dir,
                         tracking_uri=getattr(args, "tracking_uri", None), address=getattr(args, "address", None),
                         num_cpus=getattr(args, "num_cpus", None),
                         dashboard=not getattr(args, "no_dashboard", False), **kw)


def cmd_submit(args) -> int:
    from orchestrator.run.submit import submit   # imports Ray Tune (~1.5 s): only the commands that run trials

    report = submit(args.grid, _options(args, dry_run=args.dry_run, rerun=args.rerun, force=args.force,
                                        tolerance=args.tolerance))
    if args.dry_run:
        unknown = [d for d, n in report.plan.clip_counts().items() if n is None]
        clips = f"{report.plan.render_count()} clips to render" + (
            f" (unknown for {', '.join(unknown)})" if unknown else "")
        print(f"dry run: {len(report.plan.trials)} trials ({report.to_run} to run), "
              f"{sum(len(r) for r in report.plan.renders.values())} render sets, {clips}; nothing started")
        return 0
    return 0 if report.failed == 0 else 1


def cmd_resume(args) -> int:
    grid = load_grid(args.grid)
    paths = Paths.make(args.results_dir, args.cache_dir)
    plan = build_plan(grid, paths)
    todo, status = select_trials(plan, TrialLedger(paths.ledger), args.only_failed, False, args.incomplete)
    if not todo:
        c = Counter(status.values())
        print(f"nothing to resume: {c.get('ok', 0)}/{len(plan.trials)} cells done, {c.get('failed', 0)} failed")
        return 0
    from orchestrator.run.submit import submit   # imports Ray Tune (~1.5 s): only the commands that run trials

    report = submit(args.grid, _options(args, only_failed=args.only_failed, incomplete=args.incomplete,
                                        force=args.force, tolerance=args.tolerance))
    return 0 if report.failed == 0 else 1


def cmd_plan(args) -> int:
    """Sizes a grid whether or not its data is on disk: what is not there is listed, clip counts unknown."""
    plan = plan_for_sizing(args.grid, Paths.make(args.results_dir, args.cache_dir))
    plan.notes.extend(missing_videos(plan))
    todo, status = select_trials(plan, TrialLedger(plan.paths.ledger), False, False)
    console = make_console()
    print_plan(plan, status, todo, console)
    by = Counter((t.scenario, t.dataset if t.source_dataset in ("", t.dataset) else f"{t.source_dataset}->{t.dataset}",
                  t.direction, t.backbone) for t in plan.trials)
    for (scenario, where, d, b), n in by.items():
        console.print(f"  {scenario:14s} {where:26s} {d} {b:10s} {n} trials")
    return 0


def cmd_check(args) -> int:
    """Checkpoints (fine-tuned when missing), clean clips, then the clean retrieval beside the paper."""

    grid = load_grid(args.grid)
    paths = Paths.make(args.results_dir, args.cache_dir)
    check_writable(paths.results)
    check_writable(paths.cache)
    plan = build_plan(grid, paths)
    console = make_console()
    for note in missing_videos(plan):
        console.print(f"[yellow]note[/]: {escape(note)}")
    ledger = TrialLedger(paths.ledger)
    if not models_to_make(plan) and not reuse_ledger(check_cases(plan), ledger):
        # every checkpoint made and every clean result in the ledger: compared again without starting Ray
        report = run_check(plan, checkpoint_paths(plan), ledger, console, args.tolerance)
        return 1 if report.misses() or report.failures() else 0
    ray_env.start_ray(args.address, args.num_cpus, dashboard=False)
    try:
        report = run_check(plan, prepare_models(plan, console), ledger, console, args.tolerance)
    finally:
        if args.address is None:
            ray_env.stop_ray()
    return 1 if report.misses() or report.failures() else 0


def cmd_status(args) -> int:
    grid = load_grid(args.grid)
    plan = build_plan(grid, Paths.make(args.results_dir, args.cache_dir))
    ledger = TrialLedger(plan.paths.ledger)
    console = make_console()
    entries = {t.key: ledger.get(t.key) for t in plan.trials}
    counts = Counter("missing" if e is None else e["status"] for e in entries.values())
    console.print(f"{grid.name}: {len(plan.trials)} cells: {counts.get('ok', 0)} done, {counts.get('failed', 0)} "
                  f"failed, {counts.get('missing', 0)} never run")
    failed = [(t, entries[t.key]) for t in plan.trials if entries[t.key] and entries[t.key]["status"] == "failed"]
    for t, e in failed if args.all else failed[:20]:
        first_line = ((e.get("error") or "no error recorded").splitlines() or [""])[0]
        console.print(f"  [red]failed[/] {escape(t.label)} {escape('[' + t.key[:10] + ']')}: {escape(first_line)}")
    if len(failed) > 20 and not args.all:
        console.print(f"  ... {len(failed) - 20} more (--all)")
    if counts.get("failed") or counts.get("missing"):
        console.print(f"rerun them with: python -m orchestrator resume {args.grid}")
    # done, but some queries were dropped (videos that could not be decoded): fixed videos are re-read on request
    incomplete = [(t, e) for t in plan.trials if (e := entries[t.key]) and e["status"] == "ok" and e.get("dropped")]
    if incomplete:
        console.print(f"{len(incomplete)} done cells ran with dropped queries (undecodable videos):")
        for t, e in incomplete if args.all else incomplete[:20]:
            first = e["dropped"][0]
            console.print(f"  {escape(t.label)}: {len(e['dropped'])} of {len(e['dropped']) + (e.get('n_queries') or 0)}"
                          f" queries dropped (first: {escape(str(first.get('video_id')))}: "
                          f"{escape(str(first.get('reason', '')))})")
        console.print(f"after fixing the videos, rerun those cells with: python -m orchestrator resume {args.grid} "
                      "--incomplete")
    return 0


def cmd_sync(args) -> int:
    """Bring a tracking store up to date from the ledger: every trial of the grid the store lacks is logged."""

    grid = load_grid(args.grid)
    paths = Paths.make(args.results_dir, args.cache_dir)
    plan = build_plan(grid, paths)
    report = SubmitReport(plan, 0, 0)
    check_writable(paths.results)
    report.tracking_uri = args.tracking_uri or default_tracking_uri(paths.results)
    check_store(report.tracking_uri)
    finish(plan, grid, TrialLedger(paths.ledger), report, make_console(), 0.0, None, {"ok": 0, "failed": 0},
           "FINISHED", new_submission_id())
    return 0


def cmd_report(args) -> int:
    """Tables from the ledger (results/<grid>/*.parquet), the report (results/<grid>/report/: index.html with its
    plots, report.md, report_tables.parquet; orchestrator/report/page.py), the chosen metric's tables printed, and the
    report logged to the grid's newest MLflow parent run when the store has one."""

    grid = load_grid(resolve_grid(args.grid, args.results_dir))
    plan = build_plan(grid, Paths.make(args.results_dir, args.cache_dir))
    ledger = TrialLedger(plan.paths.ledger)
    entries = ledger.entries((t.key for t in plan.trials), lists=False)
    grid_dir = plan.paths.grid_dir(grid.name)
    files = write_tables(entries, grid_dir, grid)
    import pyarrow.parquet as pq

    df = pq.read_table(files[0]).to_pandas()
    if args.metric not in df.columns:
        metrics = [c for c in df.columns if c[0].isupper() or c.startswith("hub_")]
        raise ValueError(f"unknown metric {args.metric!r}; metrics: {', '.join(metrics)}")
    report_files = write_report(grid, plan.trials, entries, grid_dir, ledger)
    console = make_console()
    console.print(f"{len(entries)}/{len(plan.trials)} cells in the ledger")
    for tables in scenario_tables(grid, df, args.metric).values():
        for t in tables:
            console.print(f"\n{t.title}\n{to_markdown(t.frame, t.digits)}")
    for f in files:
        console.print(f"wrote {f}")
    console.print(f"wrote {grid_dir / 'report' / 'index.html'} ({len(report_files)} report files)")
    if not args.no_mlflow:
        _log_report(args, grid, plan, files + report_files, console)
    return 0


def _log_report(args, grid, plan, files, console) -> None:
    """The tables and the report as artifacts of the grid's newest parent run (tables/, report/)."""

    uri = args.tracking_uri or default_tracking_uri(plan.paths.results)
    try:
        if uri.startswith("sqlite:///") and not __import__("os").path.exists(uri[len("sqlite:///"):]):
            return   # no local store yet: nothing was submitted here
        check_store(uri)
        tracker = Tracker(uri, plan.paths.results)
        parent = tracker.latest_parent(grid.name)
        if parent is None:
            return
        tracker.log_outputs(parent, files)
        console.print(f"logged the report to MLflow run {parent} ({uri}, artifacts report/ and tables/)")
    except Exception as err:  # the files are written; the store is a view
        console.print(f"[yellow]report not logged to MLflow {uri}: {type(err).__name__}: "
                      f"{str(err).splitlines()[0] if str(err) else ''}[/]")


def cmd_render(args) -> int:
    if args.contact_sheet:

        write_contact_sheet(args.contact_sheet)
        print(f"wrote {args.contact_sheet}")
        return 0
    if not args.grid:
        raise ValueError("render needs a grid file, or --contact-sheet OUT.png")

    grid = load_grid(args.grid)
    plan = build_plan(grid, Paths.make(args.results_dir, args.cache_dir))
    console = make_console()
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
    print(summary.line())
    for f in summary.failures:
        print(f"  failed {f['dataset']}/{f['video_id']} {f['perturbation']}/{f['severity']} ({f['video_path']}): "
              f"{f['error']}")
    return 0 if summary.failed == 0 else 1


def cmd_convert_checkpoint(args) -> int:
    from pathlib import Path

    from workloads.backbones import create_backbone, detect_format, save_backbone
    from workloads.backbones.convert import read_weights

    fmt = detect_format(args.input)
    model = create_backbone(args.backbone, args.clip_model, pretrained=args.input, clip_only=args.clip_only)
    source = read_weights(args.input).describe() if fmt != "mlvp-backbone/1" else f"{args.input}: {fmt}"
    save_backbone(model, args.output, converted_from=str(Path(args.input).resolve()), source_format=fmt)
    print(f"read {source}")
    print(f"wrote {args.output}: backbone {args.backbone} on {args.clip_model} (mlvp-backbone/1)")
    return 0
