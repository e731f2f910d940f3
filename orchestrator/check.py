"""`check`: the clean retrieval of every checkpoint a grid uses, beside the paper's clean numbers, before any
perturbed trial runs.

For every (backbone, checkpoint source, target dataset) of the plan, the unadapted model ("source" method, clean
queries) is scored on the target's test split in both directions. Each of these is an ordinary trial
(`workloads.trial.run` on the clean source cell, same spec fields as the grid's trials), so:
- its gallery is encoded once into the gallery cache that the grid's trials read (same cache key: model, data,
  direction, frames, resolution, precision), and clean clips come from the render cache the trials use;
- its result goes into the trial ledger under the cell's key: a grid with clean source cells does not run them again,
  and a second `check` reads the ledger instead of encoding anything.

Each row is printed beside the published clean rows of workloads/paper.py for that setting (in-domain, cross-dataset,
zero-shot); a paper row is compared only when the split has the query count of the paper's protocol
(`paper.N_QUERIES`), since R@k on another query set is not the same number. A measured R@1 more than `tolerance`
points below a published one is a miss: `check` warns, `submit` refuses to go on unless `--force`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from rich.console import Console
from rich.markup import escape

from orchestrator.ledger import TrialLedger
from orchestrator.plan import Plan
from orchestrator.scenarios.base import PRETRAINED
from workloads import paper
from workloads.spec import CLEAN, DIRECTIONS, TrialSpec

DEFAULT_TOLERANCE = 5.0   # R@1 points a checkpoint may fall below its paper number


class CheckFailed(ValueError):
    """A checkpoint misses its paper number by more than the tolerance (submit refuses unless --force)."""


@dataclass
class PaperRow:
    r1: float
    r5: float | None
    r10: float | None
    where: str                     # "Table 4", "X-Pool README (checkpoint trained on MSRVTT-9k)"
    queries: int | None            # the query count of that protocol (None: unknown)
    bound: bool = False            # an upper bound implied by the text, not a printed number (never gated)


@dataclass
class CheckCase:
    backbone: str
    source: str                    # dataset the checkpoint was fine-tuned on, or PRETRAINED
    dataset: str
    specs: dict[str, TrialSpec]    # direction -> the clean source trial
    results: dict[str, dict[str, Any]] = field(default_factory=dict)   # direction -> ledger entry / TrialResult
    reused: dict[str, bool] = field(default_factory=dict)

    @property
    def setting(self) -> str:
        if self.source == PRETRAINED:
            return "zero_shot"
        return "in_domain" if self.source == self.dataset else "cross_dataset"

    @property
    def label(self) -> str:
        if self.source == PRETRAINED:
            return f"{self.backbone} zero-shot (CLIP weights) on {self.dataset}"
        where = "" if self.source == self.dataset else f" on {self.dataset}"
        return f"{self.backbone} fine-tuned on {self.source}{where}"


@dataclass
class Comparison:
    case: CheckCase
    direction: str
    metrics: dict[str, float] | None        # R1, R5, R10 (None: the clean trial failed)
    n_queries: int
    rows: list[PaperRow]
    compared: list[PaperRow]                 # rows whose protocol matches this split (and are not bounds)
    gap: float | None                        # measured R@1 - the nearest compared paper R@1
    error: str | None = None

    def missed(self, tolerance: float) -> bool:
        return self.gap is not None and self.gap < -tolerance


@dataclass
class CheckReport:
    comparisons: list[Comparison]
    tolerance: float
    seconds: float = 0.0
    render: Any = None                       # orchestrator.render.RenderSummary of the clean clips it rendered

    def misses(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.missed(self.tolerance)]

    def failures(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.metrics is None]


# --------------------------------------------------------------------------------------------------------------
def check_cases(plan: Plan) -> list[CheckCase]:
    """One case per (backbone, source, dataset) of the plan's trials, in plan order, with its clean source trial
    in each direction: the first trial of the case with the cell, method and options replaced."""
    cases: dict[tuple[str, str, str], CheckCase] = {}
    for t in plan.trials:
        key = (t.backbone, t.source_dataset or t.dataset, t.dataset)
        if key in cases:
            continue
        specs = {d: replace(t, direction=d, perturbation=CLEAN, severity=0, method="source", options="{}",
                            render_assets="", variant="", mix="", faithful=plan.grid.faithful) for d in DIRECTIONS}
        cases[key] = CheckCase(*key, specs)
    return list(cases.values())


def paper_rows(case: CheckCase, direction: str) -> list[PaperRow]:
    """The published clean rows for this case: HAT-VTR's (cross-dataset Source rows, zero-shot CLIP rows), X-Pool's
    README for in-domain t2v, and the in-domain v2t upper bound the paper's text implies. The zero-shot CLIP rows are
    CLIP with mean pooling: compared with clip4clip only (an identity-initialised X-Pool head is not that model)."""
    if case.setting == "zero_shot":
        if case.backbone != "clip4clip":
            return []
        found = paper.clean_results(case.dataset, direction, "clip", "zero_shot")
    else:
        found = paper.clean_results(case.dataset, direction, case.backbone, case.setting,
                                    source=case.source, include_reference=case.setting == "in_domain")
    rows = []
    for r in found:
        queries = paper.N_QUERIES.get(r.dataset)
        if r.table == "X-Pool README" and "captions: all" in r.note:
            queries = paper.XPOOL_MSVD_ALL_CAPTIONS
        where = r.table + (f" ({r.note})" if r.note else "")
        rows.append(PaperRow(r.r1, r.r5, r.r10, where, queries))
    bound = paper.IN_DOMAIN_UPPER_BOUNDS.get((case.dataset, direction, case.backbone)) \
        if case.setting == "in_domain" else None
    if bound is not None:
        rows.append(PaperRow(bound[0], None, None, bound[1], paper.N_QUERIES.get(case.dataset), bound=True))
    return rows


def compare(case: CheckCase, direction: str) -> Comparison:
    result = case.results[direction]
    rows = paper_rows(case, direction)
    n = int(result.get("n_queries") or 0)
    if result.get("status") != "ok":
        error = (result.get("error") or "failed").splitlines()[0]
        return Comparison(case, direction, None, n, rows, [], None, error)
    metrics = {k: float(result["metrics"][k]) for k in ("R1", "R5", "R10")}
    compared = [r for r in rows if not r.bound and r.queries == n]
    # several published numbers (X-Pool's MSRVTT-9k and -7k checkpoints): the nearest is the one to compare with
    gap = min((metrics["R1"] - r.r1 for r in compared), key=abs) if compared else None
    return Comparison(case, direction, metrics, n, rows, compared, gap)


# --------------------------------------------------------------------------------------------------------------
def _check_task(specs: list[dict], env: dict) -> list[dict]:
    """In a Ray worker: the clean source trials of one case, as the trials would run them."""
    from orchestrator.tune import TrialEnvironment
    from workloads.trial import run

    environment = TrialEnvironment(**env)
    out = []
    for d in specs:
        spec = TrialSpec.from_dict(d)
        out.append(run(spec, environment.context_for(spec)).to_dict())
    return out


def trial_environment(plan: Plan, checkpoints: dict[str, dict[str, Any]]):
    """The environment the grid's trials run in (render and gallery caches, checkpoints, datasets)."""
    from orchestrator.tune import TrialEnvironment

    rt = plan.grid.runtime
    return TrialEnvironment(render_cache=str(plan.paths.render), gallery_cache=str(plan.paths.gallery),
                            scores_dir=str(plan.paths.scores(plan.grid.name)) if rt.save_scores else None,
                            checkpoints=checkpoints,
                            datasets={n: {"root": d.root, "options": d.options} for n, d in plan.datasets.items()},
                            use_gpu=rt.gpus_per_trial > 0, threads=max(1, int(rt.cpus_per_trial)))


