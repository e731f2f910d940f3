"""The end of a submission: the grid's tables and report from the ledger (orchestrator/report), the MLflow store
brought up to date and the parent run closed with them, and the last lines on the console."""
from __future__ import annotations

import time

from rich.console import Console

from orchestrator.config.schema import GridSpec
from orchestrator.planning.plan import Plan
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import Tracker, error_name
from orchestrator.record.sync import sync_grid
from orchestrator.report.outputs import Outputs, OutputsAhead, write_grid_outputs
from orchestrator.run.options import SubmitReport


def finish(plan: Plan, grid: GridSpec, ledger: TrialLedger, report: SubmitReport, console: Console, t_start: float,
           summary, counts: dict[str, int], status: str, submission: str, tracker=None,
           ahead: OutputsAhead | None = None) -> SubmitReport:
    """Tables from the ledger, and the MLflow parent closed with them. Without a run (nothing to do) a parent run is
    made only when the store lacks some of the grid's trials. `ahead`: the outputs' child process, started while the
    trials ran (orchestrator/report/outputs.py)."""
    paths = plan.paths
    if tracker is not None:
        tracker.flush()   # trial runs still queued on its thread (LiveRecorder): their run ids reach the ledger first
    # tables and report, in a child process for a large grid: the driver does not grow by their frames and plots
    # (orchestrator/report/outputs.py)
    disk_error = None
    try:
        outputs = write_grid_outputs(grid, plan.trials, paths.grid_dir(grid.name), paths.ledger,
                                     ahead.take() if ahead is not None else None)
    except OSError as err:   # a full (or read-only) results disk: the parent run is still closed, FAILED, and the
        disk_error = err     # error raised after it for the command's one line (orchestrator/cli/main.py)
        outputs = _ledger_counts(plan, ledger, err)
    if outputs.error and disk_error is None:   # a disk error is the command's own last line
        console.print(f"[red]tables and report not written ({outputs.error}); the ledger has every result: "
                      f"mlvp report {grid.source}[/]")
    elif outputs.report_error:
        console.print(f"[yellow]report not written ({outputs.report_error}); mlvp report "
                      f"{grid.source}[/]")
    report.tables, report.outputs = outputs.files, outputs
    n_ok = outputs.ok
    try:
        if summary is None:  # nothing ran: sync only, with a parent run only when something is logged
            tracker = Tracker(report.tracking_uri, paths.results, paths.store_templates)
            _, report.parent_run_id = sync_grid(tracker, plan, ledger, console, submission, close=False)
        if tracker is None and disk_error is not None and report.parent_run_id:
            # the store stopped taking runs (their artifacts go to the full disk) but its parent run can still be
            # closed where the store itself is elsewhere
            tracker = Tracker(report.tracking_uri, paths.results)
        if tracker is not None and report.parent_run_id:
            tracker.finish_parent(report.parent_run_id, {
                "trials_ok": n_ok, "trials_failed": outputs.failed,
                "trials_missing": len(plan.trials) - outputs.present, "trials_damaged": outputs.damaged,
                "ran_now_ok": counts["ok"], "ran_now_failed": counts["failed"],
                "render_failed": summary.failed if summary is not None else 0},
                report.tables, "FAILED" if disk_error is not None
                else status if counts["failed"] == 0 or status == "KILLED" else "FAILED")
    except Exception as err:  # the ledger and tables are safe; the next submit or `sync` updates the store
        if disk_error is not None:   # the store is on the full disk too (a sqlite file beside the ledger)
            where = " (on the full disk too)" if any(w in str(err).lower() for w in ("full", "no space")) else ""
            console.print(f"[yellow]MLflow store {report.tracking_uri}{where} not updated ({error_name(err)}: "
                          f"{_first_line(err)}): its parent run {report.parent_run_id} stays RUNNING there until "
                          f"`mlvp sync {grid.source}`, once space is freed, closes it (KILLED)[/]")
            raise disk_error from None
        console.print(f"[yellow]MLflow store {report.tracking_uri} not updated ({error_name(err)}: "
                      f"{_first_line(err)}); results are in the ledger: "
                      f"mlvp sync {grid.source} brings the store up to date[/]")
    if disk_error is not None:
        raise disk_error
    report.seconds = time.time() - t_start
    damaged = f", {outputs.damaged} damaged (resume runs them again)" if outputs.damaged else ""
    console.print(f"done in {report.seconds:.0f}s: {counts['ok']} trials ok, {counts['failed']} failed now; "
                  f"{n_ok}/{len(plan.trials)} cells of the grid done{damaged}")
    for f in report.tables:
        console.print(f"  {f}")
    return report


def _ledger_counts(plan: Plan, ledger: TrialLedger, err: OSError) -> Outputs:
    """What the ledger holds for the plan when its outputs could not be written (it reads on a full disk)."""
    try:
        c = ledger.counts(t.key for t in plan.trials)
    except OSError:
        c = {}
    ok, failed = c.get("ok", 0), c.get("failed", 0)
    return Outputs(ok=ok, failed=failed, present=ok + failed, error=f"{err.strerror or err}")


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "message", err))   # a TrackingError's message, without its type name
    return text.splitlines()[0] if text else ""


