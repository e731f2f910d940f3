"""The driver's side of every finished trial (`LiveRecorder`): the ledger first, so nothing is lost if anything after
fails, then its MLflow child run (in the background), a console line and the progress bar."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from rich.markup import escape

from orchestrator.planning.search import config_text
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import error_name, store_key
from workloads.spec import TrialSpec


class LiveRecorder:
    """The driver's side of every finished trial, in this order: the ledger (so nothing is lost if anything after
    fails), its MLflow child run, a console line and the progress bar. When the tracking store stops answering,
    logging stops for the rest of the submission (one message); the ledger keeps everything and the next submit or
    `sync` brings the store up to date. `parent`: the parent run's id, or a callable that gives it on the tracker's
    thread (`submit` starts the parent run there). `searched`: the options each method's search varies
    (orchestrator/planning/search.py `searched_options`), named on a searched trial's console line."""

    def __init__(self, ledger: TrialLedger, tracker, parent: str | Callable[[], str], grid_name: str, submission: str,
                 progress, task, searched: Mapping[str, tuple[str, ...]] | None = None):
        self.ledger, self.tracker, self.parent = ledger, tracker, parent
        self.searched = dict(searched or {})
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
        self.progress.console.print(trial_line(result, self.searched))
        self.progress.update(self.task, advance=1, failed=self.counts["failed"])

    def untracked(self, err: Exception) -> None:
        """Tracking trouble must not lose the result: the ledger has it."""
        self.tracking = False
        self.progress.console.print(
            f"[yellow]MLflow store {self.tracker.uri} stopped answering ({error_name(err)}); results "
            f"stay in the ledger and the next submit (or `mlvp sync`) logs them[/]")

    def crash(self, spec: dict[str, Any], message: str) -> None:
        """A trial whose worker died (after Tune's retries): recorded as failed, like any other failure."""
        self.result({"key": TrialSpec.from_dict(spec).key, "spec": spec, "status": "failed",
                     "error": f"worker crashed: {message}", "metrics": {}, "timings": {}})


def trial_line(result: dict[str, Any], searched: Mapping[str, tuple[str, ...]] | None = None) -> str:
    """A finished trial's console line (rich markup): where it ran, its method, cell and R@1 or error. A searched
    configuration's method is followed by the values its search varies (`tent lr=3.2e-05 steps=3`), so the
    configurations of one cell are told apart; the grid's own configuration reads as the method alone."""
    spec = TrialSpec.from_dict(result["spec"])
    if result["status"] == "ok":
        m = result["metrics"]
        line = f"R@1 {m['R1']:5.1f}  skew {m['hub_skewness']:5.2f}  ({result['timings'].get('total_s', 0):.1f}s)"
    else:
        line = f"[red]FAILED[/] {escape(str(result['error']))}"
    where = spec.dataset if spec.source_dataset in ("", spec.dataset) else f"{spec.source_dataset}->{spec.dataset}"
    config = config_text(spec, searched or {})
    method = escape(f"{spec.method_label} {config}" if config else spec.method_label)
    return f"  {where:12s} {spec.backbone_label:9s} {method:12s} {spec.direction} {spec.cell:22s} {line}"
