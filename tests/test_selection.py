"""The selection protocols and tables (orchestrator/report/selection.py) on planned rows whose numbers are set here,
so each protocol's pick can be told from the others'; and the label-free signals (workloads/selection.py)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from orchestrator.config.grid import parse_grid
from orchestrator.config.tables import TableOrder
from orchestrator.report.selection import CROSS, DEFAULT, ORACLE, paired_tables, selection_tables

GRID = parse_grid({"name": "sel", "models": {"clip_model": "mlvp-micro"},
                   "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
                   "backbones": ["clip4clip"], "methods": ["source", "tent"],
                   "search": {"budget": 2, "methods": {"tent": {"lr": {"loguniform": [1e-5, 1e-2]}}}},
                   "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise", "impulse_noise",
                                                                                  "fog"], "severities": [5],
                                   "clean": False}}, "sel.yaml")
ORDER = TableOrder(["clip4clip"], ["source", "tent"])
# per shift type, per config ("", random-1, random-2): (R1, pred_entropy, source_R1); lower entropy is better
TENT = {"gaussian_noise": {"": (20, 3.0, 80), "random-1": (30, 2.0, 70), "random-2": (25, 1.0, 60)},
        "impulse_noise": {"": (22, 3.0, 80), "random-1": (28, 2.5, 70), "random-2": (35, 1.5, 60)},
        "fog": {"": (40, 3.0, 80), "random-1": (46, 2.0, 75), "random-2": (38, 1.0, 60)}}


def rows(seeds=(0, 1), missing: tuple = (), tent: dict | None = None) -> pd.DataFrame:
    out = []
    for seed in seeds:
        for pert, configs in (tent or TENT).items():
            base = {"scenario": "query_shift", "dataset": "synthetic", "direction": "v2t", "backbone": "clip4clip",
                    "backbone_label": "clip4clip", "perturbation": pert, "severity": 5, "mix": "", "seed": seed}
            out.append({**base, "row": "source", "method": "source", "config": "", "status": "ok",
                        "key": f"s{pert}{seed}", "R1": 15.0 + seed, "pred_entropy": 4.0, "source_R1": 90.0})
            for cfg, (r1, ent, src) in configs.items():
                status = "missing" if (pert, cfg, seed) in missing else "ok"
                out.append({**base, "row": "tent", "method": "tent", "config": cfg, "status": status,
                            "key": f"t{pert}{cfg}{seed}", "R1": r1 + seed if status == "ok" else None,
                            "pred_entropy": ent, "source_R1": src})
    return pd.DataFrame(out)


def tables(df):
    return {t.name: t for t in selection_tables(GRID, df, ORDER)}


def test_each_protocol_picks_its_own_configuration():
    t = tables(rows())["hp_selection_R1"]
    tent = ("clip4clip", "tent")

    def reached(col):
        return t.cell(tent, col)

    # per type, seed 0: default 20/22/40, oracle 30/35/46, entropy (lowest) 25/35/38, source_R1 (highest) 20/22/40
    assert reached(("", DEFAULT)).value == pytest.approx(np.mean([20, 22, 40]) + 0.5)
    assert reached(("", ORACLE)).value == pytest.approx(np.mean([30, 35, 46]) + 0.5)
    assert reached(("label-free", "pred_entropy")).value == pytest.approx(np.mean([25, 35, 38]) + 0.5)
    assert reached(("label-free", "source_R1")).value == reached(("", DEFAULT)).value
    # cross-shift: on gaussian, the best mean over impulse+fog is random-1 (28+46) over random-2 (35+38) -> 30;
    # on impulse, over gaussian+fog: random-1 (30+46) -> 28; on fog, over gaussian+impulse: random-1 (30+28)
    # against random-2 (25+35) -> random-2 on fog -> 38
    assert reached(("", CROSS)).value == pytest.approx(np.mean([30, 28, 38]) + 0.5)
    # two seeds: each protocol's interval is over them; Source reads the same in every column
    assert reached(("", ORACLE)).seeds == {0: pytest.approx(np.mean([30, 35, 46])), 1: pytest.approx(
        np.mean([31, 36, 47]))}
    assert len({t.cell(("clip4clip", "source"), c).value for c in t.columns}) == 1
    # the signals these rows lack pick nothing: missing, never a number
    absent = {"hub_skewness", "snd", "uniformity_adapted", "modality_gap_adapted"}
    assert all(reached(c).state == ("missing" if c[1] in absent else "ok") for c in t.columns)


def test_a_cell_with_a_configuration_never_run_is_partial():
    t = tables(rows(missing=(("fog", "random-1", 1),)))["hp_selection_R1"]
    oracle = t.cell(("clip4clip", "tent"), ("", ORACLE))
    assert oracle.state == "partial" and oracle.of == "5 of 6 cells with every configuration run"
    assert oracle.text(1).split()[0].endswith("*")


def test_correlation_is_spearman_across_configurations():
    corr = tables(rows(seeds=(0,)))["hp_selection_correlation"]
    expected = []
    for configs in TENT.values():
        r1 = [v[0] for v in configs.values()]
        expected.append(stats.spearmanr([-v[1] for v in configs.values()], r1).statistic)
    assert corr.cell(("clip4clip", "tent"), ("label-free", "pred_entropy")).value == pytest.approx(np.mean(expected))


def test_correlation_over_a_constant_is_undefined_not_missing():
    """R@1 the same for every configuration of a cell (or the signal the same): the rank correlation is undefined,
    marked so with its reason in every form, never `missing` (which says results are absent) nor a number."""
    from orchestrator.report.formats import LEGEND, long_frame, table_html, table_markdown, wide_frame

    # every configuration reaches R@1 20 in every cell; source_R1 is the same for all of them too; entropy varies
    flat = {pert: {cfg: (20, ent, 80) for cfg, (_, ent, _) in configs.items()} for pert, configs in TENT.items()}
    corr = tables(rows(tent=flat))["hp_selection_correlation"]
    tent = ("clip4clip", "tent")
    entropy, source_r1 = (corr.cell(tent, ("label-free", s)) for s in ("pred_entropy", "source_R1"))
    assert entropy.state == "undefined" and entropy.why == "constant R@1" and entropy.number is None
    assert source_r1.state == "undefined" and source_r1.why == "constant R@1 and signal"
    assert entropy.text(2) == "undefined (constant R@1)" and "6 cells x seeds" in entropy.of
    # a signal no trial reports is still missing: absent results, not a constant
    assert corr.cell(tent, ("label-free", "snd")).state == "missing"

    # the signal alone constant: undefined for that reason
    still = {pert: {cfg: (r1, 2.0, src) for cfg, (r1, _, src) in configs.items()} for pert, configs in TENT.items()}
    assert tables(rows(tent=still))["hp_selection_correlation"].cell(tent, ("label-free", "pred_entropy")).why \
        == "constant signal"

    # constant in some cells only: the mean over the others, the undefined ones counted beside it
    some = {**TENT, "fog": flat["fog"]}
    mixed = tables(rows(seeds=(0,), tent=some))["hp_selection_correlation"].cell(tent, ("label-free", "pred_entropy"))
    expected = [stats.spearmanr([-v[1] for v in TENT[p].values()], [v[0] for v in TENT[p].values()]).statistic
                for p in ("gaussian_noise", "impulse_noise")]
    assert mixed.state == "ok" and mixed.value == pytest.approx(np.mean(expected))
    assert mixed.of == "2 cells x seeds; 1 more undefined (constant R@1)"

    # every form: Markdown and HTML say it with its reason, the Parquet forms a null with state and reason
    assert "| undefined (constant R@1) |" in table_markdown(corr) and "undefined (" in LEGEND
    html = table_html(corr)
    assert '<td class="undefined" title="undefined in all 6 cells x seeds (constant R@1: ' in html
    assert ">undefined (constant R@1)</td>" in html
    long = long_frame([corr]).set_index(["method", "column"])
    assert pd.isna(long.loc[("tent", "pred_entropy"), "value"]) and long.loc[("tent", "pred_entropy"), "state"] \
        == "undefined" and long.loc[("tent", "pred_entropy"), "why"] == "constant R@1"
    assert long.loc[("tent", "snd"), "state"] == "missing" and pd.isna(long.loc[("tent", "snd"), "why"])
    wide = wide_frame(corr).set_index("method")
    assert pd.isna(wide.loc["tent", "pred_entropy"]) and wide.loc["tent", "pred_entropy:state"] == "undefined"
    assert wide.loc["tent", "pred_entropy:why"] == "constant R@1" and pd.isna(wide.loc["tent", "snd:why"])
    import pyarrow as pa   # as written to the Parquet files: null value, the state and the reason as strings

    arrow = pa.Table.from_pandas(wide_frame(corr), preserve_index=False).to_pylist()
    tent_row = next(r for r in arrow if r["method"] == "tent")
    assert (tent_row["pred_entropy"], tent_row["pred_entropy:state"], tent_row["pred_entropy:why"]) \
        == (None, "undefined", "constant R@1")
    # a table with nothing undefined has no reason columns
    assert not any(c.endswith(":why") for c in wide_frame(tables(rows())["hp_selection_correlation"]).columns)


def test_kendall_tau_rows_and_correlations_are_not_bold():
    """Bold marks a column's best method; the agreement rows (Kendall's tau with the paper and with the oracle) are not
    methods to compare, and the correlation table's question (which signal tracks R@1) is read across a row, so none
    of their values is bold, in Markdown or HTML. The tables of methods still are."""
    from orchestrator.report.formats import table_html, table_markdown

    t = tables(rows())
    agreement = t["hp_selection_agreement"]
    assert {r[0] for r in agreement.rows} == {"Kendall tau"} and not agreement.compare_rows
    assert any(agreement.cell(r, c).state == "ok" for r in agreement.rows for c in agreement.columns)
    assert agreement.best() == {}
    assert "**" not in table_markdown(agreement) and "<b>" not in table_html(agreement)
    correlation = t["hp_selection_correlation"]
    assert any(correlation.cell(r, c).state == "ok" for r in correlation.rows for c in correlation.columns)
    assert correlation.best() == {} and "**" not in table_markdown(correlation)
    for name in ("hp_selection_R1", "hp_selection_ranking"):
        assert t[name].compare_rows and "**" in table_markdown(t[name]) and "<b>" in table_html(t[name])


def test_ranking_beside_the_papers():
    t = tables(rows())
    ranking, agreement = t["hp_selection_ranking"], t["hp_selection_agreement"]
    # tent beats source under every protocol here; in Table 1 (gaussian, impulse, fog) Source 13.5 > Tent 11.8
    assert ranking.cell(("clip4clip", "tent"), ("", ORACLE)).value == 1
    assert ranking.cell(("clip4clip", "source"), ("", "paper (Table 1)")).value == 1
    assert agreement.cell(("Kendall tau", "vs paper (Table 1)"), ("", ORACLE)).value == -1
    assert agreement.cell(("Kendall tau", "vs oracle"), ("", DEFAULT)).value == 1


def test_paired_tables_subtract_source_seed_by_seed():
    from orchestrator.config.tables import Table, combine

    cells = {(("b", m), ("", "fog")): combine([{"seed": s, "R1": base + 3 * s, "status": "ok", "key": m}
                                                for s in range(3)], "R1")
             for m, base in (("source", 10.0), ("tent", 12.0))}
    t = Table("qs_R1", "R@1 (%): d", [("b", "source"), ("b", "tent")], [("", "fog")], cells, {"dataset": "d"})
    (paired,) = paired_tables([t])
    d = paired.cell(("b", "tent"), ("", "fog"))
    assert paired.rows == [("b", "tent")] and d.value == pytest.approx(2.0)
    assert d.seeds == {0: 2.0, 1: 2.0, 2: 2.0} and d.low == pytest.approx(2.0) and d.high == pytest.approx(2.0)


def test_label_free_signals():
    import torch

    from workloads.selection import prediction_entropy, soft_neighbourhood_density

    g = 50
    assert prediction_entropy(np.zeros((4, g))) == pytest.approx(math.log(g))
    peaked = np.zeros((4, g))
    peaked[:, 0] = 1.0
    assert prediction_entropy(peaked) < 1e-3
    # SND: tight clusters are denser than spread-out points
    rng = torch.Generator().manual_seed(0)
    centres = torch.nn.functional.normalize(torch.randn(4, 16, generator=rng), dim=1)
    clustered = centres.repeat_interleave(8, 0) + 0.01 * torch.randn(32, 16, generator=rng)
    spread = torch.randn(32, 16, generator=rng)
    assert soft_neighbourhood_density(clustered) > soft_neighbourhood_density(spread)
    assert soft_neighbourhood_density(torch.randn(1, 16)) == 0.0
