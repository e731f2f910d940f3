"""What a trial waits for before Ray Tune gets it, named as the `ReadyGate` (orchestrator/run/gate.py) knows them
(orchestrator/planning/keys.py): its checkpoint's clean check (`CheckpointKey.need`), its render sets
(`RenderSet.need`) and, for a perturbed t2v cell, the text sets (`TEXT_SETS`). The producers declare each name ready
as it is made."""
from __future__ import annotations

from orchestrator.planning.keys import TEXT_SETS, CheckpointKey
from orchestrator.planning.plan import Plan
from orchestrator.planning.render_sets import trial_render_sets
from workloads.spec import CLEAN, TrialSpec


def trial_needs(plan: Plan, spec: TrialSpec) -> list[str]:
    """What a trial waits for (ReadyGate needs): its checkpoint's check (checkpoint made, galleries encoded, gate
    passed), its render sets, and for a perturbed t2v cell the text sets."""

    needs = [CheckpointKey.of(spec).need]
    needs += [rs.need for rs in trial_render_sets(spec) if rs.dataset in plan.renders]
    if spec.direction == "t2v" and (spec.mix or spec.perturbation != CLEAN):
        needs.append(TEXT_SETS)
    return needs
