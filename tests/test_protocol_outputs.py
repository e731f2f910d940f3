"""Stream protocols' outputs (docs/protocols.md: Outputs): a trial's running R@1 and per-segment R@1 as MLflow step
metrics of its child run, and the protocols' tables (orchestrator/config/tables.py). Hand-written ledger entries of a
real plan (nothing run), a real MLflow sqlite store, the real table writer."""
from __future__ import annotations

import pytest

GRID = {
    "name": "protos",
    "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
    "models": {"clip_model": "mlvp-micro"},
    "backbones": ["clip4clip"],
    "methods": ["source", "tent"],
    "query_shift": {"datasets": ["synthetic"], "directions": ["v2t"],
                    "perturbations": ["impulse_noise", "gaussian_noise"], "severities": [5],
                    "protocols": ["reset_each_shift", "episodic", "continual"]},
}


def _plan(tmp_path, shared_cache, grid=GRID):
    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan

    tmp_path.mkdir(parents=True, exist_ok=True)
    grid_file = tmp_path / f"{grid['name']}.yaml"
    grid_file.write_text(f"name: {grid['name']}\n")
    return build_plan(parse_grid(grid, str(grid_file)), Paths.make(tmp_path / "results", shared_cache))


def test_running_and_segment_r1_are_step_metrics_of_the_trial_run(tmp_path, shared_cache):
    from mlflow.tracking import MlflowClient

    from orchestrator.record.mlflow_store import Tracker

    plan = _plan(tmp_path, shared_cache)
    trial = next(t for t in plan.trials if t.segments)     # the continual stream: two segments
    assert [c for c, _ in trial.segment_cells] == ["gaussian_noise", "impulse_noise"]
    running = [[16.0, 12.5], [32.0, 15.625], [48.0, 20.8333], [80.0, 22.5]]
    segments = [{"cell": "gaussian_noise-5", "perturbation": "gaussian_noise", "severity": 5, "R1": 20.0},
                {"cell": "impulse_noise-5", "perturbation": "impulse_noise", "severity": 5, "R1": 25.0}]
    entry = {"key": trial.key, "spec": trial.to_dict(), "status": "ok", "metrics": {"R1": 22.5},
             "batch_R1": [12.5, 18.75, 31.25, 25.0, 25.0], "running_R1": running, "segments": segments,
             "n_queries": 80, "k_occurrence": [1, 2]}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, tmp_path)
    parent = tracker.start_parent(plan.grid, "name: protos\n", {})
    rid = tracker.log_trial(parent, "protos", entry)

    client = MlflowClient(tracking_uri=uri)
    history = sorted(client.get_metric_history(rid, "running_R1"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in history] == [(int(q), pytest.approx(r)) for q, r in running]
    for s, seg in enumerate(segments):
        got = client.get_metric_history(rid, f"R1.seg.{seg['cell']}")
        assert [(m.step, m.value) for m in got] == [(s, pytest.approx(seg["R1"]))]
    # the per-batch steps are still there, step = the batch's index
    batches = sorted(client.get_metric_history(rid, "batch_R1"), key=lambda m: m.step)
    assert [(m.step, m.value) for m in batches] == [(i, pytest.approx(v)) for i, v in enumerate(entry["batch_R1"])]

    # a single-segment trial logs its running R@1 and no segment metric
    single = next(t for t in plan.trials if t.protocol == "episodic")
    rid2 = tracker.log_trial(parent, "protos", {**entry, "key": single.key, "spec": single.to_dict(),
                                                "segments": None, "running_R1": running[:2]})
    assert sorted(m.step for m in client.get_metric_history(rid2, "running_R1")) == [16, 32]
    assert not [k for k in client.get_run(rid2).data.metrics if k.startswith("R1.seg.")]


def test_protocol_tables_on_a_hand_written_ledger(tmp_path, shared_cache):
    """The leaderboard across protocols (mean R@1 over a protocol's shifted cells, with the bootstrap interval over
    queries) and the continual stream's per-segment table, with a failed and a never-run trial marked as everywhere."""
    import pyarrow.parquet as pq

    from orchestrator.record.ledger import TrialLedger
    from orchestrator.report.results import write_tables
    from workloads.spec import CLEAN

    plan = _plan(tmp_path, shared_cache)
    ledger = TrialLedger(plan.paths.ledger)
    r1, seg_r1, entries = {}, {}, []
    never = failed = None
    for i, t in enumerate(plan.trials):
        label = t.protocol or "reset_each_shift"
        if (t.method, label, t.perturbation) == ("tent", "episodic", "gaussian_noise"):
            never = t     # never runs: its row's episodic cell is partial, over its other shifted cell
            continue
        if t.method == "tent" and t.segments:
            failed = t    # tent's continual stream failed: failed in both tables, never a number
            e = {"key": t.key, "spec": t.to_dict(), "status": "failed", "metrics": {}, "error": "RuntimeError: x"}
        else:
            value = 10.0 + 3 * i
            r1[t.key] = value
            e = {"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": value},
                 "query_R1": [1.0] * int(value) + [0.0] * (100 - int(value))}
            e["running_R1"] = [[16.0, value - 2.0], [32.0, value]]
            if t.segments:
                e["n_queries"] = 80
                seg_r1[t.method] = [value - 4.0, value + 4.0]
                e["segments"] = [{"cell": f"{p}-{s}", "perturbation": p, "severity": s, "R1": v}
                                 for (p, s), v in zip(t.segment_cells, seg_r1[t.method])]
        ledger.put(e, submission="s1")
        entries.append(e)
    assert never is not None and failed is not None
    out = tmp_path / "tables"
    files = write_tables(entries, out, plan.grid, plan.trials)
    assert out / "protocols.parquet" in files and out / "protocol_segments.parquet" in files

    board = pq.read_table(out / "protocols.parquet").to_pandas().set_index("method")
    assert list(board.columns[3:6]) == ["reset_each_shift", "episodic", "continual"]
    shifted = {m: {p: [r1[t.key] for t in plan.trials if t.method == m and (t.protocol or "reset_each_shift") == p
                       and t.perturbation != CLEAN and t.key in r1] for p in ("reset_each_shift", "episodic")}
               for m in ("source", "tent")}
    assert board.loc["source", "reset_each_shift"] == pytest.approx(sum(shifted["source"]["reset_each_shift"]) / 2)
    assert board.loc["source", "reset_each_shift:state"] == "ok"
    assert board.loc["source", "reset_each_shift:low"] < board.loc["source", "reset_each_shift"] < \
        board.loc["source", "reset_each_shift:high"]
    assert len(shifted["tent"]["episodic"]) == 1 and board.loc["tent", "episodic:state"] == "partial"
    assert board.loc["tent", "episodic"] == pytest.approx(shifted["tent"]["episodic"][0])
    assert board.loc["tent", "continual:state"] == "failed" and pd_isna(board.loc["tent", "continual"])
    src_stream = next(t for t in plan.trials if t.method == "source" and t.segments)
    assert board.loc["source", "continual"] == pytest.approx(r1[src_stream.key])

    segs = pq.read_table(out / "protocol_segments.parquet").to_pandas().set_index("method")
    assert list(segs.columns[4:7]) == ["gaussian_noise-5", "impulse_noise-5", "Mean"]   # stream order, then mean
    # each method's row, then the same method reset on each segment's cell (the paper's protocol) beside it
    assert segs.index.tolist() == ["source", "source (reset_each_shift)", "tent", "tent (reset_each_shift)"]
    assert set(segs["stream"]) == {"continual"}
    reset = {(t.method, t.perturbation): r1[t.key] for t in plan.trials
             if not t.protocol and t.perturbation != CLEAN and t.key in r1}
    assert [segs.loc["tent (reset_each_shift)", c] for c in ("gaussian_noise-5", "impulse_noise-5")] == [
        reset[("tent", "gaussian_noise")], reset[("tent", "impulse_noise")]]
    assert segs.loc["tent (reset_each_shift)", "Mean:state"] == "ok"
    assert [segs.loc["source", c] for c in ("gaussian_noise-5", "impulse_noise-5")] == seg_r1["source"]
    assert segs.loc["source", "Mean"] == pytest.approx(sum(seg_r1["source"]) / 2)
    assert set(segs.loc["tent", ["gaussian_noise-5:state", "impulse_noise-5:state", "Mean:state"]]) == {"failed"}
    md = (out / "protocols_tables.md").read_text()
    assert "| clip4clip | tent |" in md and "failed" in md and "*" in md

    # the report shows the same tables (orchestrator/report/page.py reads analysis_tables)
    from orchestrator.report.outputs import write_outputs

    done = write_outputs(plan.grid, plan.trials, tmp_path / "report", plan.paths.ledger)
    assert done.error is None and done.report_error is None, (done.error, done.report_error)
    page = (tmp_path / "report" / "report" / "index.html").read_text()
    assert 'data-name="protocols"' in page and 'data-name="protocol_segments"' in page
    # R@1 over the continual stream: one figure, in the page and as a PNG
    assert "R@1 over a protocol&#x27;s stream" in page or "R@1 over a protocol's stream" in page
    png = tmp_path / "report" / "report" / "plots" / "stream_synthetic_v2t_continual.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the per-cell figures (R@1 against severity, the focus cell, diagnostics) read the paper's protocol alone
    from orchestrator.report.plots import focus_cell, paper_protocol
    from orchestrator.report.rows import planned_rows

    rows = planned_rows(plan.trials, entries)
    assert set(paper_protocol(rows, plan.grid)["protocol_label"]) == {"reset_each_shift"}
    cell = focus_cell(plan.grid, rows)
    assert cell is not None and {cell[k]["protocol_label"] for k in ("clean", "shifted", "adapted")} == {
        "reset_each_shift"}

    # now the failed stream never ran: missing, never zero
    entries = [e for e in entries if e["key"] != src_stream.key]
    write_tables(entries, tmp_path / "again", plan.grid, plan.trials)
    segs = pq.read_table(tmp_path / "again" / "protocol_segments.parquet").to_pandas().set_index("method")
    assert segs.loc["source", "gaussian_noise-5:state"] == "missing" and pd_isna(segs.loc["source", "Mean"])


