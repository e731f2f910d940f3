"""A ledger entry with a wrong value is damaged like an unreadable one (orchestrator/record/ledger.py, docs/ledger.md):
an R@1 that is a string, a list or null, a method that is a number, a severity "five", and the empty `{}` entry.
Each is named with its path in one line, set aside, counted, shown as `damaged` (its own state, the file in `why`)
in the console, the Markdown tables, report.md, the HTML report and the Parquet files, and run again by `resume`,
whose new MLflow run supersedes the cell's earlier one. The schema that reads an entry is the one that writes it."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import write_micro_grid
from orchestrator.config.grid import load_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.record.ledger import ENTRY_FIELDS, TrialLedger
from orchestrator.record.sync import select_trials
from workloads.spec import TrialResult

# what a hand edit (or another program) left in an entry, and the one-line reason each is named by
DAMAGES = {
    "R1 string": (lambda e: e["metrics"].update(R1="41.0"), "metrics.R1 is a str ('41.0'), not a number"),
    "method integer": (lambda e: e["spec"].update(method=7), "spec.method is an int (7), not a string"),
    "severity five": (lambda e: e["spec"].update(severity="five"), "spec.severity is a str ('five'), not an integer"),
    "R1 list": (lambda e: e["metrics"].update(R1=[41.0, 42.0]), "metrics.R1 is a list ([41.0, 42.0]), not a number"),
    "R1 null": (lambda e: e["metrics"].update(R1=None), "metrics.R1 is null, not a number"),
    "empty": (lambda e: e.clear(), "no key, spec, status"),
}


def _grid(folder, shared_cache):
    """The 10-trial micro grid (clean + 2 types x 2 severities, Source and Tent, clip4clip) as a file, its plan,
    and a ledger holding a finished entry for each of its trials, written by hand."""
    path = write_micro_grid(folder / "dmg.yaml", name="dmg", backbones="[clip4clip]", methods="[source, tent]",
                            perturbations="[gaussian_noise, impulse_noise]", severities="[1, 5]")
    plan = build_plan(load_grid(path), Paths.make(folder / "results", shared_cache))
    ledger = TrialLedger(plan.paths.ledger)
    for i, t in enumerate(plan.trials):
        ledger.put({"key": t.key, "spec": t.to_dict(), "status": "ok", "n_queries": 40,
                    "metrics": {"R1": 40.0 + i, "R5": 70.0, "R10": 90.0, "MdR": 2.0, "MnR": 3.5,
                                "hub_skewness": 1.0}, "query_R1": [1.0, 0.0] * 20,
                    "timings": {"total_s": 1.0, "per_query_ms": 1.0, "gallery_s": 0.1}})
    return path, plan


def _damage(plan) -> dict[str, str]:
    """Each of DAMAGES applied to one trial's entry (the shifted trials: every table reads them); trial key -> the
    reason it must be named by."""
    ledger = TrialLedger(plan.paths.ledger)
    shifted = [t for t in plan.trials if t.perturbation != "clean"]
    out = {}
    for t, (edit, why) in zip(shifted, DAMAGES.values()):
        path = ledger.path(t.key)
        entry = json.loads(path.read_text())
        edit(entry)
        path.write_text(json.dumps(entry))
        out[t.key] = why
    return out


def _cli(plan, shared_cache, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args, "--results-dir", str(plan.paths.results),
                           "--cache-dir", str(shared_cache)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def test_the_schema_that_reads_an_entry_writes_it(tmp_path, shared_cache):
    path, plan = _grid(tmp_path, shared_cache)
    ledger = TrialLedger(plan.paths.ledger)
    # every field a trial returns has its check (a new field cannot go unchecked)
    assert {f.name for f in dataclasses.fields(TrialResult)} <= set(ENTRY_FIELDS)

    # numpy numbers are written as numbers (json's default=str wrote them as text: an R@1 "41.0" read back)
    t, u, v = plan.trials[:3]
    ledger.put({"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": np.float32(41.5)},
                "k_occurrence": np.arange(3), "n_queries": np.int64(40)})
    again = TrialLedger(plan.paths.ledger).get(t.key)
    assert again["metrics"]["R1"] == 41.5 and again["k_occurrence"] == [0, 1, 2] and again["n_queries"] == 40

    # a result with a value its field does not allow is recorded as a failed trial that names the value: it runs
    # again, and nothing is written that the next read would set aside
    entry = ledger.put({"key": u.key, "spec": u.to_dict(), "status": "ok", "metrics": {"R1": "high"}})
    assert entry["status"] == "failed" and "metrics.R1 is a str ('high')" in entry["error"]
    assert TrialLedger(plan.paths.ledger).get(u.key)["status"] == "failed"
    assert not (plan.paths.ledger / "damaged").exists()

    # a direct write of a bad value is refused, and the entry on disk stays as it was
    before = ledger.path(v.key).read_text()
    with pytest.raises(ValueError, match=r"not written: n_queries is a str \('many'\), not an integer"):
        ledger.update(v.key, n_queries="many")
    assert ledger.path(v.key).read_text() == before


def test_wrong_values_are_damaged_named_counted_marked_everywhere_and_rerun(tmp_path, shared_cache):
    path, plan = _grid(tmp_path, shared_cache)
    damaged = _damage(plan)
    ledger_dir = plan.paths.ledger

    # status: each named once with its path and why, set aside, counted damaged (not done), exit 1
    out = _cli(plan, shared_cache, "status", str(path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert out.stdout.count("damaged ledger entry") == len(DAMAGES)
    for key, why in damaged.items():
        line = next(ln for ln in out.stdout.splitlines() if f"{key}.json" in ln)
        assert f"damaged ledger entry {ledger_dir / key[:2] / key}.json: {why}; moved to" in line, line
        assert (ledger_dir / "damaged" / f"{key}.json").exists() and not (ledger_dir / key[:2] / f"{key}.json").exists()
    assert "dmg: 10 cells: 4 done, 0 failed, 6 damaged, 0 never run" in out.stdout
    # and again: set aside already, still counted damaged and each still named by its file, cell by cell
    out = _cli(plan, shared_cache, "status", str(path))
    assert out.returncode == 1 and "damaged ledger entry" not in out.stdout, out.stdout + out.stderr
    assert "dmg: 10 cells: 4 done, 0 failed, 6 damaged, 0 never run" in out.stdout
    for key, why in damaged.items():
        t = next(t for t in plan.trials if t.key == key)
        assert f"  damaged {t.label} [{key[:10]}]: {ledger_dir / 'damaged' / key}.json: {why}" in out.stdout
    # resume runs them again: cells to run, not done ones
    todo, status = select_trials(plan, TrialLedger(ledger_dir), only_failed=False, rerun=False)
    assert {t.key for t in todo} == set(damaged) and {status[k] for k in damaged} == {"damaged"}

    # report: no crash; `damaged` on the console, in the Markdown tables, report.md, the HTML and the Parquet files
    out = _cli(plan, shared_cache, "report", str(path), "--no-mlflow")
    assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, out.stdout[-3000:] + out.stderr[-3000:]
    assert "dmg: 10 cells: 4 done, 0 failed, 6 damaged, 0 never run" in out.stdout
    assert "| damaged |" in out.stdout
    grid_dir = plan.paths.grid_dir("dmg")
    where = {key: f"damaged ledger entry {ledger_dir / 'damaged' / key}.json: {why}" for key, why in damaged.items()}

    trials = pd.read_parquet(grid_dir / "trials.parquet").set_index("key")
    assert (trials.loc[list(damaged), "status"] == "damaged").all()
    assert trials.loc[list(damaged), "why"].to_dict() == where
    assert (trials.drop(index=list(damaged))["status"] == "ok").all() and trials.drop(index=list(damaged))[
        "why"].isna().all()

    md = (grid_dir / "qs_tables.md").read_text()
    assert "10 trials: 4 done, 0 failed, 6 damaged, 0 never run" in md and "| damaged |" in md
    assert "missing" not in md.split("## ")[1]   # a damaged cell never reads as never run

    qs = pd.read_parquet(grid_dir / "qs_R1.parquet")
    states = qs[[c for c in qs.columns if c.endswith(":state")]].stack()
    whys = qs[[c for c in qs.columns if c.endswith(":why")]].stack()
    assert "damaged" in set(states) and "missing" not in set(states)
    assert set(whys.dropna()) <= set(where.values()) and len(set(whys.dropna())) >= 2

    long = pd.read_parquet(grid_dir / "report" / "report_tables.parquet")
    dmg = long[long["state"] == "damaged"]
    assert len(dmg) and set(dmg["why"]) <= set(where.values()) and dmg["value"].isna().all()
    assert dmg["error_key"].isin(list(damaged)).all()

    report_md = (grid_dir / "report" / "report.md").read_text()
    assert "10 cells: 4 done, 0 failed, 6 damaged, 0 never run" in report_md and "| damaged |" in report_md
    section = report_md.split("## Damaged ledger entries")[1]
    for key, text in where.items():
        assert f'<a id="dmg-{key}"></a>' in section and text in section

    page = (grid_dir / "report" / "index.html").read_text()
    assert "10 cells: 4 done, 0 failed, 6 damaged, 0 never run" in page and 'id="damaged"' in page
    assert '<td class="damaged" title="damaged ledger entry ' in page
    for key, text in where.items():
        assert f'id="dmg-{key}"' in page and f'href="#dmg-{key}"' in page
        assert text.replace("'", "&#x27;") in page

    # submit's closing summary (`finish`, as a submit with nothing to run ends) counts them, and its outputs mark them
    from orchestrator.run.console import make_console
    from orchestrator.run.finish import finish
    from orchestrator.run.options import SubmitReport
    from orchestrator.record.mlflow_store import default_tracking_uri

    report = SubmitReport(plan, 0, 4)
    report.tracking_uri = default_tracking_uri(plan.paths.results)
    text = io.StringIO()
    finish(plan, plan.grid, TrialLedger(ledger_dir), report, make_console(text), 0.0, summary=None,
           counts={"ok": 0, "failed": 0}, status="FINISHED", submission="s-test")
    assert "4/10 cells of the grid done, 6 damaged (resume runs them again)" in text.getvalue(), text.getvalue()
    assert report.outputs.damaged == 6 and (pd.read_parquet(grid_dir / "trials.parquet")["status"]
                                           == "damaged").sum() == 6


@pytest.mark.slow
def test_resume_reruns_damaged_cells_and_their_earlier_mlflow_runs_are_superseded(tmp_path, shared_cache):
    from mlflow.tracking import MlflowClient

    from orchestrator.record.mlflow_store import SUPERSEDED_TAG, default_tracking_uri, store_key

    path, plan = _grid(tmp_path, shared_cache)
    uri = default_tracking_uri(plan.paths.results)
    out = _cli(plan, shared_cache, "sync", str(path))   # a run in MLflow for every hand-written entry
    assert out.returncode == 0 and "sync: 10 trial runs logged" in out.stdout, out.stdout + out.stderr
    damaged = _damage(plan)

    out = _cli(plan, shared_cache, "resume", str(path), "--num-cpus", "2", "--no-dashboard", timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("damaged ledger entry") == len(DAMAGES)
    assert "(4 done, 0 failed, 6 damaged, 0 new) -> 6 to run" in out.stdout
    assert "10/10 cells of the grid done" in out.stdout and "6 damaged (resume" not in out.stdout

    ledger = TrialLedger(plan.paths.ledger)
    assert {t.key: ledger.status(t.key) for t in plan.trials} == {t.key: "ok" for t in plan.trials}
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("mlvp/dmg")
    runs = client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'trial'", max_results=1000)
    by_key: dict[str, list] = {}
    for r in runs:
        by_key.setdefault(r.data.tags["mlvp.trial_key"], []).append(r)
    for t in plan.trials:
        current = [r for r in by_key[t.key] if SUPERSEDED_TAG not in r.data.tags]
        assert len(current) == 1 and current[0].info.status == "FINISHED", t.label
        assert ledger.get(t.key)["mlflow_runs"][store_key(uri)] == current[0].info.run_id
        old = [r for r in by_key[t.key] if SUPERSEDED_TAG in r.data.tags]
        # a re-run cell: its earlier run (the damaged entry's) is superseded by the new one; the others have one run
        assert len(old) == (1 if t.key in damaged else 0), t.label
        assert all(r.data.tags[SUPERSEDED_TAG] == current[0].info.run_id for r in old)
    # the UI's filter for one current run per cell
    shown = client.search_runs([exp.experiment_id], f"tags.`mlvp.kind` = 'trial' and tags.`{SUPERSEDED_TAG}` IS NULL",
                               max_results=1000)
    assert sorted(r.data.tags["mlvp.trial_key"] for r in shown) == sorted(t.key for t in plan.trials)

    # sync counts one current run per cell, and logs nothing again
    out = _cli(plan, shared_cache, "sync", str(path))
    assert out.returncode == 0 and "sync: 0 trial runs logged" in out.stdout, out.stdout + out.stderr
    assert "10 of the ledger's 10 were there already" in out.stdout
    assert len(client.search_runs([exp.experiment_id], "tags.`mlvp.kind` = 'trial'", max_results=1000)) == 16


def test_sync_leaves_one_current_run_per_trial(tmp_path, shared_cache):
    """A store with several current runs of a trial (logged by a version before runs were superseded, or by a driver
    killed before it marked one): `sync` keeps the one the ledger names, tags the others superseded, and neither
    counts nor matches them afterwards."""
    import io

    from orchestrator.record.mlflow_store import SUPERSEDED_TAG, Tracker, default_tracking_uri, store_key
    from orchestrator.record.sync import sync_grid
    from orchestrator.run.console import make_console

    _, plan = _grid(tmp_path, shared_cache)
    ledger = TrialLedger(plan.paths.ledger)
    tracker = Tracker(default_tracking_uri(plan.paths.results), plan.paths.results)
    text = io.StringIO()
    assert sync_grid(tracker, plan, ledger, make_console(text))[0] == 10
    parent = tracker.latest_parent("dmg")
    doubled, legacy = plan.trials[0], plan.trials[1]
    tracker.log_trial(parent, "dmg", ledger.get(doubled.key))   # the same attempt logged twice: newer than the first
    old = {k: v for k, v in ledger.get(legacy.key).items() if k != "recorded_at"}
    tracker.log_trial(parent, "dmg", old)                        # a run without the attempt tag (an older version's)
    assert sum(len(v) for v in tracker.current_trial_runs("dmg").values()) == 12

    assert sync_grid(tracker, plan, ledger, make_console(text))[0] == 0
    assert "MLflow: 2 runs of earlier attempts tagged superseded" in text.getvalue()
    current = tracker.current_trial_runs("dmg")
    assert sorted(current) == sorted(t.key for t in plan.trials) and all(len(v) == 1 for v in current.values())
    for t in plan.trials:   # the run kept is the one the ledger names
        assert current[t.key][0][1] == ledger.get(t.key)["mlflow_runs"][store_key(tracker.uri)]
    superseded = [r for r in tracker.client.search_runs([tracker.experiment("dmg")], "tags.`mlvp.kind` = 'trial'")
                  if SUPERSEDED_TAG in r.data.tags]
    assert sorted(r.data.tags["mlvp.trial_key"] for r in superseded) == sorted([doubled.key, legacy.key])
    assert sync_grid(tracker, plan, ledger, make_console(text))[0] == 0   # nothing logged, nothing more tagged
    assert text.getvalue().count("tagged superseded") == 1
