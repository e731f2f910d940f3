"""Fine-tuning stage: the checkpoints a grid does not supply, fine-tuned (or, for the zero-shot model, pretrained)
as Ray tasks, all launched at once so a cluster's GPU nodes work in parallel (an X-Pool that starts from a clip4clip
waits for that one's task). Each is cached by the content key of its config and data (workloads/backbones)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.planning.environment import checkpoint_paths, models_to_make
from orchestrator.planning.cost_model import train_pairs
from orchestrator.planning.keys import CheckpointKey
from orchestrator.planning.plan import ModelPlan, Plan
from orchestrator.planning.resources import producer_share
from orchestrator.stages.cluster import current_cluster
from workloads.datasets import create_dataset
from workloads.finetune_memory import finetune_bytes


def launch_models(plan: Plan, console: Console, cpus: int | None = None, first_cpus: int = 0) -> dict[str, Any]:
    """Fine-tune (or pretrain) the checkpoints the grid does not supply, all at once, as Ray tasks so a cluster's GPU
    nodes do the work in parallel (an X-Pool that starts from a clip4clip waits for that one's task). Returns
    checkpoint path -> ObjectRef of its task's record (only the checkpoints to make). `cpus`: per CPU fine-tune
    (default: every CPU available now); `first_cpus`, where not 0: per CPU fine-tune whose parent is not made here
    (`first_models`), which then trains on that many torch threads (orchestrator/planning/resources.py
    `first_finetune_cpus`)."""
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    models = checkpoint_paths(plan)
    refs: dict[str, Any] = {}
    most_cpus, gpus = producer_share(plan.grid.runtime, current_cluster())
    # at most what one node holds beside one trial slot (producer_share): an X-Pool fine-tune starts when its
    # clip4clip is done, possibly while Ray Tune holds a trial actor
    cpus = 1 if gpus else max(1, min(cpus or int(ray.available_resources().get("CPU", 1)), most_cpus))
    first = set(first_models(plan)) if first_cpus and not gpus else set()
    task = ray.remote(num_cpus=cpus, num_gpus=gpus)(_finetune_task)
    node_memory = int(max((n.get("Resources", {}).get("memory", 0) for n in ray.nodes() if n.get("Alive")), default=0))
    for key in models_to_make(plan):  # plan order: clip4clip before the X-Pool starting from it
        m, path = plan.models[key], plan.model_path(key)
        if str(path) in refs:
            continue
        ds = m.train_dataset
        dsp = plan.datasets[ds]
        parent = models[m.init_from.name]["path"] if m.init_from else None
        init = parent if parent else None if m.clip_only else plan.grid.models.pretrained
        what = f"pretraining the zero-shot CLIP on {ds} single frames" if m.clip_only \
            else f"fine-tuning {key.backbone} on {ds}"
        ft = m.finetune
        length = f"{ft.steps} steps" if ft.published is None else \
            f"recipe {ft.recipe}, {ft.epochs or ft.published.epochs:g} epochs"
        console.print(f"{what} ({length}{', from ' + m.init_from.backbone if m.init_from else ''}) ...")
        after = refs.get(parent) if parent else None   # a dependency: Ray starts this task when that one is done
        # on a GPU the task holds one CPU plus one per DataLoader worker assembling its batches
        # (FinetuneConfig.workers); it reserves its measured peak host memory, so Ray starts it only where that memory
        # is free (at most what the largest node offers: more would wait forever)
        memory = finetune_task_memory(plan, m, "cuda" if gpus else "cpu")
        if memory > node_memory > 0:
            console.print(f"  [yellow]the model of its peak host memory says {memory / 2**30:.1f} GiB, more than the "
                          f"largest node gives Ray ({node_memory / 2**30:.1f} GiB): it reserves that, and may run "
                          "out of memory (a smaller batch, or a node with more memory)[/]")
            memory = node_memory
        run = task.options(num_cpus=cpus + ft.workers if gpus else first_cpus if key in first else cpus,
                           memory=memory)
        refs[str(path)] = run.remote(m.finetune, ds, dsp.root, dsp.options, dsp.version, str(plan.paths.models),
                                      init, "cuda" if gpus else "cpu", after)
    return refs


def first_models(plan: Plan) -> list[CheckpointKey]:
    """The checkpoints to make whose parent (`ModelPlan.init_from`) is not made here: what can
    start at once."""
    todo = models_to_make(plan)
    return [key for key in todo if plan.models[key].init_from not in todo]


def finetune_task_memory(plan: Plan, model: ModelPlan, device: str) -> int:
    """Bytes the fine-tuning task of `model` reserves in Ray (`memory=`): its measured peak host memory on `device`
    ("cpu" or "cuda"; workloads/finetune_memory.py `finetune_bytes`) for its config, model and train split. Ray
    schedules by it, so a node runs the task only where that much memory is free; it is a reservation, not a
    limit."""
    # 0 where the train split cannot be read: the task then fails on it
    return finetune_bytes(model.finetune, device, train_pairs(plan.datasets[model.train_dataset]) or 0)


def model_line(plan: Plan, path: str, record: dict[str, Any], seconds: float) -> str:
    m = next(m for key, m in plan.models.items() if str(plan.model_path(key)) == path)
    mt = record["metrics"]
    return (f"  {m.name}/{m.train_dataset}: clean R@1 v2t {mt['v2t_R1']:.1f} / t2v {mt['t2v_R1']:.1f} "
            f"({seconds:.0f}s) -> {Path(path).name}")


def prepare_models(plan: Plan, console: Console) -> dict[str, dict[str, Any]]:
    """Fine-tune (or pretrain) the checkpoints the grid does not supply and wait for them (the `check` command);
    returns CheckpointKey.name -> {"path", "clip_only"}."""
    import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

    t0 = time.time()
    refs = launch_models(plan, console)
    for path, ref in refs.items():
        console.print(model_line(plan, path, ray.get(ref), time.time() - t0))
    return checkpoint_paths(plan)


def _finetune_task(config, dataset: str, root, options, data_version: str, cache_dir: str, init_path, device: str,
                   after=None):
    import ray
    from workloads.backbones.finetune import ensure_finetuned   # imports torch (seconds): only in the fine-tuning task

    if device == "cpu":   # as many torch threads as CPUs Ray gave the task (a worker may have run a 1-CPU task before)
        import torch

        torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    ds = create_dataset(dataset, root=root, **options)
    _, record = ensure_finetuned(config, ds.train_split(), ds.test_split(), cache_dir, data_version,
                                 init_path=init_path, log=lambda s: print(s, flush=True), device=device)
    return record


