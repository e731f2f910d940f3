"""What a trial's worker needs to find things (`TrialEnvironment`: caches, checkpoints, datasets, device), and the
checkpoints a plan uses: where each is, and which ones must still be made. Small and JSON-able: it travels to every
worker with the trainable."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.plan import Plan
from workloads.spec import TrialSpec


@dataclass
class TrialEnvironment:
    """What a worker needs to find things, keyed by dataset and checkpoint; JSON-able, small."""

    render_cache: str
    gallery_cache: str
    scores_dir: str | None
    # CheckpointKey.name ("backbone|source") -> {"path": file, "clip_only": bool}: read through `checkpoint`
    checkpoints: dict[str, dict[str, Any]]
    datasets: dict[str, dict[str, Any]]         # dataset -> {"root": ..., "options": {...}}
    use_gpu: bool
    threads: int
    hook: str | None = None                     # "module:function" called before each trial (docs/testing.md)

    def checkpoint(self, spec: TrialSpec) -> dict[str, Any]:
        """{"path", "clip_only"} of the checkpoint the trial runs with."""
        return self.checkpoints[CheckpointKey.of(spec).name]

    def context_for(self, spec: TrialSpec):
        from workloads.trial import TrialContext   # imports torch (seconds): only where trials run

        ds = self.datasets[spec.dataset]
        source = self.datasets.get(spec.source_dataset) if spec.source_dataset not in ("", spec.dataset) else None
        model = self.checkpoint(spec)
        return TrialContext(render_cache=self.render_cache, gallery_cache=self.gallery_cache,
                            checkpoint=model["path"], clip_only=model["clip_only"], dataset_root=ds["root"],
                            dataset_options=ds["options"], scores_dir=self.scores_dir,
                            source_root=source["root"] if source else None,
                            source_options=source["options"] if source else {},
                            device="cuda" if self.use_gpu else "cpu", threads=self.threads)


def trial_environment(plan: Plan, checkpoints: dict[str, dict[str, Any]], hook: str | None = None):
    """The environment the grid's trials run in (render and gallery caches, checkpoints, datasets)."""
    rt = plan.grid.runtime
    return TrialEnvironment(render_cache=str(plan.paths.render), gallery_cache=str(plan.paths.gallery),
                            scores_dir=str(plan.paths.scores(plan.grid.name)) if rt.save_scores else None,
                            checkpoints=checkpoints,
                            datasets={n: {"root": d.root, "options": d.options} for n, d in plan.datasets.items()},
                            use_gpu=rt.gpus_per_trial > 0, threads=max(1, int(rt.cpus_per_trial)), hook=hook)


def checkpoint_paths(plan: Plan) -> dict[str, dict[str, Any]]:
    """CheckpointKey.name -> {"path", "clip_only"} of every checkpoint the plan uses (made or not yet)."""
    return {key.name: {"path": str(plan.model_path(key)), "clip_only": m.clip_only} for key, m in plan.models.items()}


def models_to_make(plan: Plan) -> list[CheckpointKey]:
    """Each checkpoint the grid neither supplies nor has in its cache, in plan order."""
    return [key for key, m in plan.models.items() if not m.given_path and not plan.model_path(key).is_file()]


