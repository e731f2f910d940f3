"""Live progress in the Ray dashboard, read through its REST API while a real submission of the micro grid runs:

- each running trial is a RUNNING task named `trial <its cell>` (the MLflow run name) on the submission's
  `TrialsRunning` actor (orchestrator/run/tune.py), also after Tune reused a trial actor for another cell, and
  FINISHED once the trial is;
- each render batch is a Ray Data dataset named by its render sets, `render synthetic fog 1,5; ...`
  (orchestrator/stages/render.py `dataset_name`);
- the Ray job carries the grid's name, the submission's id (the one its ledger entries carry) and its results folder
  as metadata (orchestrator/run/ray_env.py `job_metadata`).

Then, in headless chromium (where installed), the job's page as a person sees it (Ray Data overview, task table of
the running tasks), checked for those names and photographed; with MLVP_SCREENSHOTS=DIR the picture is also saved as
DIR/ray_dashboard.png (docs/results.md's is made with MLVP_SCREENSHOTS=docs/screenshots)."""
import asyncio
import base64
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

from conftest import free_port, private_cache, write_micro_grid
from orchestrator.config.grid import load_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.mlflow_store import run_name
from test_report_browser import CHROMIUM, FLAGS, DevTools, keep_screenshot

pytestmark = pytest.mark.browser

DATA_ROW = "//*[starts-with(normalize-space(text()), 'render synthetic')]"   # the first dataset's name


def _get(url: str, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        return json.load(r)


def _render_cells(names: set[str]) -> set[tuple[str, str, int]]:
    """(dataset, perturbation, severity) named by Ray Data datasets called "render synthetic fog 1,5; ..." (Ray adds
    "_<id>_<n>" to a dataset's name)."""
    cells = set()
    for name in names:
        m = re.fullmatch(r"render (.*)_\w+_\d+", name)
        for part in (m.group(1).split("; ") if m else []):
            dataset, perturbation, severities = part.split(" ")
            cells |= {(dataset, perturbation, int(s)) for s in severities.split(",")}
    return cells


def test_dashboard_names_running_trials_render_sets_and_the_job(tmp_path, shared_cache):
    grid = write_micro_grid(tmp_path / "dash.yaml", name="dash", backbones="[clip4clip]", methods="[source, tent]",
                            perturbations="[gaussian_noise, fog]", severities="[1, 5]")
    # renders of its own (the session's data and checkpoints shared): the render stage runs, so its datasets show
    cache = private_cache(tmp_path / "cache", shared_cache)
    results, release = tmp_path / "results", tmp_path / "release-the-trials"
    paths = Paths.make(results, cache)
    plan = build_plan(load_grid(grid), paths)
    expected = {run_name(t.to_dict()) for t in plan.trials}
    wanted_renders = {("synthetic", p, s) for p in ("gaussian_noise", "fog") for s in (1, 5)}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(grid), "--results-dir", str(results),
                             "--cache-dir", str(cache), "--num-cpus", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # each trial waits (at most 25 s) until this test has seen three cells running: two trial
                            # actors at a time on 2 CPUs, so the third ran on an actor Tune reused; the dashboard
                            # answers in seconds, a micro trial on a warm cache takes one
                            # (conftest.py's PYTHONPATH: this checkout, then tests/ for the trial hook)
                            env={**os.environ, "MLVP_TEST_TRIAL_HOLD_S": "25",
                                 "MLVP_TEST_TRIAL_RELEASE": str(release)})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    running: set[str] = set()       # cells seen as a RUNNING "trial <cell>" task
    finished: set[str] = set()      # ... and as a FINISHED one
    trial_actors: set[str] = set()  # the Tune trial actors that ran a trial (their `train` tasks)
    datasets: set[str] = set()
    job = None
    page_text = None
    shot = tmp_path / "ray_dashboard.png"
    try:
        url = None
        deadline = time.time() + 700
        while url is None and proc.poll() is None and time.time() < deadline:
            m = next((re.search(r"Ray dashboard: (http://\S+)", line) for line in list(lines)
                      if "Ray dashboard:" in line), None)
            url = m.group(1) if m else None
            time.sleep(0.2)
        assert url, "the submission printed no dashboard URL:\n" + "".join(lines)[-3000:]
        # the printed line says how to get the token (Ray >= 2.59 protects the dashboard's API with it)
        assert any("ray get-auth-token" in line for line in lines)
        token_file = Path("~/.ray/auth_token").expanduser()
        while proc.poll() is None and time.time() < deadline:
            token = token_file.read_text().strip() if token_file.exists() else None
            try:
                job = job or next((j for j in _get(f"{url}/api/jobs/", token)
                                   if (j.get("metadata") or {}).get("mlvp_grid") == "dash"), None)
                tasks = _get(f"{url}/api/v0/tasks?detail=1&limit=10000", token)["data"]["result"]["result"]
                if job:
                    found = _get(f"{url}/api/data/datasets/{job['job_id']}", token).get("datasets") or []
                    datasets |= {d["dataset"] for d in found}
            except OSError:  # the dashboard is still starting, or stopping at the end
                time.sleep(0.5)
                continue
            for t in tasks:
                name, state = t.get("name") or "", t.get("state")
                if t.get("func_or_class_name") == "TrialsRunning.running" and name.startswith("trial "):
                    (running if state == "RUNNING" else finished if state == "FINISHED" else set()).add(name[6:])
                elif (t.get("func_or_class_name") or "").endswith(".train") and t.get("actor_id"):
                    trial_actors.add(t["actor_id"])
            if len(running) >= 3 and _render_cells(datasets) >= wanted_renders and not release.exists():
                if CHROMIUM and page_text is None:
                    page_text = asyncio.run(_job_page(url, token, job["job_id"], shot))
                release.touch()
            time.sleep(0.5)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    reader.join(timeout=10)
    assert proc.returncode == 0, "".join(lines)[-3000:]
    # the dashboard named every running trial by a cell of this grid, and named the current one after an actor was
    # reused: more cells ran than trial actors did (each actor's repr, fixed at creation, would name only its first)
    assert len(running) >= 3 and running <= expected, (running, expected)
    assert len(trial_actors) < len(running), (trial_actors, running)
    assert finished and finished <= expected, finished   # a trial's task ends with the trial
    # the render datasets by their render sets: every (perturbation, severity) the grid renders
    assert _render_cells(datasets) >= wanted_renders, datasets
    # the job: the grid, the submission (its ledger entries carry the same id), the results folder
    meta = job["metadata"]
    entries = TrialLedger(paths.ledger).entries([t.key for t in plan.trials])
    assert meta["mlvp_grid"] == "dash" and meta["mlvp_results"] == str(paths.results), meta
    assert {e.get("submission") for e in entries} == {meta["mlvp_submission"]}, (meta, entries[:1])
    if CHROMIUM:
        # what a person sees on the job's page: the datasets by render set, and trials by cell in the task table
        assert page_text is not None, "the trials ended before the page was read"
        assert "Ray Data Overview" in page_text and "render synthetic" in page_text, page_text[:3000]
        assert any(f"trial {cell}" in page_text for cell in expected), page_text[:3000]
        keep_screenshot(shot, "ray_dashboard.png", max_width=1400)


