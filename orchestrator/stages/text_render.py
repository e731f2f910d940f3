"""Text render stage: the perturbed captions of every t2v cell, once per text set, through Ray Data.

A text set is a whole split's captions at one (type, severity) (workloads/text_queries.py). Sets are few and small
(one row per set, not per caption), so each row is one CPU task that perturbs the whole split and writes its JSON;
the trials only read them. Which assets a type gets and whether it can run here is decided at plan time from the
grid (`assets:`, `datasets.<name>.assets.text_precomputed`): a type that cannot run is listed with its reason by the
plan and has no cell, never a failed trial.
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.config.assets import text_assets
from orchestrator.stages.render import quiet_ray_data
from workloads.datasets import create_dataset
from workloads.text_queries import TextSetKey, render_text_set


@dataclass
class TextRenderSummary:
    rendered: int = 0
    reused: int = 0
    failed: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    nonfaithful: dict[str, float] = field(default_factory=dict)   # set label -> share of unfaithful captions
    seconds: float = 0.0

    def line(self) -> str:
        return (f"text sets: {self.rendered} rendered, {self.reused} reused, {self.failed} failed "
                f"({self.seconds:.1f}s)")


def _render_row(row: dict[str, Any]) -> dict[str, Any]:
    key = TextSetKey(**json.loads(row["key"]))
    try:
        test = create_dataset(key.dataset, root=row["root"], **json.loads(row["options"])).test_split()
        stand_in = json.loads(row["stand_in"]) if row["stand_in"] else None
        out = render_text_set(key, row["cache_root"], [p.caption for p in test.pairs],
                              [p.video_id for p in test.pairs], json.loads(row["assets"]), stand_in)
        return {**row, "status": "ok", "faithful_share": out.faithful_share, "error": ""}
    except Exception as err:  # one set failing fails its trials (they find no file), not the grid
        return {**row, "status": "failed", "faithful_share": 0.0,
                "error": f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"}


def render_text_sets(plan, checkpoints: dict[str, dict[str, Any]], console=None, progress=None) -> TextRenderSummary:
    """Render every text set the plan needs that is not cached yet (Ray must be initialised). `progress`: a live rich
    Progress to add a bar to (submit's, beside the renders and trials) instead of one of its own."""
    t0 = time.time()
    summary = TextRenderSummary()
    rows = []
    for job in plan.text_sets:
        if job.key.path(plan.paths.render).is_file():
            summary.reused += 1
            continue
        ds = plan.datasets[job.key.dataset]
        stand_in = None
        if job.stand_in is not None:
            model = plan.models[job.stand_in]
            stand_in = {"backbone": model.backbone if model.backbone != "clip" else "clip4clip",
                        "clip_model": model.clip_model,
                        "checkpoint": checkpoints[job.stand_in.name]["path"],
                        "clip_only": model.clip_only}
        rows.append({"key": json.dumps(asdict(job.key)), "root": ds.root, "options": json.dumps(ds.options),
                     "cache_root": str(plan.paths.render), "stand_in": json.dumps(stand_in) if stand_in else "",
                     "assets": json.dumps(text_assets(plan.grid, job.key.dataset, job.key.perturbation)),
                     "label": f"{job.key.dataset}/{job.key.perturbation}-{job.key.severity}"})
    if rows:
        import ray   # Ray (seconds): only where work runs on it; plan, status and report never load it

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        data = ray.data.from_items(rows, override_num_blocks=len(rows)).map(_render_row, num_cpus=1)

        own = progress is None
        # Python's output into the display only where it is the terminal (orchestrator/run/console.py)
        bar = Progress(TextColumn("perturbing captions"), BarColumn(), MofNCompleteColumn(), TextColumn("text sets"),
                       TimeElapsedColumn(), console=console, redirect_stdout=sys.stdout.isatty(),
                       redirect_stderr=sys.stderr.isatty()) if own else progress
        with quiet_ray_data(), (bar if own else contextlib.nullcontext()):
            task = bar.add_task("captions", total=len(rows)) if own else \
                bar.add_task("captions", total=len(rows), unit="text sets", failed=0, note="")
            for row in data.iter_rows():
                if row["status"] == "ok":
                    summary.rendered += 1
                    if row["faithful_share"] < 1.0:
                        summary.nonfaithful[row["label"]] = 1.0 - row["faithful_share"]
                else:
                    summary.failed += 1
                    summary.failures.append({"set": row["label"], "error": row["error"].splitlines()[0]})
                bar.advance(task)
    summary.seconds = time.time() - t0
    return summary


