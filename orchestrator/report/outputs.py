"""A grid's outputs besides the ledger: its tables (orchestrator/report/results.py) and its report
(orchestrator/report/page.py), both written from the ledger, and the counts the MLflow parent run is closed with.

At the end of `submit` of a large grid they are written by a child process (`write_outputs_apart`), not by the driver
(`write_grid_outputs`): at the full matrix's size the tables' frames and the report's plots (matplotlib, the per-cell
frame) grew the driver by ~127 MB at once, after a Tune loop that had stayed flat (docs/notes/2026-11-results-history.md
§15), and in a child not even a crash in a plot library can take the driver down. A small grid's are written in the
driver, where the child's start would cost more than they do. The child is a fresh interpreter (`python -m
orchestrator.report.outputs`), not a fork: the driver runs Ray's and MLflow's threads, and a forked copy of their locks
can hang; nor multiprocessing's "spawn", which re-runs the caller's main script in the child. It costs one interpreter
start and the imports (~1.5-2.3 s of CPU), once per submission, which `submit` pays while its trials run: it starts
the child at the first trial result, and the child waits for its job (`OutputsAhead`). The child, which runs no
threads, forks once more to draw the report's severity figures while it writes the tables and the rest
(orchestrator/report/page.py `severity_apart`).
The ledger stays the record either way: `mlvp report GRID` writes the same files in its own process.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.record.ledger import TrialLedger
from orchestrator.record.tracker_process import end_with_parent
from orchestrator.report.page import clear_plots, write_report
from orchestrator.report.plots import severity_apart
from orchestrator.report.results import scenario_tables, write_tables
from orchestrator.report.rows import planned_rows
from workloads.render_memory import status_bytes
from workloads.spec import TrialSpec


@dataclass
class Outputs:
    """What was written, and what the ledger held for the grid's trials."""

    files: list[Path] = field(default_factory=list)
    ok: int = 0
    failed: int = 0
    present: int = 0                  # trials of the grid with a ledger entry (ok or failed)
    damaged: int = 0                  # trials of the grid whose entry is damaged (orchestrator/record/ledger.py)
    report_error: str | None = None   # the report failed (the tables were written): its one-line cause
    error: str | None = None          # nothing was written: the one-line cause
    peak_rss_mb: float | None = None  # the writing process's peak resident memory (Linux), for the benchmarks
    writer_pid: int | None = None     # the process that wrote them
    writer_started: float | None = None   # when that process started (time.time()), where it was a child


def _peak_rss_mb() -> float | None:
    """This process's peak RSS since it started its program, where /proc has it (workloads/render_memory.py
    `status_bytes`: VmHWM, not the parent's pages a forked child starts with)."""
    try:
        return status_bytes("VmHWM") / 2**20
    except (OSError, StopIteration, ValueError):
        return None


def write_outputs(grid, specs: list[TrialSpec], grid_dir: Path, ledger_root: Path, apart: bool = False) -> Outputs:
    """The tables, then the report, in this process. A failed report leaves the tables (`report_error`). `apart`:
    the report's severity figures in a forked process (orchestrator/report/page.py `severity_apart`), for a process
    with no threads of its own (`_child`)."""

    ledger = TrialLedger(ledger_root)
    # without the per-query lists: at 4,270 trials they are ~60 MB (docs/notes/2026-11-results-history.md §15)
    entries = ledger.entries((t.key for t in specs), lists=False)
    out = Outputs(ok=sum(e["status"] == "ok" for e in entries), failed=sum(e["status"] == "failed" for e in entries),
                  present=len(entries))
    severity = None
    df = planned_rows(specs, entries, damaged=ledger.damaged_files())
    out.damaged = int((df["status"] == "damaged").sum()) if len(df) else 0
    try:   # the report's severity figures draw in a forked process while this one writes the tables
        severity = severity_apart(grid, df, clear_plots(grid_dir)) if apart else None
    except Exception as err:  # a plot must not cost the tables: `report GRID` rebuilds it
        out.report_error = f"{type(err).__name__}: {err}"
    computed = scenario_tables(grid, df)   # once: the table files and the report show the same tables
    out.files = write_tables(entries, grid_dir, grid, specs, df, computed)
    if out.report_error is None:
        try:
            out.files += write_report(grid, specs, entries, grid_dir, ledger, severity=severity, df=df,
                                      computed=computed)
        except Exception as err:
            out.report_error = f"{type(err).__name__}: {err}"
    out.peak_rss_mb, out.writer_pid = _peak_rss_mb(), os.getpid()
    return out


APART_FROM_TRIALS = 500   # grids with more trials than this get their outputs written by a child process


def write_grid_outputs(grid, specs: list[TrialSpec], grid_dir: Path, ledger_root: Path,
                       child: WriterChild | None = None) -> Outputs:
    """`submit`'s outputs: in a child process (`write_outputs_apart`) for a grid of more than APART_FROM_TRIALS
    trials, in this process below it. A child costs ~1.5 CPU-s to start (an interpreter, pandas, pyarrow,
    matplotlib), which only a large grid's frames and plots repay; at a few hundred trials they grow this process
    by a few MB beyond matplotlib's import (docs/notes/2026-11-results-history.md §15). `child`: one started ahead
    (`OutputsAhead`), used for a large grid and closed for a small one."""
    if len(specs) > APART_FROM_TRIALS:
        return write_outputs_apart(grid, specs, grid_dir, ledger_root, child)
    if child is not None:
        child.close()
    return write_outputs(grid, specs, grid_dir, ledger_root)