async def _job_page(url: str, token: str, job_id: str, shot: Path) -> str:
    """The job's page in headless chromium, signed in with the token's cookie as the dashboard's own sign-in does
    (`POST /api/authenticate` sets it), the task table opened on the RUNNING tasks; its text, and its picture in
    `shot`."""
    import aiohttp

    port = free_port()
    profile = shot.parent / "chromium-profile"
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                             "--window-size=1400,1000", "about:blank"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        page = None
        for _ in range(150):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    page = next(t for t in json.load(r) if t["type"] == "page")
                break
            except (OSError, StopIteration):
                time.sleep(0.2)
        assert page is not None, "chromium's DevTools endpoint did not come up"
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            tab = DevTools(ws)
            await tab.call("Page.enable")
            await tab.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1,
                           mobile=False)
            await tab.call("Page.navigate", url=url + "/")
            await tab.wait_text("Jobs")
            ok = await tab.js(f"fetch('/api/authenticate', {{method: 'POST', headers: {{Authorization: "
                              f"{json.dumps('Bearer ' + token)}}}}}).then(r => r.ok)")
            assert ok, "the dashboard refused its own token"
            await tab.call("Page.navigate", url="about:blank")   # the app asked for the token: load it signed in
            await tab.call("Page.navigate", url=f"{url}/#/jobs/{job_id}")
            await tab.wait_text("Ray Data Overview", "Task Table", timeout=90)
            # open the datasets (folded at first), fold the sections between them and the task table, open the task
            # table on the RUNNING tasks
            for title in ("Ray Data Overview", "Ray Core Overview", "Logs", "Task Timeline (beta)",
                          "Cluster status and autoscaler", "Task Table"):
                await _click(tab, f"//*[normalize-space(text())={json.dumps(title)}]", last=True)
                await asyncio.sleep(0.5)
            await tab.wait_text("Page Size", timeout=60)
            await _click(tab, "//label[normalize-space(text())='State']/following::input[1]")
            await asyncio.sleep(1.0)
            await _click(tab, "//li[@role='option' and normalize-space(text())='RUNNING']")
            await asyncio.sleep(1.0)
            await _click(tab, "//label[normalize-space(text())='Function or Class Name']/following::input[1]")
            await asyncio.sleep(1.0)
            await _click(tab, "//li[@role='option' and normalize-space(text())='TrialsRunning.running']")
            text = await tab.wait_text("render synthetic", "trial synthetic/", timeout=60)
            # the picture: from the first dataset's row down to the running trials' rows
            await tab.js(f"document.evaluate({json.dumps(DATA_ROW)}, document, null, 9, null).singleNodeValue"
                         ".scrollIntoView({block: 'start'}); window.scrollBy(0, -110)")
            await asyncio.sleep(1.0)
            data = await tab.call("Page.captureScreenshot", format="png")
            shot.write_bytes(base64.b64decode(data["data"]))
            return text
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def _click(tab: DevTools, xpath: str, last: bool = False) -> None:
    """A mouse click, as a person makes it, on the first (or last) element `xpath` finds."""
    box = await tab.js(f"""(() => {{ const r = document.evaluate({json.dumps(xpath)}, document, null,
        XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null); if (!r.snapshotLength) return null;
        const el = r.snapshotItem({'r.snapshotLength - 1' if last else '0'}); el.scrollIntoView({{block: 'center'}});
        const b = el.getBoundingClientRect(); return [b.x + b.width / 2, b.y + b.height / 2]; }})()""")
    assert box, f"the dashboard's page has no {xpath}"
    for kind in ("mousePressed", "mouseReleased"):
        await tab.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
