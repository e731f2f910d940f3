"""What `plan` and `submit --dry-run` print about a plan besides its checkpoints: render sets, gallery encodings,
clips, the paths not on disk, the cost estimate of what remains to run and the clip sizes it assumed (and, for
`plan --verbose`, every figure of the cost model with its source). Plain text lines, no markup."""
from __future__ import annotations

from collections import Counter

from orchestrator.planning.cost_model import MEASURED_OVER_BOUND, CostModel, PlanCosts, estimate, wall_time
from orchestrator.planning.plan import Plan
from orchestrator.planning.work import all_work, remaining_work
from workloads.spec import CLEAN


def sizing_lines(plan: Plan, cost: CostModel | None = None, todo: list | None = None, verbose: bool = False
                 ) -> list[str]:
    """What `plan` and `submit --dry-run` print after the checkpoints: render sets, gallery encodings, clips (unknown
    where the annotations are not on disk), the paths not on disk (one line each, with the key or variable to set)
    and the cost estimate (orchestrator/planning/cost_model.py) of what is known: of what remains to run when
    `todo` (the trials to run) is given, else of the whole grid; then the source clip size each dataset's render
    cost assumed (measured on its videos, or typical), and with `verbose` every figure of the cost model with where
    it was measured. Plain text (no markup)."""

    sizes = plan.clip_counts()
    unknown = [d for d, n in sizes.items() if n is None]
    sets = sum(len(r) for r in plan.renders.values())
    perturbed = sum(1 for r in plan.renders.values() for p, _ in r if p != CLEAN)
    by_dir = Counter(t.direction for t in plan.trials)
    lines = [f"render sets: {sets} ({perturbed} perturbed, {sets - perturbed} clean; one per dataset x "
             f"perturbation x severity)",
             f"gallery encodings: {len(plan.gallery_encodings())} (one per backbone x checkpoint x dataset x "
             f"direction, cached; " + ", ".join(f"{d} trials {n}" for d, n in sorted(by_dir.items())) + ")"]
    given = {m.version for m in plan.models.values() if m.finetune is None}
    trained = {m.version for m in plan.models.values() if m.finetune is not None}
    lines.insert(0, f"checkpoints: {len(given) + len(trained)} ({len(trained)} fine-tuned or pretrained here, "
                    f"{len(given)} given)")
    known = {d: n for d, n in sizes.items() if n is not None}
    clips = f"clips to render: {plan.render_count():,}" + (
        f" (test pairs per dataset: {', '.join(f'{d} {n}' for d, n in known.items())})" if known else "")
    if unknown:
        clips = (clips + "; " if known else "clips to render: ") + \
            f"unknown for {', '.join(unknown)} (annotations not on disk)"
    lines.append(clips)
    engines = list(dict.fromkeys(e for es in plan.ocr_engines.values() for e in es))
    if engines:
        lines.append(f"OCR entries: {', '.join(engines)} (read by the render stage on every clip of the render sets "
                     f"at its source resolution, for the OCR backbones: workloads/ocr.py)")
    if plan.missing:
        lines.append(f"not on disk ({len(plan.missing)}; `plan` sizes the grid anyway, `submit` needs them):")
        lines.extend(f"  missing {m.line()}" for m in plan.missing)
    if todo is not None and not todo:
        lines.append("nothing remains to run: every cell is in the ledger (0 GPU-hours)")
        return lines
    costs = PlanCosts(plan, cost)
    work = all_work(plan) if todo is None else remaining_work(plan, todo)
    est = estimate(costs, work)
    what = "" if todo is None else f"what remains ({len(todo)} trials): "
    if len(unknown) == len(sizes):
        lines.append("GPU-hours: unknown until the annotations are on disk (the cost model needs the clip counts: "
                     "orchestrator/planning/cost_model.py)")
    else:
        unknown_note = (f"; not counting {', '.join(unknown)} (clip counts unknown)" if unknown else "") + "".join(
            f"; not counting {u}" for u in est.unknown if u not in unknown)
        lines.append(what + est.line() + unknown_note + " (cost model: orchestrator/planning/cost_model.py)")
        lines.append("  an estimate: GPU figures measured for ViT-B/32 on one NVIDIA H200, rendering per type on a "
                     "2-core AMD EPYC dev machine (`plan --verbose` lists each figure and its source)")
        lines.append("source clips for the render cost (mean width x height, length, rate):")
        lines.extend(f"  {line}" for line in costs.clip_lines())
        unmeasured = sorted({p for r in plan.renders.values() for p, _ in r if not costs.cost.render_line(p)[1]})
        if unmeasured:
            lines.append(f"render cost of {', '.join(unmeasured)}: no measured points, priced at the mean of the "
                         "measured types' lines (`plan --verbose` lists each type's line)")
    if verbose:
        lines.append("cost model figures (orchestrator/planning/cost_model.py):")
        lines.extend(f"  {line}" for line in costs.cost.describe())
    return lines


def wall_lines(plan: Plan, todo: list | None, gpus: int, cpus: int, cost: CostModel | None = None) -> list[str]:
    """`plan --gpus N`: the wall time of the grid (or of what remains, `todo`) on N GPUs and `cpus` CPUs, in fp32 and
    in bf16, from the cost model (orchestrator/planning/cost_model.py `wall_time`); what sets it, and its sources."""
    if todo is not None and not todo:
        return [f"on {gpus} GPUs: nothing remains to run"]
    work = all_work(plan) if todo is None else remaining_work(plan, todo)
    times = {p: wall_time(PlanCosts(plan, cost, precision=p), work, gpus, cpus) for p in ("fp32", "bf16")}
    if all(w.bound_s == 0 for w in times.values()):
        return [f"on {gpus} GPUs: wall time unknown until the annotations are on disk (the cost model needs the clip "
                f"counts)"]
    what = "the grid" if todo is None else f"what remains ({len(todo)} trials)"
    lines = [f"wall time of {what} on {gpus} GPUs and {cpus} CPUs (cost model; at least the bound, expected "
             f"{MEASURED_OVER_BOUND}x it as the simulated cluster measured):"]
    for precision, w in times.items():
        lines.append(f"  {precision}: expected {_hours(w.expected_s)}, at least {_hours(w.bound_s)} (set by "
                     f"{w.limit}: GPU work {w.gpu_s / 3600:,.1f} GPU-h / {gpus}, rendering {w.render_s / 3600:,.1f} "
                     f"CPU-h / {cpus}, longest fine-tune {_hours(w.finetune_s)})")
    return lines


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.0f} min"
