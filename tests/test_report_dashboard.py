"""Live progress in the Ray dashboard: while a submission runs, its dashboard's REST API lists the trials' workers
under the trials' cell names (orchestrator/run/tune.py titles each worker process `ray::trial <run name>`; the
dashboard's node page lists workers by that command line)."""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import write_micro_grid
from orchestrator.config.grid import load_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.record.mlflow_store import run_name

pytestmark = pytest.mark.browser


def _get(url: str, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
        return json.load(r)


def _find(obj, key: str):
    """The first value of `key` anywhere in a JSON document."""
    if isinstance(obj, dict):
        if obj.get(key):
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for v in obj:
            found = _find(v, key)
            if found:
                return found
    return None


@pytest.mark.skip(reason="known regression, open: Ray 2.60's dashboard node view does not show the title "
                  "setproctitle gives a running trial (checked 2026-11-27 with a bare actor: its title never appears "
                  "there; `ps` on the node shows it). Skipped rather than run to fail: it holds trials for minutes")
def test_running_trials_are_listed_by_cell_name(tmp_path, shared_cache):
    grid = write_micro_grid(tmp_path / "dash.yaml", name="dash", backbones="[clip4clip]", methods="[source, tent]",
                            perturbations="[gaussian_noise, fog]", severities="[1, 5]")
    results, release = tmp_path / "results", tmp_path / "release-the-trials"
    plan = build_plan(load_grid(grid), Paths.make(results, shared_cache))
    expected = {run_name(t.to_dict()) for t in plan.trials}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(grid), "--results-dir", str(results),
                             "--cache-dir", str(shared_cache), "--num-cpus", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # each trial waits, titled by its cell, until this test has seen two trials by name (at
                            # most 60 s): the dashboard answers in seconds, a micro trial on a warm cache takes one
                            # (a fixed 3 s hold let a loaded CI machine see only one)
                            # (conftest.py's PYTHONPATH: this checkout, then tests/ for the trial hook)
                            env={**os.environ, "MLVP_TEST_TRIAL_HOLD_S": "60",
                                 "MLVP_TEST_TRIAL_RELEASE": str(release)})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    seen: set[str] = set()
    try:
        url = None
        deadline = time.time() + 400
        while url is None and proc.poll() is None and time.time() < deadline:
            m = next((re.search(r"Ray dashboard: (http://\S+)", line) for line in list(lines)
                      if "Ray dashboard:" in line), None)
            url = m.group(1) if m else None
            time.sleep(0.2)
        assert url, "the submission printed no dashboard URL:\n" + "".join(lines)[-3000:]
        # the printed line says how to get the token (Ray >= 2.59 protects the dashboard's API with it)
        assert any("ray get-auth-token" in line for line in lines)
        token_file = Path("~/.ray/auth_token").expanduser()
        node_id = None
        while proc.poll() is None and time.time() < deadline:
            token = token_file.read_text().strip() if token_file.exists() else None
            try:
                node_id = node_id or _find(_get(f"{url}/api/v0/nodes", token), "node_id")
                if node_id:
                    workers = _find(_get(f"{url}/nodes/{node_id}", token), "workers") or []
                    for w in workers:
                        title = " ".join(w.get("cmdline") or []).strip()
                        if title.startswith("ray::trial "):
                            seen.add(title[len("ray::trial "):])
                    if len(seen) >= 2:
                        release.touch()
            except OSError:  # the dashboard is still starting
                pass
            time.sleep(0.25)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    reader.join(timeout=10)
    assert proc.returncode == 0, "".join(lines)[-3000:]
    # the dashboard listed running trials, each under the name of a cell of this grid
    assert seen and seen <= expected, (seen, expected)
    assert len(seen) >= 2, seen
