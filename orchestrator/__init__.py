"""The MLVP orchestrator: grid -> plan -> Ray Data render cache -> Ray Tune trials -> ledger + MLflow -> tables.
`mlvp --help` (or `python -m orchestrator --help`) lists the commands; docs/architecture.md walks through the data flow.

From Python, `orchestrator.submit(grid, **options)` runs a grid as `mlvp submit` does and returns its report. In a
process where Ray is already initialised it joins that Ray and leaves it running; else it starts a local Ray and stops
it at the end (orchestrator/run/submit.py `Submission`). Importing this package loads neither Ray nor torch.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any


def submit(grid: str, **options: Any):
    """Run `grid` (a YAML file, a shipped grid's name, or a grid with results under `results_dir`) end to end and
    return its `SubmitReport` (orchestrator/run/options.py: ok, failed, tables, parent_run_id, ...). `options` are
    `SubmitOptions`' fields (results_dir="results", cache_dir, tracking_uri, address, num_cpus, dry_run, rerun,
    only_failed, force, tolerance, dashboard, ...) and `console`, a rich Console for our lines (default: stdout).

        import orchestrator
        report = orchestrator.submit("quickstart", results_dir="results")
        print(report.ok, report.failed, report.tables)
    """
    from orchestrator.config.shipped import resolve_grid
    from orchestrator.run.options import SubmitOptions

    console = options.pop("console", None)
    known = {f.name for f in fields(SubmitOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"orchestrator.submit: unknown option(s) {', '.join(unknown)}; the options are "
                        f"{', '.join(sorted(known | {'console'}))}")
    opts = SubmitOptions(**options)
    from orchestrator.run.submit import submit as submit_grid   # Ray Tune (seconds): once the options are good
    return submit_grid(resolve_grid(grid, opts.results_dir), opts, console)
