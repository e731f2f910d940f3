"""The driver's side of every finished trial (`LiveRecorder`): the ledger first, so nothing is lost if anything after
fails, then its MLflow child run (in the background; a re-run cell's earlier runs tagged superseded by it), a console
line and the progress bar."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rich.markup import escape

from orchestrator.planning.search import config_text, config_text_width, searched_options
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import error_name, store_key
from workloads.spec import TrialSpec


class LiveRecorder:
    """The driver's side of every finished trial, in this order: the ledger (so nothing is lost if anything after
    fails), its MLflow child run, a console line and the progress bar. When the tracking store stops answering,
    logging stops for the rest of the submission (one message); the ledger keeps everything and the next submit or
    `sync` brings the store up to date. `parent`: the parent run's id, or a callable that gives it on the tracker's
    thread (`submit` starts the parent run there). `columns`: the console lines' columns (`TrialColumns.for_plan`:
    sized from the plan, named seeds and searched configurations)."""

    def __init__(self, ledger: TrialLedger, tracker, parent: str | Callable[[], str], grid_name: str, submission: str,
                 progress, task, columns: TrialColumns | None = None):
        self.ledger, self.tracker, self.parent = ledger, tracker, parent
        self.columns = columns or TrialColumns()
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
            self.tracker.log_trial_later(self.parent, self.grid_name, entry, self._logged(entry), self.untracked)
        ok = result["status"] == "ok"
        self.counts["ok" if ok else "failed"] += 1
        self.progress.console.print(self.columns.line(result))
        self.progress.update(self.task, advance=1, failed=self.counts["failed"])

    def _logged(self, entry: dict[str, Any]) -> Callable[[str], None]:
        """What follows the MLflow run of `entry` (on the tracker's thread): the run noted in the ledger (from the
        entry as written: not re-read), and where the cell ran before (an earlier attempt in the ledger, or an
        entry set aside as damaged), its earlier runs tagged superseded by this one (`Tracker.supersede`: one
        current run per cell). A first attempt, most of them, costs no search."""
        key = entry["key"]
        earlier = len(entry.get("attempts") or ()) > 1 or bool(entry.get("previous_mlflow_runs")) \
            or self.ledger.was_damaged(key)

        def logged(rid: str) -> None:
            self.ledger.record_run(key, self.store, rid, entry)
            if earlier:
                self.tracker.supersede(self.grid_name, key, rid)
        return logged

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


@dataclass(frozen=True)
class TrialColumns:
    """The widths of one submission's per-trial console lines (`line`), fixed before the first line from every trial
    the plan holds, so each column starts at the same character on every line of the submission, in a terminal and
    in a log file alike. A line reads: where the trial ran, backbone, method, direction, cell, its seed (only when
    the plan runs several seeds, so the seeds of one configuration read apart), its result or `failed`, then the
    searched configuration's values (only in a grid with a search) and a failed trial's error. The configuration
    comes after the result because it is the widest text (`lr=3.21e-05 temperature=0.00353 steps=1`): before it, it
    would push every line's R@1 past a 100-column terminal's edge. The defaults (0) leave every column at its text's
    own width (trials the recorder was not told of)."""
    where: int = 0
    backbone: int = 0
    method: int = 0
    cell: int = 0
    seed: int = 0      # the width of "seed 12"; 0: a single-seed plan, whose lines name no seed
    config: int = 0    # the widest searched configuration's values; 0: a grid without a search
    searched: Mapping[str, tuple[str, ...]] = field(default_factory=dict)   # method -> the options its search varies

    @classmethod
    def for_plan(cls, plan) -> "TrialColumns":
        """The columns of a submission of `plan`: its trials' names, its seeds and its search's configurations,
        those TPE proposes while the grid runs included (orchestrator/planning/search.py `config_text_width`)."""
        trials = plan.trials
        searched = searched_options(plan.grid)
        return cls(where=max((len(_where(t)) for t in trials), default=0),
                   backbone=max((len(t.backbone_label) for t in trials), default=0),
                   method=max((len(t.method_label) for t in trials), default=0),
                   cell=max((len(t.cell) for t in trials), default=0),
                   seed=len(f"seed {max(plan.seeds)}") if len(plan.seeds) > 1 else 0,
                   config=max((config_text_width(plan.grid, entry) for entry in searched), default=0),
                   searched=searched)

    def line(self, result: dict[str, Any]) -> str:
        """A finished trial's console line (rich markup). A failed trial reads `failed` and the first line of its
        error where a finished one reads its R@1, as `mlvp status` writes it; a metric the trial did not report
        reads `missing`, as in the tables (orchestrator/config/tables.py), never a number."""
        spec = TrialSpec.from_dict(result["spec"])
        names = [_where(spec).ljust(self.where), spec.backbone_label.ljust(self.backbone),
                 spec.method_label.ljust(self.method), spec.direction, spec.cell.ljust(self.cell)]
        if self.seed:
            names.append(f"seed {spec.seed}".ljust(self.seed))
        config = config_text(spec, self.searched)
        failed = result["status"] != "ok"
        if failed:
            lines = str(result.get("error") or "no error recorded").splitlines()
            state, error = "failed", lines[0] if lines else ""
        else:
            state, error = result_text(result), ""
        line = escape("  " + " ".join(names) + "  ") + ("[red]failed[/]" if failed else state)
        if self.config and (config or error):   # a searched grid: its configuration column at one offset
            config = config.ljust(self.config) if config and error else config
            tail = " " * (RESULT_WIDTH - len(state)) + "  " + "  ".join(text for text in (config, error) if text)
        else:
            tail = "".join(f" {text}" for text in (config, error) if text)
        return line + escape(tail)


def result_text(result: dict[str, Any]) -> str:
    """A finished trial's R@1, hubness skewness and time; a metric it did not report reads `missing`."""
    metrics = result.get("metrics") or {}
    r1, skew = metrics.get("R1"), metrics.get("hub_skewness")
    return (f"R@1 {_number(r1, '5.1f')}  skew {_number(skew, '5.2f')}  "
            f"({(result.get('timings') or {}).get('total_s', 0):.1f}s)")


def _number(value, spec: str) -> str:
    return "missing" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


# the result column's width where a configuration column follows it: R@1 up to 100, a skewness of 5 characters
# (-9.99 to 99.99) and a trial of up to 9999.9 s; a wider result pushes its own line's configuration along
RESULT_WIDTH = len(result_text({"metrics": {"R1": 100.0, "hub_skewness": 99.99}, "timings": {"total_s": 9999.9}}))


def _where(spec: TrialSpec) -> str:
    return spec.dataset if spec.source_dataset in ("", spec.dataset) else f"{spec.source_dataset}->{spec.dataset}"


def trial_line(result: dict[str, Any], columns: TrialColumns | None = None) -> str:
    """A finished trial's console line (rich markup), in `columns` (TrialColumns: a submission's, from its plan;
    without them each column is as wide as its text)."""
    return (columns or TrialColumns()).line(result)
