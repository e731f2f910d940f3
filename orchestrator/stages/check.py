"""`check`: the clean retrieval of every checkpoint a grid uses, beside the paper's clean numbers, before any
perturbed trial runs.

For every (backbone, checkpoint source, target dataset) of the plan, the unadapted model ("source" method, clean
queries) is scored on the target's test split in both directions. Each of these is an ordinary trial
(`workloads.trial.run` on the clean source cell, same spec fields as the grid's trials), so:
- its gallery is encoded once into the gallery cache that the grid's trials read (same cache key: model, data,
  direction, frames, resolution, precision), and clean clips come from the render cache the trials use;
- its result goes into the trial ledger under the cell's key: a grid with clean source cells does not run them again,
  and a second `check` reads the ledger instead of encoding anything.

Each row is printed beside the published clean rows (orchestrator/planning/clean_check.py); a measured R@1 more than
`tolerance` points below a published one is a miss: `check` warns, `submit` refuses to go on unless `--force`.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any
from dataclasses import asdict

from rich.console import Console
from rich.markup import escape

from orchestrator.planning.clean_check import (
    DEFAULT_TOLERANCE,
    CheckCase,
    CheckReport,
    check_cases,
    compare,
    miss_line,
)
from orchestrator.planning.environment import TrialEnvironment, trial_environment
from orchestrator.planning.plan import Plan
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.recorder import TrialColumns
from orchestrator.stages import render as render_stage
from workloads.spec import CLEAN, TrialSpec


class CheckFailed(ValueError):
    """A checkpoint misses its paper number by more than the tolerance (submit refuses unless --force)."""


# --------------------------------------------------------------------------------------------------------------
def _check_task(specs: list[dict], env: dict) -> list[dict]:
    """In a Ray worker: the clean source trials of one case, as the trials would run them."""
    from workloads.trial import run   # imports torch (seconds): only where trials run

    environment = TrialEnvironment(**env)
    out = []
    for d in specs:
        spec = TrialSpec.from_dict(d)
        out.append(run(spec, environment.context_for(spec)).to_dict())
    return out


def render_clean(plan: Plan, console: Console):
    """The clean clips of every target (v2t queries, t2v galleries) into the render cache; the full render stage
    later finds them there."""

    targets = {c.dataset for c in check_cases(plan)}
    return render_stage.render(replace(plan, renders={d: [(CLEAN, 0)] for d in plan.renders if d in targets}),
                               console=console)


def reuse_ledger(cases: list[CheckCase], ledger: TrialLedger) -> list[CheckCase]:
    """Fill each case's results from the ledger's ok entries; returns the cases with a direction still to run."""
    todo = []
    for case in cases:
        for d, spec in case.specs.items():
            entry = ledger.get(spec.key)
            if entry is not None and entry.get("status") == "ok":
                case.results[d], case.reused[d] = entry, True
        if len(case.results) < len(case.specs):
            todo.append(case)
    return todo


def run_check(plan: Plan, checkpoints: dict[str, dict[str, Any]], ledger: TrialLedger, console: Console,
              tolerance: float = DEFAULT_TOLERANCE, submission: str | None = None,
              columns: TrialColumns | None = None) -> CheckReport:
    """Clean R@1/5/10 of every case (reusing ledger entries), printed beside the paper. Needs Ray running and the
    checkpoints ready (`prepare_models`) unless every case is in the ledger already (`reuse_ledger`). With
    `columns` (a submission's, orchestrator/record/recorder.py), each trial of the grid run here also gets the console
    line every other trial of the submission gets, as it is recorded (a direction the grid does not run is checked
    but is no trial of the grid: no line)."""
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    t0 = time.time()
    grid_trials = {t.key for t in plan.trials}
    cases = check_cases(plan)
    todo = reuse_ledger(cases, ledger)
    summary = None
    if todo:
        summary = render_clean(plan, console)
        if summary.rendered or summary.failed:
            console.print(f"check: clean clips: {summary.line()}")
        env = asdict(trial_environment(plan, checkpoints))
        rt = plan.grid.runtime
        task = ray.remote(num_cpus=rt.cpus_per_trial, num_gpus=rt.gpus_per_trial)(_check_task)
        refs = [task.remote([s.to_dict() for d, s in c.specs.items() if d not in c.results], env) for c in todo]
        for case, results in zip(todo, ray.get(refs)):
            for result in results:
                d = result["spec"]["direction"]
                case.results[d], case.reused[d] = result, False
                ledger.put(result, submission=submission or "check")
                if columns is not None and result["key"] in grid_trials:
                    console.print(columns.line(result))
    report = CheckReport([compare(c, d) for c in cases for d in c.specs], tolerance, time.time() - t0, summary)
    print_check(report, console)
    return report


def fold_render(check: CheckReport | None, summary) -> None:
    """Count the clean clips `check` rendered into the render stage's summary (which found them cached), so a
    submission's summary still says what it rendered and what it reused."""
    if check is None or check.render is None:
        return
    summary.rendered += check.render.rendered
    summary.reused -= check.render.rendered
    summary.seconds += check.render.seconds


def _fmt(v: float | None) -> str:
    return "  -  " if v is None else f"{v:5.1f}"


def print_check(report: CheckReport, console: Console) -> None:
    console.print(f"[bold]check[/]: clean retrieval on each test split (source model, no adaptation) beside the "
                  f"paper's clean rows; a miss is R@1 more than {report.tolerance:g} points below "
                  f"({report.seconds:.0f}s)")
    seen = None
    for c in report.comparisons:
        if c.case is not seen:
            seen = c.case
            console.print(f"  {escape(c.case.label)}")
        reused = " (ledger)" if c.case.reused.get(c.direction) else ""
        if c.metrics is None:
            console.print(f"    {c.direction}  [red]failed[/]: {escape(c.error or '')}")
            continue
        m = c.metrics
        line = (f"    {c.direction}  R@1 {_fmt(m['R1'])}  R@5 {_fmt(m['R5'])}  R@10 {_fmt(m['R10'])}  "
                f"{c.n_queries} queries{reused}")
        if not c.rows:
            console.print(line + "  paper: no clean number for this setting")
            continue
        console.print(line)
        for r in c.rows:
            if r.bound:
                over = m["R1"] > r.r1 + report.tolerance
                console.print(f"          paper: R@1 below {r.r1:.1f} ({escape(r.where)})"
                              + ("  [yellow]above it[/]" if over else ""))
                continue
            if r not in c.compared:
                console.print(f"          paper: R@1 {_fmt(r.r1)}  R@5 {_fmt(r.r5)}  R@10 {_fmt(r.r10)}  "
                              f"({escape(r.where)}) not compared: {r.queries} queries x {r.gallery or r.queries} "
                              f"in that protocol, {c.n_queries} x {c.n_gallery} here")
                continue
            gap = m["R1"] - r.r1
            verdict = "[green]ok[/]" if gap >= -report.tolerance else "[red]MISS[/]"
            console.print(f"          paper: R@1 {_fmt(r.r1)}  R@5 {_fmt(r.r5)}  R@10 {_fmt(r.r10)}  "
                          f"({escape(r.where)})  R@1 {gap:+.1f}  {verdict}")
    for c in report.misses():
        console.print(f"[yellow]warning[/]: {escape(miss_line(c, report.tolerance))}")


def refuse_misses(report: CheckReport, force: bool, console: Console) -> None:
    """Raise CheckFailed (one line) when a checkpoint misses its paper number, unless `force`."""
    misses = report.misses()
    if not misses:
        return
    if force:
        console.print(f"[yellow]--force: going on although {len(misses)} clean result(s) miss the paper[/]")
        return
    more = f" (and {len(misses) - 1} more above)" if len(misses) > 1 else ""
    raise CheckFailed(f"{miss_line(misses[0], report.tolerance)}{more}: check the checkpoint (docs/finetuning.md), "
                      "or pass --force to run the grid anyway, or --tolerance to widen the margin")


