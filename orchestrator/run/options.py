"""What a submission is asked to do (`SubmitOptions`) and what it reports back (`SubmitReport`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.planning.plan import Plan

TRIAL_HOOK_ENV = "MLVP_TRIAL_HOOK"   # the trial hook when SubmitOptions.trial_hook is not given


@dataclass
class SubmitOptions:
    results_dir: str = "results"
    cache_dir: str | None = None
    tracking_uri: str | None = None           # default: sqlite under results_dir
    address: str | None = None                # join a running Ray cluster
    num_cpus: int | None = None               # local Ray only
    dry_run: bool = False
    only_failed: bool = False                 # resume: rerun failed cells only
    incomplete: bool = False                  # resume: also rerun cells done with dropped (undecodable) queries
    rerun: bool = False                       # run every cell again, even successful ones
    dashboard: bool = True
    force: bool = False                       # run even when a checkpoint misses its paper number (orchestrator/check)
    tolerance: float = 5.0                    # R@1 points a clean result may fall below the paper's
    # "module:function" called with each trial's spec in its worker before the trial (docs/testing.md: the tests
    # inject faults this way); default: the MLVP_TRIAL_HOOK environment variable, else none
    trial_hook: str | None = None


@dataclass
class SubmitReport:
    plan: Plan
    to_run: int
    done_before: int
    ok: int = 0
    failed: int = 0
    tables: list[Path] = field(default_factory=list)
    parent_run_id: str | None = None
    tracking_uri: str | None = None
    render: Any = None
    check: Any = None                         # orchestrator.planning.clean_check.CheckReport
    seconds: float = 0.0
    # when things became ready (time.time()): "start", "trials_from" (the first trial handed to Tune) and
    # "render:<dataset>/<perturbation>/<severity>" per render set rendered now (orchestrator/stages/render.py)
    timeline: dict[str, float] = field(default_factory=dict)
    outputs: Any = None                       # report.outputs.Outputs: what `finish` wrote, its peak memory


