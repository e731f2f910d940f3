"""The clean check's data: for every (backbone, checkpoint source, target dataset) of a plan, the clean Source trial
in each direction (`check_cases`), the published clean rows it is compared with (workloads/paper.py, `paper_rows`),
and the comparison (`compare`: a measured R@1 more than the tolerance below a published one is a miss). Pure; the
stage that runs the trials is orchestrator/stages/check.py."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.config.scenarios.base import PRETRAINED
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.plan import Plan
from workloads import paper
from workloads.spec import CLEAN, DIRECTIONS, TrialSpec

DEFAULT_TOLERANCE = 5.0   # R@1 points a checkpoint may fall below its paper number


@dataclass
class PaperRow:
    r1: float
    r5: float | None
    r10: float | None
    where: str                     # "Table 4", "X-Pool README (checkpoint trained on MSRVTT-9k)"
    queries: int | None            # the query count of that protocol (None: unknown)
    bound: bool = False            # an upper bound implied by the text, not a printed number (never gated)
    gallery: int | None = None     # the items each query ranks under that protocol (None: as many as the queries)


@dataclass
class CheckCase:
    backbone: str                  # as the grid names it: a backbone, or a backbone variant's label
    source: str                    # dataset the checkpoint was fine-tuned on, or PRETRAINED
    dataset: str
    specs: dict[str, TrialSpec]    # direction -> the clean source trial
    results: dict[str, dict[str, Any]] = field(default_factory=dict)   # direction -> ledger entry / TrialResult
    reused: dict[str, bool] = field(default_factory=dict)
    registered: str = ""           # the registered backbone of a variant ("" = `backbone`): what papers publish for

    @property
    def checkpoint(self) -> CheckpointKey:
        return CheckpointKey(self.backbone, self.source)

    @property
    def paper_backbone(self) -> str | None:
        """The backbone the published rows are for; None for a variant with options (no paper ran that model)."""
        if self.registered and self.registered != self.backbone:
            return None
        return self.backbone

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
    n_gallery: int = 0                       # items each query ranked here

    def missed(self, tolerance: float) -> bool:
        return self.gap is not None and self.gap < -tolerance


@dataclass
class CheckReport:
    comparisons: list[Comparison]
    tolerance: float
    seconds: float = 0.0
    render: Any = None                       # orchestrator.stages.render.RenderSummary of the clean clips it rendered

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
        key = (t.backbone_label, t.source_dataset or t.dataset, t.dataset)
        if key in cases:
            continue
        specs = {d: replace(t, direction=d, perturbation=CLEAN, severity=0, method="source", options="{}",
                            render_assets="", variant="", mix="", faithful=plan.grid.faithful) for d in DIRECTIONS}
        cases[key] = CheckCase(*key, specs, registered=t.backbone)
    return list(cases.values())


def paper_rows(case: CheckCase, direction: str) -> list[PaperRow]:
    """The published clean rows for this case: HAT-VTR's (cross-dataset Source rows, zero-shot CLIP rows); in domain,
    what the CLIP4Clip and X-Pool papers publish for the backbone on the dataset in this direction (workloads/paper.py
    `IN_DOMAIN`, each with its protocol's query and gallery counts) and the v2t upper bound HAT-VTR's text implies.
    The zero-shot CLIP rows are CLIP with mean pooling: compared with clip4clip only (an identity-initialised X-Pool
    head is not that model). A backbone variant has none: no paper ran it with its options."""
    backbone = case.paper_backbone
    if backbone is None:
        return []
    if case.setting == "zero_shot":
        if backbone != "clip4clip":
            return []
        found = paper.clean_results(case.dataset, direction, "clip", "zero_shot")
    else:
        found = paper.clean_results(case.dataset, direction, backbone, case.setting, source=case.source)
        if case.setting == "in_domain":   # every published split (MSRVTT-9k and -7k): the nearest is compared
            found += [r for r in paper.IN_DOMAIN
                      if (r.backbone, r.dataset, r.direction) == (backbone, case.dataset, direction)]
    rows = []
    for r in found:
        queries, gallery = paper.protocol(r)
        where = r.table + (f" ({r.note})" if r.note else "")
        rows.append(PaperRow(r.r1, r.r5, r.r10, where, queries, gallery=gallery))
    bound = paper.IN_DOMAIN_UPPER_BOUNDS.get((case.dataset, direction, backbone)) \
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
    g = result.get("n_gallery")
    gallery = int(g) if g and g == g else n   # absent or NaN (a table row): as many as the queries
    # R@k under another protocol (other queries, another gallery) is another number: shown, never compared
    compared = [r for r in rows if not r.bound and r.queries == n and (r.gallery or r.queries) == gallery]
    # several published numbers (X-Pool's MSRVTT-9k and -7k checkpoints): the nearest is the one to compare with
    gap = min((metrics["R1"] - r.r1 for r in compared), key=abs) if compared else None
    return Comparison(case, direction, metrics, n, rows, compared, gap, n_gallery=gallery)


def miss_line(c: Comparison, tolerance: float) -> str:
    nearest = min(c.compared, key=lambda r: abs(c.metrics["R1"] - r.r1))
    return (f"{c.case.label} {c.direction}: clean R@1 {c.metrics['R1']:.1f} is {-c.gap:.1f} points below the "
            f"paper's {nearest.r1:.1f} ({nearest.where}; tolerance {tolerance:g})")


