"""The units of work a plan holds, all of them or only what remains to run: trials, the render sets and text sets they
read, their gallery encodings and the checkpoints to make. The cost model prices either (orchestrator/planning/
cost_model.py), so `plan` says what a run of the grid would still cost, not what it cost the first time."""
from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.planning.keys import RenderSet
from orchestrator.planning.plan import ModelPlan, Plan
from orchestrator.planning.render_sets import ocr_versions, render_keys_of_set, trial_render_sets
from orchestrator.planning.versions import TextSetJob
from workloads.render_cache import RenderCache
from workloads.spec import TrialSpec


@dataclass
class Work:
    trials: list[TrialSpec] = field(default_factory=list)
    render_sets: list[RenderSet] = field(default_factory=list)
    text_sets: list[TextSetJob] = field(default_factory=list)
    gallery_encodings: list[tuple] = field(default_factory=list)
    checkpoints: list[ModelPlan] = field(default_factory=list)   # made here (fine-tuned or pretrained)


def _trained(plan: Plan, only_missing: bool) -> list[ModelPlan]:
    seen, out = set(), []
    for key, m in plan.models.items():
        if m.finetune is None or m.version in seen:
            continue
        seen.add(m.version)
        if not (only_missing and plan.model_path(key).is_file()):
            out.append(m)
    return out


def all_work(plan: Plan) -> Work:
    """Every unit of the plan, cached or not."""
    return Work(list(plan.trials), [RenderSet(d, p, s) for d, cells in plan.renders.items() for p, s in cells],
                list(plan.text_sets), plan.gallery_encodings(), _trained(plan, only_missing=False))


def remaining_work(plan: Plan, todo: list[TrialSpec]) -> Work:
    """What running `todo` still needs: those trials; the render sets they read with a clip not in the cache (a
    dataset generated on first use has none yet: nothing is generated to find out); the text sets they read not
    written yet; their gallery encodings; the checkpoints not made yet."""
    cache = RenderCache(plan.paths.render)
    read = {rs for t in todo for rs in trial_render_sets(t)}

    def rendered(rs: RenderSet) -> bool:
        ds = plan.datasets[rs.dataset]
        if ds.size is None or not ds.on_disk:
            return False
        ocr = list(ocr_versions(plan, rs.dataset).values())   # a set is rendered with its OCR entries
        return all(cache.path(k).is_file() and all(cache.ocr_path(k, v).is_file() for v in ocr)
                   for k in render_keys_of_set(plan, rs))

    sets = [RenderSet(d, p, s) for d, cells in plan.renders.items() for p, s in cells]
    needed = {(t.dataset, t.perturbation, t.severity) for t in todo if t.direction == "t2v"}
    texts = [j for j in plan.text_sets if (j.key.dataset, j.key.perturbation, j.key.severity) in needed
             and not j.key.path(plan.paths.render).is_file()]
    encodings = list(dict.fromkeys((t.backbone, t.model_version, t.dataset, t.direction, t.num_frames,
                                    t.resolution, t.precision, t.backbone_options) for t in todo))
    return Work(list(todo), [rs for rs in sets if rs in read and not rendered(rs)], texts, encodings,
                _trained(plan, only_missing=True))
