"""The report (orchestrator/report/page.py) of a tiny grid run through the real stack: tables in the paper's layout from
the ledger, missing and failed cells never shown as numbers, plots, and the MLflow parent / child runs it feeds."""
import math
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.cli.main import main
from orchestrator.record.ledger import TrialLedger

pytestmark = pytest.mark.e2e


def _png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return data


def test_report_by_name_tables_plots_and_mlflow(tiny_results):
    r = tiny_results
    common = ["--results-dir", str(r.results), "--cache-dir", str(r.cache)]
    # by the grid's name: its results exist, so the grid is found beside them
    assert main(["report", "tiny", *common]) == 0
    out = r.results / "tiny" / "report"
    page = (out / "index.html").read_text()
    # self-contained: every image inline, nothing fetched from a network
    assert page.count('src="data:image/png;base64,') >= 5 and "http://" not in page and "https://" not in page
    for name in ("r1_severity_synthetic_v2t_clip4clip", "k_occurrence", "similarity", "stream_r1", "tta_cost"):
        _png(out / "plots" / f"{name}.png")

    cells = pq.read_table(out / "report_tables.parquet").to_pandas()
    assert set(cells["state"]) == {"ok"}
    # the paper's layout: level groups (registry metadata), Source first, Avg and Clean columns
    main_r1 = cells[cells.table == "qs_R1_mean"]
    assert list(dict.fromkeys(main_r1.column)) == ["gaussian_noise", "fog", "Avg", "Clean"]
    assert set(main_r1[main_r1.column.isin(["gaussian_noise", "fog"])].group) == {"low"}
    assert list(dict.fromkeys(main_r1.method)) == ["source", "tent"]
    # each number is the ledger's: a per-severity cell is that trial's R@1, the main cell the mean over severities
    by_cell = {(e["spec"]["method"], e["spec"]["perturbation"], e["spec"]["severity"]): e["metrics"]
               for e in r.entries.values()}
    sev5 = cells[(cells.table == "qs_R1") & (cells.severity == "5")].set_index(["method", "column"])
    assert sev5.loc[("tent", "fog"), "value"] == pytest.approx(by_cell[("tent", "fog", 5)]["R1"])
    mean = main_r1.set_index(["method", "column"])
    assert mean.loc[("source", "gaussian_noise"), "value"] == pytest.approx(
        (by_cell[("source", "gaussian_noise", 1)]["R1"] + by_cell[("source", "gaussian_noise", 5)]["R1"]) / 2)
    assert mean.loc[("source", "Clean"), "value"] == pytest.approx(by_cell[("source", "clean", 0)]["R1"])
    hub = cells[cells.table == "hubness"].set_index(["method", "group", "column"])
    assert hub.loc[("tent", "Robin Hood", "Clean"), "value"] == pytest.approx(
        by_cell[("tent", "clean", 0)]["hub_robin_hood"])
    # best per column in bold, in the page and the Markdown, with its 95% interval (one seed: over queries)
    best = max(mean.loc[("source", "Avg"), "value"], mean.loc[("tent", "Avg"), "value"])
    assert f"<b>{best:.1f} ±" in page and f"**{best:.1f} ±" in (out / "report.md").read_text()
    assert ((main_r1["low"] <= main_r1["value"] + 1e-9) & (main_r1["value"] <= main_r1["high"] + 1e-9)).all()

    # per-batch R@1 recorded by the trial: its batches (16 queries) average back to the trial's R@1
    for e in r.entries.values():
        b = np.asarray(e["batch_R1"])
        sizes = np.diff(np.r_[0:e["n_queries"]:16, e["n_queries"]])
        assert len(b) == math.ceil(e["n_queries"] / 16)
        assert (b * sizes).sum() / sizes.sum() == pytest.approx(e["metrics"]["R1"], abs=1e-3)

    # MLflow: the parent run holds the report; children carry the filter tags and the per-batch step metric
    client = MlflowClient(tracking_uri=r.report.tracking_uri)
    parent = r.report.parent_run_id
    report_files = {a.path for a in client.list_artifacts(parent, "report")}
    assert {"report/index.html", "report/report.md", "report/report_tables.parquet"} <= report_files
    assert "report/plots/k_occurrence.png" in {a.path for a in client.list_artifacts(parent, "report/plots")}
    exp = client.get_experiment_by_name("mlvp/tiny")
    children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")
    assert len(children) == 10
    fog5 = next(c for c in children if c.data.tags.get("perturbation") == "fog" and c.data.tags["severity"] == "5"
                and c.data.tags["method"] == "tent")
    tags = fog5.data.tags
    assert {k: tags[k] for k in ("scenario", "dataset", "direction", "level", "backbone", "faithful")} == {
        "scenario": "query_shift", "dataset": "synthetic", "direction": "v2t", "level": "low",
        "backbone": "clip4clip", "faithful": "True"}
    history = client.get_metric_history(fog5.info.run_id, "batch_R1")
    entry = r.entries[tags["mlvp.trial_key"]]
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (i, pytest.approx(v)) for i, v in enumerate(entry["batch_R1"])]
    # only runs with a filter match: the UI's filters work on these tags
    assert len(client.search_runs([exp.experiment_id], "tags.level = 'low' and tags.method = 'tent'")) == 4


