"""A damaged ledger entry (torn, emptied, edited by hand) is found when it is read, named with its path in one line,
set aside in ledger/damaged/ and counted as damaged; no command crashes on one, `plan` moves nothing, and `resume`
runs its cell again (docs/ledger.md)."""
import os
import subprocess
import sys

import yaml

from orchestrator.record.ledger import TrialLedger, entry_problem
from orchestrator.record.sync import select_trials
from workloads.spec import TrialSpec


def _grid_file(folder, shared_cache):
    """A micro grid written as a file (the CLI reads files), its plan, and the ledger entries of a run of it."""
    from conftest import plan_unrun

    plan = plan_unrun(folder, shared_cache, "dmg")
    grid = {"name": "dmg", "models": {"clip_model": "mlvp-micro"},
            "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
            "backbones": ["clip4clip"], "methods": ["source", "tent"],
            "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise"], "severities": [1, 5]}}
    path = folder / "dmg.yaml"
    path.write_text(yaml.safe_dump(grid))
    ledger = TrialLedger(plan.paths.ledger)
    for t in plan.trials:
        ledger.put({"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": 50.0, "hub_skewness": 1.0},
                    "n_queries": 40})
    return path, plan


def test_entry_problems_are_named():
    t = TrialSpec(dataset="synthetic", direction="v2t", scenario="query_shift", perturbation="fog", severity=1,
                  method="tent", backbone="clip4clip")
    k, spec = t.key, t.to_dict()
    assert entry_problem({"key": k, "spec": spec, "status": "ok", "metrics": {"R1": 1.0}}, k) is None
    assert entry_problem({}, k) == "no key, spec, status"
    assert entry_problem([1], k) == "not a JSON object but list"
    assert "not the file's" in entry_problem({"key": "other", "spec": spec, "status": "ok"}, k)
    assert "status 'done'" in entry_problem({"key": k, "spec": spec, "status": "done"}, k)
    assert entry_problem({"key": k, "spec": {"dataset": "d"}, "status": "ok"}, k).startswith("its spec lacks")


def test_damaged_entries_are_set_aside_counted_and_rerun(tmp_path, shared_cache):
    path, plan = _grid_file(tmp_path, shared_cache)
    ledger = TrialLedger(plan.paths.ledger)
    torn, empty, good = plan.trials[:3]
    torn_file = ledger.path(torn.key)
    torn_file.write_text(torn_file.read_text()[:40])     # a file cut mid-write (by hand: ours are atomic)
    ledger.path(empty.key).write_text("{}")
    common = ["--results-dir", str(plan.paths.results), "--cache-dir", str(shared_cache)]

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "orchestrator", *args, *common], capture_output=True,
                              text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})

    # plan writes nothing: both named, both left where they are
    out = cli("plan", str(path))
    assert out.returncode == 0, out.stderr
    assert f"damaged ledger entry {torn_file}: not JSON" in out.stdout and "left where it is" in out.stdout
    assert torn_file.exists() and not (plan.paths.ledger / "damaged").exists()
    assert f"{len(plan.trials)} trials (4 done, 0 failed, 2 damaged, 0 new)" in out.stdout

    # status sets them aside, names each once with its path, counts them damaged and exits 1
    out = cli("status", str(path))
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.count("damaged ledger entry") == 2 and "moved to" in out.stdout
    assert "6 cells: 4 done, 0 failed, 2 damaged, 0 never run" in out.stdout
    moved = plan.paths.ledger / "damaged" / f"{torn.key}.json"
    assert moved.exists() and not torn_file.exists()
    assert (plan.paths.ledger / "damaged" / f"{empty.key}.why.txt").read_text().startswith("no key, spec, status")

    # every reader keeps going: report and a dry run work on the rest
    out = cli("report", str(path), "--no-mlflow")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    out = cli("submit", str(path), "--dry-run")
    assert out.returncode == 0 and "2 damaged" not in out.stderr, out.stderr

    # resume runs them again: they are cells to run, not done ones
    todo, status = select_trials(plan, TrialLedger(plan.paths.ledger), only_failed=False, rerun=False)
    assert {t.key for t in todo} == {torn.key, empty.key} and status[good.key] == "ok"
    assert status[torn.key] == status[empty.key] == "damaged"
