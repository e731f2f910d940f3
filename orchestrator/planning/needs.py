"""What a trial waits for before Ray Tune gets it, named as the `ReadyGate` (orchestrator/run/gate.py) knows them:
its checkpoint's clean check ("check:<backbone as the grid names it>|<source>"), its render sets
("render:<dataset>/<type>/<severity>") and, for a perturbed t2v cell, the text sets ("text:all"). The producers declare
each name ready as it is made."""
from __future__ import annotations

from orchestrator.planning.plan import Plan
from orchestrator.planning.render_sets import trial_render_sets
from workloads.spec import CLEAN, TrialSpec

TEXT_SETS = "text:all"


def set_need(dataset: str, perturbation: str, severity: int) -> str:
    """The ReadyGate need (orchestrator/run/tune.py) a render set satisfies."""
    return f"render:{dataset}/{perturbation}/{int(severity)}"


def check_need(backbone: str, source: str) -> str:
    return f"check:{backbone}|{source}"


def trial_needs(plan: Plan, spec: TrialSpec) -> list[str]:
    """What a trial waits for (ReadyGate needs): its checkpoint's check (checkpoint made, galleries encoded, gate
    passed), its render sets, and for a perturbed t2v cell the text sets."""

    needs = [check_need(spec.backbone_label, spec.source_dataset or spec.dataset)]
    needs += [set_need(*rs) for rs in trial_render_sets(spec) if rs[0] in plan.renders]
    if spec.direction == "t2v" and (spec.mix or spec.perturbation != CLEAN):
        needs.append("text:all")
    return needs