def test_a_grid_of_one_protocol_has_no_protocol_tables(tmp_path, shared_cache):
    from orchestrator.report.protocols import protocol_tables
    from orchestrator.report.rows import planned_rows, table_order

    plan = _plan(tmp_path, shared_cache, {**GRID, "query_shift": {**GRID["query_shift"], "protocols": []}})
    assert protocol_tables(plan.grid, planned_rows(plan.trials, []), table_order(plan.grid)) == []
    plan = _plan(tmp_path / "b", shared_cache, {**GRID, "query_shift": {**GRID["query_shift"],
                                                                          "protocols": ["continual"]}})
    names = [t.name for t in protocol_tables(plan.grid, planned_rows(plan.trials, []), table_order(plan.grid))]
    assert names == ["protocol_segments"]   # the stream alone: nothing to compare it with, its segments still shown


def pd_isna(v) -> bool:
    import math

    return v is None or (isinstance(v, float) and math.isnan(v))


def test_the_shipped_protocols_check_plans_every_protocol(tmp_path):
    """grids/protocols_check.yaml (planned, not run): the ten methods x two backbones under every registered
    protocol; one continual, gradual and mixed_domains stream per backbone and method."""
    from orchestrator.config.grid import load_grid
    from orchestrator.config.shipped import shipped_grids
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from workloads.protocols import PROTOCOLS

    grid = load_grid(shipped_grids()["protocols_check"])
    plan = build_plan(grid, Paths.make(tmp_path / "results", tmp_path / "cache"))
    by: dict[str, list] = {}
    for t in plan.trials:
        by.setdefault(t.protocol or "reset_each_shift", []).append(t)
    assert set(by) == set(PROTOCOLS.names())
    assert {(t.backbone, t.method) for t in by["budgeted"]} == {(b, m) for b in grid.backbones for m in grid.methods}
    for name in ("continual", "gradual", "mixed_domains"):
        assert len(by[name]) == 2 * 10 and all(t.segments for t in by[name])
    assert all(len(by[p]) == 2 * 10 * 2 for p in ("reset_each_shift", "correlated", "episodic", "offline", "budgeted"))
    assert by["gradual"][0].segment_cells == [("gaussian_noise", s) for s in (1, 3, 5, 3, 1)]
    assert by["continual"][0].segment_cells == [("gaussian_noise", 5), ("fog", 5)]


