"""What a person sees, checked in a real browser (Debian's chromium, headless): the report's index.html, and the MLflow
UI of a real `mlflow server` over a submitted grid's store — the experiment's runs table and the compare view of two
child runs. The MLflow UI is a JavaScript app: the compare view is read with `--dump-dom --virtual-time-budget`; the
runs table nests child runs under their parent, collapsed, so it is opened through the DevTools protocol with the
parent expanded and the metric columns shown (the UI's own saved view state), then read and photographed (the
compare view's picture is taken in that session too, with the UI's assistant panel closed).

Screenshots go to the test's folder; with MLVP_SCREENSHOTS=DIR also to DIR (the README's are made with
MLVP_SCREENSHOTS=benchmarks)."""
import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import free_port, start_mlflow_server, stop_mlflow_server

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs Debian's "
                                    "chromium with apt; install it to run the browser checks)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", "--disable-extensions"]


def chromium(*args: str, timeout: float = 120) -> str:
    proc = subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def visible_text(dom: str) -> str:
    dom = re.sub(r"<script.*?</script>|<style.*?</style>", " ", dom, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", dom).split())


def keep_screenshot(path: Path, name: str, max_width: int = 1100) -> None:
    """Check a screenshot is a real picture (not blank), and save a small copy where MLVP_SCREENSHOTS asks."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    lo, hi = img.convert("L").getextrema()
    assert img.width > 300 and img.height > 300 and hi - lo > 100, f"{path} looks blank"
    target = os.environ.get("MLVP_SCREENSHOTS")
    if target:
        if img.width > max_width:
            img = img.resize((max_width, round(img.height * max_width / img.width)), Image.LANCZOS)
        Path(target).mkdir(parents=True, exist_ok=True)
        img.quantize(colors=128).save(Path(target) / name, optimize=True)


@needs_chromium
def test_report_page_renders(tiny_results, tmp_path):
    index = tiny_results.results / "tiny" / "report" / "index.html"
    text = visible_text(chromium("--virtual-time-budget=5000", "--dump-dom", index.as_uri()))
    assert "tiny: results" in text and "10 cells: 10 done, 0 failed, 0 never run" in text
    assert "R@1 (%): synthetic, v2t, mean over severity 1/5" in text and "Hubness at k=10" in text
    # the table as laid out: level group over the types, then Avg and Clean; Source's row before Tent's; each
    # number with its 95% interval (one seed: a bootstrap over queries)
    assert re.search(r"backbone method low gaussian_noise fog Avg Clean clip4clip source (?:[\d.]+ ±[\d.]+ ){4}"
                     r"clip4clip tent", text), text[:2000]
    shot = tmp_path / "report.png"
    chromium("--window-size=1200,1500", f"--screenshot={shot}", index.as_uri())
    keep_screenshot(shot, "report_page.png")


@pytest.fixture
def mlflow_ui(tiny_results):
    """A real `mlflow server` on 127.0.0.1 over the tiny grid's sqlite store."""
    port = free_port()
    log = tiny_results.root / f"mlflow-ui-{port}.log"
    proc = start_mlflow_server(tiny_results.report.tracking_uri, log, port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_mlflow_server(proc)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


class DevTools:
    """A page of a headless chromium driven through the DevTools protocol (aiohttp's websocket client)."""

    def __init__(self, ws):
        self.ws, self.n = ws, 0

    async def call(self, method: str, **params):
        self.n += 1
        await self.ws.send_json({"id": self.n, "method": method, "params": params})
        async for msg in self.ws:
            data = json.loads(msg.data)
            if data.get("id") == self.n:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data["result"]
        raise RuntimeError("devtools connection closed")

    async def js(self, expression: str):
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return r["result"].get("value")

    async def wait_text(self, *needles: str, timeout: float = 60) -> str:
        deadline = time.time() + timeout
        text = ""
        while time.time() < deadline:
            text = await self.js("document.body ? document.body.innerText : ''") or ""
            if all(n in text for n in needles):
                return text
            await asyncio.sleep(0.5)
        raise AssertionError(f"page never showed {needles}; it shows: {text[:1500]}")


async def _runs_table(url: str, experiment_id: str, parent_id: str, names: list[str], shot: Path, profile: Path,
                     compare: str, compare_shot: Path):
    import base64

    import aiohttp

    port = free_port()
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                             "--window-size=1500,820", "about:blank"], stdout=subprocess.DEVNULL,
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
            await tab.call("Page.navigate", url=url + "/")
            await tab.wait_text("MLflow")
            # the runs table's saved view (what the UI keeps in localStorage): the parent expanded, metric columns
            state = {"searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False,
                     "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [],
                     "modelVersionFilter": "All Runs",
                     "selectedColumns": ["metrics.`R1`", "metrics.`hub_skewness`", "tags.`method`",
                                         "tags.`perturbation`", "tags.`severity`", "tags.`level`"],
                     "columnOrder": [], "columnWidths": {"attributes.`Run Name`": 330}, "runsPinned": [],
                     "runsHidden": [],
                     "runsVisibilityMap": {}, "runsHiddenMode": "SHOW_ALL", "viewMaximized": False,
                     "runListHidden": False, "isAccordionReordered": False, "useGroupedValuesInCharts": True,
                     "hideEmptyCharts": True, "groupBy": None, "groupsExpanded": {}, "autoRefreshEnabled": False,
                     "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
                     "runsExpanded": {parent_id: True}}
            key = f'MLflowLocalStorage-1.1-ExperimentPage-["{experiment_id}"]-ReactComponentState'
            await tab.js(f"localStorage.setItem({json.dumps(key)}, {json.dumps(json.dumps(state))});"
                         "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
                         "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');")
            await tab.call("Page.navigate", url=f"{url}/#/experiments/{experiment_id}/runs")
            await tab.wait_text(*names, "R1")
            # the assistant side panel opens by itself on a first visit: close it for the picture
            await tab.js("document.querySelectorAll('[data-component-id=\"mlflow.assistant.chat_panel.close\"]')"
                         ".forEach(b => b.click())")
            await asyncio.sleep(1.0)
            # the grid's rows as the UI lays them out (ag-grid splits a row into pinned and scrolled parts)
            rows = await tab.js("""(() => { const rows = {};
                document.querySelectorAll('.ag-row').forEach(r => { const i = r.getAttribute('row-index');
                  r.querySelectorAll('[role=gridcell]').forEach(c => {
                    (rows[i] = rows[i] || {})[c.getAttribute('col-id')] = c.innerText.trim(); }); });
                return Object.values(rows); })()""")
            data = await tab.call("Page.captureScreenshot", format="png")
            shot.write_bytes(base64.b64decode(data["data"]))
            # the compare view's picture, in the same session (its side panel stays closed)
            await tab.call("Emulation.setDeviceMetricsOverride", width=1400, height=1500, deviceScaleFactor=1,
                           mobile=False)
            await tab.call("Page.navigate", url=compare)
            await tab.wait_text("Comparing 2 Runs", "hub_robin_hood")
            await asyncio.sleep(1.5)
            data = await tab.call("Page.captureScreenshot", format="png")
            compare_shot.write_bytes(base64.b64decode(data["data"]))
            return rows
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@needs_chromium
def test_mlflow_ui_runs_table_and_compare_view(tiny_results, mlflow_ui, tmp_path):
    client = MlflowClient(tracking_uri=mlflow_ui)
    exp = client.get_experiment_by_name("mlvp/tiny")
    parent = tiny_results.report.parent_run_id
    children = {r.info.run_name: r for r in
                client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")}
    a, b = (children[f"synthetic/v2t/clip4clip/{m}/fog-5"] for m in ("source", "tent"))

    # (1) the runs table: the submission with its ten trials under it, their R@1 in a column
    names = sorted(children)
    query = urllib.parse.urlencode({"runs": json.dumps([a.info.run_id, b.info.run_id]),
                                    "experiments": json.dumps([exp.experiment_id])})
    compare = f"{mlflow_ui}/#/compare-runs?{query}"
    rows = asyncio.run(_runs_table(mlflow_ui, exp.experiment_id, parent, names, tmp_path / "runs.png",
                                   tmp_path / "profile", compare, tmp_path / "compare.png"))
    shown = {r.get("attributes.`Run Name`", "").splitlines()[-1]: r for r in rows}   # after the colour swatch
    assert "tiny submission" in shown and set(names) <= set(shown), list(shown)
    for name, run in children.items():   # each trial's row shows its own R@1 and level tag
        assert shown[name]["metrics.`R1`"] == f"{run.data.metrics['R1']:g}", (name, shown[name])
        assert shown[name]["tags.`level`"] == run.data.tags.get("level", "-")
    keep_screenshot(tmp_path / "runs.png", "mlflow_runs.png")

    # (2) the compare view of two child runs: both names, their parameters and metrics side by side
    text = visible_text(chromium("--virtual-time-budget=30000", "--window-size=1400,1000", "--dump-dom", compare))
    assert "Comparing 2 Runs" in text, text[:1500]
    assert a.info.run_name in text and b.info.run_name in text
    assert "batch_R1" in text and "hub_robin_hood" in text and "level low low" in text
    for run in (a, b):
        assert f"{run.data.metrics['R1']:g}" in text
    keep_screenshot(tmp_path / "compare.png", "mlflow_compare.png")