def test_missing_and_failed_cells_are_never_numbers(tiny_results, tmp_path, capsys):
    """One failed and one never-run cell read the same in every output: the console, qs_tables.md, the Parquet
    tables, report_tables.parquet and the HTML page; a mean over fewer cells is marked partial and never bold."""
    r = tiny_results
    results = tmp_path / "results"
    shutil.copytree(r.results / "ledger", results / "ledger")
    ledger = TrialLedger(results / "ledger")
    by = {(e["spec"]["method"], e["spec"]["perturbation"], e["spec"]["severity"]): e for e in r.entries.values()}
    failed, missing = by[("tent", "fog", 5)], by[("source", "gaussian_noise", 1)]
    ledger.put({**failed, "status": "failed", "metrics": {}, "error": "NonFiniteError: NaN scores at batch 2",
                "traceback": "Traceback (most recent call last):\n  boom", "failed_batch": 2})
    ledger.path(missing["key"]).unlink()
    assert main(["report", str(r.grid), "--results-dir", str(results), "--cache-dir", str(r.cache),
                 "--no-mlflow"]) == 0
    out = results / "tiny" / "report"
    page = (out / "index.html").read_text()
    assert "10 cells: 8 done, 1 failed, 1 never run" in page
    # the failed cell links to its error, which the page holds under that anchor
    assert f'<a href="#err-{failed["key"]}">failed</a>' in page and f'id="err-{failed["key"]}"' in page
    assert "NonFiniteError: NaN scores at batch 2" in page
    cells = pq.read_table(out / "report_tables.parquet").to_pandas()
    sev = cells[cells.table == "qs_R1"].set_index(["severity", "method", "column"])
    assert sev.loc[("5", "tent", "fog"), "state"] == "failed" and pd_isna(sev.loc[("5", "tent", "fog"), "value"])
    assert sev.loc[("5", "tent", "fog"), "error_key"] == failed["key"]
    assert sev.loc[("1", "source", "gaussian_noise"), "state"] == "missing"
    assert pd_isna(sev.loc[("1", "source", "gaussian_noise"), "value"])
    # a mean over severities with one never run is marked partial (over the one that ran), not averaged with zero
    mean = cells[cells.table == "qs_R1_mean"].set_index(["method", "column"])
    assert mean.loc[("source", "gaussian_noise"), "state"] == "partial"
    assert mean.loc[("source", "gaussian_noise"), "value"] == pytest.approx(
        by[("source", "gaussian_noise", 5)]["metrics"]["R1"])
    assert mean.loc[("tent", "fog"), "state"] == "failed"
    md = (out / "report.md").read_text()
    assert "| failed |" in md and "missing" in md

    # the same marks in every output: the console and qs_tables.md print the same Markdown rows
    partial = f"{mean.loc[('source', 'gaussian_noise'), 'value']:.1f}*"
    console = capsys.readouterr().out
    tables_md = (results / "tiny" / "qs_tables.md").read_text()
    for text in (console, tables_md, md):
        # the partial mean with its interval (a bootstrap over the queries of the one trial that ran)
        assert "| failed |" in text and "| missing |" in text and f"| {partial} ±" in text, text[-2000:]
        assert f"**{partial}" not in text   # a partial mean is never a column's best
    assert console.index("mean over severity") < console.index("severity 1")   # the headline table first
    # the Parquet tables: null values, with their states beside them
    per_sev = pq.read_table(results / "tiny" / "qs_R1.parquet").to_pandas().set_index(["severity", "method"])
    assert per_sev.loc[(5, "tent"), "fog:state"] == "failed" and pd_isna(per_sev.loc[(5, "tent"), "fog"])
    assert per_sev.loc[(1, "source"), "gaussian_noise:state"] == "missing"
    assert per_sev.loc[(1, "source"), "Avg:state"] == "partial"
    headline = pq.read_table(results / "tiny" / "qs_R1_mean.parquet").to_pandas().set_index("method")
    assert headline.loc["source", "gaussian_noise:state"] == "partial"
    assert headline.loc["source", "gaussian_noise"] == pytest.approx(mean.loc[("source", "gaussian_noise"), "value"])
    trials = pq.read_table(results / "tiny" / "trials.parquet").to_pandas().set_index("key")
    assert trials.loc[missing["key"], "status"] == "missing" and trials.loc[failed["key"], "status"] == "failed"
    # and the page: a partial cell says over how many, the missing one reads missing
    assert '<td class="partial" title="mean over 1 of 2; 95% interval [' in page and f">{partial} ±" in page
    assert '<td class="missing">missing</td>' in page


