"""95% intervals in the table model (orchestrator/config/tables.py): over seeds, or a paired bootstrap over queries;
carried through averages and differences, and written by every format (orchestrator/report/formats.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from orchestrator.config.tables import Table, Value, combine, difference, mean_of
from orchestrator.report.formats import long_frame, table_markdown, wide_frame


def row(seed, r1, query=None, status="ok", key="k"):
    return {"seed": seed, "R1": r1, "status": status, "key": key, "query_R1": query}


def test_interval_over_seeds_is_students_t_over_the_seed_means():
    trials = [row(0, 40.0), row(0, 42.0), row(1, 45.0), row(1, 47.0), row(2, 38.0), row(2, 40.0)]
    v = combine(trials, "R1")
    means = [41.0, 46.0, 39.0]
    assert v.seeds == {0: 41.0, 1: 46.0, 2: 39.0} and v.value == pytest.approx(np.mean(means))
    low, high = stats.t.interval(0.95, 2, loc=np.mean(means), scale=stats.sem(means))
    assert (v.low, v.high) == (pytest.approx(low), pytest.approx(high))
    assert v.text(1) == f"{np.mean(means):.1f} ±{(high - low) / 2:.1f}"


def test_one_seed_bootstraps_over_queries_and_pairs_cells_over_the_same_queries():
    rng = np.random.default_rng(0)
    hits = (rng.random(200) < 0.4).astype(float)
    a = combine([row(0, 100 * hits.mean(), hits)], "R1")
    assert a.low < a.value < a.high
    # the interval of a proportion near 0.4 over 200 queries: about +-6.8 points
    assert a.half_width == pytest.approx(100 * 1.96 * math.sqrt(0.4 * 0.6 / 200), rel=0.2)
    # the same queries answered identically: the paired difference is exactly zero, with a zero-width interval
    b = combine([row(0, 100 * hits.mean(), hits.copy())], "R1")
    d = difference(a, b)
    assert d.value == 0 and d.low == 0 and d.high == 0
    # one more query right: the paired difference is 0.5 point, all its resamples between 0 and 2 points
    better = hits.copy()
    better[np.flatnonzero(hits == 0)[0]] = 1
    d = difference(combine([row(0, 100 * better.mean(), better)], "R1"), b)
    assert d.value == pytest.approx(0.5) and 0 <= d.low <= d.high <= 2.0


def test_averages_carry_intervals_seed_by_seed_and_states_stay_honest():
    cells = [combine([row(0, 10.0), row(1, 20.0)], "R1"), combine([row(0, 30.0), row(1, 50.0)], "R1")]
    avg = mean_of(cells)
    assert avg.seeds == {0: 20.0, 1: 35.0} and avg.value == pytest.approx(27.5) and avg.has_interval
    partial = mean_of([cells[0], Value()])
    assert partial.state == "partial" and partial.text(1).startswith("15.0*")
    failed = combine([row(0, 10.0), row(1, 0.0, status="failed", key="bad")], "R1")
    assert failed.state == "failed" and failed.text(1) == "failed" and difference(cells[0], failed).state == "failed"
    assert difference(cells[0], Value()).state == "missing"


def test_no_interval_without_seeds_or_queries():
    v = combine([row(0, 12.0)], "R1")
    assert not v.has_interval and v.text(1) == "12.0"
    skew = combine([{**row(0, 1.0), "hub_skewness": 2.0}], "hub_skewness")
    assert not skew.has_interval


def test_every_format_writes_the_interval_and_each_seed():
    cells = {(("b", "tent"), ("", "fog")): combine([row(0, 10.0), row(1, 20.0), row(2, 30.0)], "R1"),
             (("b", "tent"), ("", "snow")): Value()}
    t = Table("qs_R1", "t", [("b", "tent")], [("", "fog"), ("", "snow")], cells, {"dataset": "d"})
    md = table_markdown(t)
    assert "20.0 ±24.8" in md and "missing" in md
    wide = wide_frame(t)
    assert wide.loc[0, "fog"] == 20.0 and wide.loc[0, "fog:seed1"] == 20.0 and wide.loc[0, "fog:low"] < 0
    assert math.isnan(wide.loc[0, "snow:low"]) and wide.loc[0, "snow:state"] == "missing"
    long = long_frame([t])
    fog = long[long["column"] == "fog"].iloc[0]
    assert fog["high"] > 40 and fog["seed_values"] == '{"0": 10.0, "1": 20.0, "2": 30.0}'