def render_clean(plan: Plan, console: Console):
    """The clean clips of every target (v2t queries, t2v galleries) into the render cache; the full render stage
    later finds them there."""
    from orchestrator import render as render_stage

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
              tolerance: float = DEFAULT_TOLERANCE, submission: str | None = None) -> CheckReport:
    """Clean R@1/5/10 of every case (reusing ledger entries), printed beside the paper. Needs Ray running and the
    checkpoints ready (`prepare_models`) unless every case is in the ledger already (`reuse_ledger`)."""
    import ray

    from dataclasses import asdict

    t0 = time.time()
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
                              f"({escape(r.where)}) not compared: {r.queries} queries in that protocol, "
                              f"{c.n_queries} here")
                continue
            gap = m["R1"] - r.r1
            verdict = "[green]ok[/]" if gap >= -report.tolerance else "[red]MISS[/]"
            console.print(f"          paper: R@1 {_fmt(r.r1)}  R@5 {_fmt(r.r5)}  R@10 {_fmt(r.r10)}  "
                          f"({escape(r.where)})  R@1 {gap:+.1f}  {verdict}")
    for c in report.misses():
        console.print(f"[yellow]warning[/]: {escape(miss_line(c, report.tolerance))}")


def miss_line(c: Comparison, tolerance: float) -> str:
    nearest = min(c.compared, key=lambda r: abs(c.metrics["R1"] - r.r1))
    return (f"{c.case.label} {c.direction}: clean R@1 {c.metrics['R1']:.1f} is {-c.gap:.1f} points below the "
            f"paper's {nearest.r1:.1f} ({nearest.where}; tolerance {tolerance:g})")


def gate(report: CheckReport, force: bool, console: Console) -> None:
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


__all__ = ["CheckFailed", "CheckReport", "DEFAULT_TOLERANCE", "check_cases", "gate", "paper_rows", "run_check"]