def pd_isna(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def test_ledger_entries_without_per_query_lists(tiny_results):
    # what `finish` and `report` read: everything but the per-query lists, which the plotted cell reads back
    from orchestrator.record.ledger import PER_QUERY

    ledger = TrialLedger(tiny_results.results / "ledger")
    keys = list(tiny_results.entries)
    full, light = ledger.entries(keys), ledger.entries(keys, lists=False)
    assert len(full) == len(light) == 10
    assert all(len(e["k_occurrence"]) == e["n_gallery"] and e["batch_R1"] for e in full)
    # each query's share of R@1 stays (the tables' intervals read it), as float16 rather than a list
    assert all(f.get("query_R1") for f in full if f["status"] == "ok")
    for e, f in zip(light, full):
        if f.get("query_R1"):
            q = e.pop("query_R1")
            assert isinstance(q, np.ndarray) and q.dtype == np.float16 and len(q) == f["n_queries"]
            np.testing.assert_allclose(q, f["query_R1"], atol=1e-3)
    assert light == [{k: v for k, v in e.items() if k not in (*PER_QUERY, "query_R1")} for e in full]


def test_severity_figures_redrawn_in_one_figure_match_figures_drawn_alone(tmp_path):
    """plot_severity redraws one matplotlib figure per panel layout for every (dataset, direction, backbone): the
    second cell's picture is pixel for pixel the one drawn alone (nothing of the first cell's lines, limits, colours
    or legend left), though it has fewer methods and other values."""
    import random
    from types import SimpleNamespace

    import matplotlib.image as mpimg
    import pandas as pd

    from orchestrator.report.plots import plot_severity
    from orchestrator.report.rows import QS
    from workloads.perturbations.video import VIDEO_PERTURBATIONS
    from workloads.spec import CLEAN

    rng = random.Random(0)
    grid = SimpleNamespace(methods=["source", "tent", "sar"])
    rows = []
    for backbone, methods, scale in (("clip4clip", ["source", "tent", "sar"], 90), ("xclip", ["source", "sar"], 20)):
        for m in methods:
            rows.append(dict(scenario=QS, status="ok", mix="", dataset="msrvtt", direction="v2t", backbone=backbone,
                             backbone_label=backbone, perturbation=CLEAN, row=m, severity=0,
                             R1=rng.random() * scale))
            for p in VIDEO_PERTURBATIONS.names():
                for s in range(1, 6):
                    rows.append(dict(scenario=QS, status="ok", mix="", dataset="msrvtt", direction="v2t",
                                     backbone=backbone, backbone_label=backbone, perturbation=p, row=m, severity=s,
                                     R1=rng.random() * scale))
    df = pd.DataFrame(rows)
    both = plot_severity(grid, df, tmp_path / "both")
    alone = plot_severity(grid, df[df.backbone == "xclip"], tmp_path / "alone")
    assert [p.name for p in both] == ["r1_severity_msrvtt_v2t_clip4clip.png", "r1_severity_msrvtt_v2t_xclip.png"]
    assert np.array_equal(mpimg.imread(both[1]), mpimg.imread(alone[0]))
    assert not np.array_equal(mpimg.imread(both[0]), mpimg.imread(both[1]))


def test_report_on_a_copied_results_folder_writes_nothing_of_the_original(tiny_results, tmp_path):
    """A results folder copied elsewhere (to share it, or to another machine) reports into itself: `report` on the
    copy writes its tables and report there, and not one file of the original is written, compared by write times
    (a report written again can be byte for byte the same). MLflow keeps absolute artifact locations, so the copy's
    store still names the original's artifacts: nothing is logged there, and the console says why."""
    import shutil
    import subprocess
    import sys

    copy = tmp_path / "copy"
    shutil.copytree(tiny_results.results, copy, symlinks=True)
    before = {p: p.stat().st_mtime_ns for p in tiny_results.results.rglob("*") if p.is_file()}
    out = subprocess.run([sys.executable, "-m", "orchestrator", "report", "tiny", "--results-dir", str(copy),
                          "--cache-dir", str(tiny_results.cache)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    after = {p: p.stat().st_mtime_ns for p in tiny_results.results.rglob("*") if p.is_file()}
    assert after == before, sorted(str(p) for p in after if before.get(p) != after[p])
    assert (copy / "tiny" / "report" / "index.html").stat().st_mtime_ns > max(before.values())
    assert "report not logged to MLflow" in out.stdout and "copied or moved" in out.stdout