class WriterChild:
    """`python -m orchestrator.report.outputs`: a fresh interpreter that imports what writing the outputs needs
    (pandas, pyarrow, matplotlib), then waits for one job on its standard input (`run`) and ends; with none (its
    input closed: `close`, or the driver gone) it ends at once. Its error output goes to a file in its own folder,
    which holds the job's files too."""

    def __init__(self):
        self.started = time.time()
        self._tmp = tempfile.TemporaryDirectory(prefix="mlvp-outputs-")
        self.folder = Path(self._tmp.name)
        self._stderr = open(self.folder / "stderr.txt", "w+")
        # the child imports what this process imports, from the same places
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        # with this process's pid: it ends when this process does, kill -9 included (`_wait`)
        self.proc = subprocess.Popen([sys.executable, "-m", "orchestrator.report.outputs", str(os.getpid())], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._stderr, text=True)

    def run(self, job: Path, answer: Path) -> tuple[int, str]:
        """Hand it the job; returns its exit code and its error output once it has ended."""
        try:
            self.proc.stdin.write(f"{job}\t{answer}\n")
            self.proc.stdin.close()
        except OSError:   # it ended before the job came (killed): its exit code says so
            pass
        code = self.proc.wait()
        self._stderr.seek(0)
        return code, self._stderr.read()

    def close(self) -> None:
        """End it (without a job, if it has none) and remove its folder."""
        try:  # closed even when the child has already ended, so the pipe is not left to the collector
            self.proc.stdin.close()
        except OSError:  # a child that died leaves a broken pipe, which the close may report
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()
        self._tmp.cleanup()


class OutputsAhead:
    """A large grid's outputs child (`WriterChild`), started before the outputs are due: `submit` starts it at the
    first trial result, when the trial workers are up, so that its interpreter start and imports (~2.3 s on 2 cores)
    run beside the trials instead of after the last one (docs/notes/2026-11-29-finish.md); it then waits, holding
    its imports (~150 MB), until `take` hands it to `write_grid_outputs`. For a small grid it starts nothing."""

    def __init__(self, n_trials: int):
        self.wanted = n_trials > APART_FROM_TRIALS
        self.child: WriterChild | None = None

    def start(self) -> None:
        if self.wanted and self.child is None:
            self.child = WriterChild()

    def take(self) -> WriterChild | None:
        child, self.child = self.child, None
        return child

    def close(self) -> None:
        """End a child that was never used (a submission stopped, or failed, before its outputs)."""
        child = self.take()
        if child is not None:
            child.close()


def write_outputs_apart(grid, specs: list[TrialSpec], grid_dir: Path, ledger_root: Path,
                        child: WriterChild | None = None) -> Outputs:
    """`write_outputs` in a child process (see the module docstring; `child`: one started ahead, else a new one). An
    exception inside the child is raised here as it would be in this process; a child that dies (killed, out of
    memory) comes back as `Outputs.error`."""
    child = child or WriterChild()
    try:
        job, answer = child.folder / "job.pkl", child.folder / "answer.pkl"
        job.write_bytes(pickle.dumps((grid, specs, Path(grid_dir), Path(ledger_root))))
        code, errors = child.run(job, answer)
        if code != 0 or not answer.is_file():
            last = errors.strip().splitlines()
            return Outputs(error=f"the process writing them died (exit code {code}"
                                 f"{': ' + last[-1] if last else ''})", **_counts(specs, ledger_root))
        done, value = pickle.loads(answer.read_bytes())
    finally:
        child.close()
    if not done:
        raise value
    value.writer_started = child.started
    return value


def _counts(specs: list[TrialSpec], ledger_root: Path) -> dict[str, int]:
    """What the ledger holds for the trials, read one entry at a time (nothing kept): the parent run and the last
    line of `submit` still say how far the grid got when its tables could not be written."""

    counts = TrialLedger(ledger_root).counts(t.key for t in specs)
    return {"ok": counts["ok"], "failed": counts["failed"], "present": counts["ok"] + counts["failed"],
            "damaged": counts["damaged"]}


def _child(job: str, answer: str) -> int:
    """Run the pickled `write_outputs` call of JOB and pickle (True, Outputs) or (False, the exception) into ANSWER."""
    grid, specs, grid_dir, ledger_root = pickle.loads(Path(job).read_bytes())
    try:
        value = (True, write_outputs(grid, specs, grid_dir, ledger_root, apart=True))
    except Exception as err:
        value = (False, err)
    Path(answer).write_bytes(pickle.dumps(value))
    return 0


def _wait() -> int:
    """`python -m orchestrator.report.outputs [DRIVER_PID]` (`WriterChild`): matplotlib imported (this module imports
    the rest), then one job, "JOB<tab>ANSWER" on standard input, run by `_child`; none (the input closed): exit at
    once. With DRIVER_PID it ends as soon as that process (its parent) is gone, mid-job too (`end_with_parent`)."""
    if len(sys.argv) > 1:
        end_with_parent(int(sys.argv[1]))
    import matplotlib

    matplotlib.use("Agg")   # as orchestrator/report/plots.py draws
    import matplotlib.pyplot  # noqa: F401  (imported before the job comes: the job is what waits on this child)
    line = sys.stdin.readline().rstrip("\n")
    if not line:
        return 0
    job, answer = line.split("\t")
    return _child(job, answer)


if __name__ == "__main__":
    from orchestrator.report.outputs import _wait as wait

    sys.exit(wait())