def test_a_gradual_streams_repeated_cells_are_columns_of_their_own(tmp_path, shared_cache):
    """gradual visits each cell twice (1, 2, 1): each visit is a column, in stream order, named with its place."""
    from orchestrator.report.formats import column_name
    from orchestrator.report.protocols import protocol_tables
    from orchestrator.report.rows import planned_rows, table_order

    grid = {**GRID, "query_shift": {**GRID["query_shift"], "severities": [1, 2], "protocols": ["gradual"]}}
    plan = _plan(tmp_path, shared_cache, grid)
    entries = []
    for t in plan.trials:
        values = [float(10 * i + (t.method == "tent")) for i in range(len(t.segment_cells))]
        entries.append({"key": t.key, "spec": t.to_dict(), "status": "ok", "metrics": {"R1": sum(values) / 6},
                        "segments": [{"cell": f"{p}-{s}", "R1": v} for (p, s), v in zip(t.segment_cells, values)]})
    (table,) = protocol_tables(plan.grid, planned_rows(plan.trials, entries), table_order(plan.grid))
    assert [column_name(table, c) for c in table.columns] == [
        "1 gaussian_noise-1", "2 gaussian_noise-2", "3 gaussian_noise-1",
        "4 impulse_noise-1", "5 impulse_noise-2", "6 impulse_noise-1", "Mean"]
    tent = ("clip4clip", "tent")
    assert [table.cell(tent, c).value for c in table.columns[:-1]] == [1.0, 11.0, 21.0, 31.0, 41.0, 51.0]
    assert table.cell(tent, table.columns[-1]).value == pytest.approx(26.0)
