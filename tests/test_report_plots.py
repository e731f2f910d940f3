"""What the report's severity figures and tables mark (orchestrator/report/plots.py, formats.py): a point only at a
severity that ran, a line and an interval band only between neighbouring severities that both ran; bold for the best
value of a column on each backbone. The figures are read through matplotlib's public artists (Line2D, the band's
PolyCollection, the error bars' LineCollection)."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from orchestrator.config.tables import Table, Value
from orchestrator.report.formats import table_html, table_markdown
from orchestrator.report.plots import plot_severity, severity_figures
from orchestrator.report.rows import QS
from workloads.spec import CLEAN

METHODS = ["source", "tent"]
TYPES = ["gaussian_noise", "fog"]


def _frame(severities: list[int], seeds=(0, 1, 2)) -> pd.DataFrame:
    """Planned rows of one (dataset, direction, backbone) that ran ok: the clean cell and each type at `severities`,
    at three seeds (so every point has a 95% interval over seeds)."""
    rng = np.random.default_rng(0)
    rows = []
    for m in METHODS:
        for p, sevs in [(CLEAN, [0]), *((t, severities) for t in TYPES)]:
            for s in sevs:
                for seed in seeds:
                    rows.append(dict(scenario=QS, status="ok", mix="", dataset="synthetic", direction="v2t",
                                     backbone="clip4clip", backbone_label="clip4clip", perturbation=p, row=m,
                                     severity=s, seed=seed, R1=80 - 8 * s + rng.random() * 4))
    return pd.DataFrame(rows)


def _drawn(severities: list[int]) -> list[dict]:
    """Per panel of the one figure: each method's lines (x data, whether drawn with a line) and the x extent of
    each band and error bar, by colour."""
    grid = SimpleNamespace(methods=METHODS)
    figures = [(name, _read(fig)) for name, fig in severity_figures(grid, _frame(severities))]
    assert [name for name, _ in figures] == ["r1_severity_synthetic_v2t_clip4clip.png"]
    panels = figures[0][1]
    assert [p["title"] for p in panels] == [f"{t} (low)" for t in TYPES]
    return panels


def _read(fig) -> list[dict]:
    out = []
    for ax in fig.axes:
        if not ax.axison:
            continue
        lines = [{"x": [float(x) for x in ln.get_xdata()], "joined": ln.get_linestyle() not in ("None", "none", ""),
                  "label": ln.get_label()} for ln in ax.get_lines()]
        bands = [sorted({round(float(x), 6) for path in c.get_paths() for x in path.vertices[:, 0]})
                 for c in ax.collections if isinstance(c, PolyCollection)]
        bars = [sorted({round(float(x), 6) for seg in c.get_segments() for x in np.asarray(seg)[:, 0]})
                for c in ax.collections if isinstance(c, LineCollection)]
        legend = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else None
        out.append({"title": ax.get_title(), "lines": lines, "bands": bands, "bars": bars, "legend": legend})
    return out


def _points(panel) -> set[float]:
    return {x for ln in panel["lines"] for x in ln["x"]}


@pytest.mark.parametrize("severities, joined, alone", [
    ([1, 5], [[0.0, 1.0]], [[5.0]]),
    ([1, 3, 5], [[0.0, 1.0]], [[3.0], [5.0]]),
    ([5], [], [[0.0], [5.0]]),
    ([1, 2, 3, 4, 5], [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]], []),
])
def test_severity_lines_and_bands_only_between_neighbouring_severities_that_ran(severities, joined, alone):
    """Severities [1, 5]: points at 0 (clean), 1 and 5; a line and band over 0-1 only, and 5 a point with an error
    bar (the figure used to draw one line 0-1-5 and shade 1-5, where nothing ran)."""
    panels = _drawn(severities)
    for panel in panels:
        assert _points(panel) == {0.0, *map(float, severities)}
        lines = panel["lines"]
        # each method named on its first line only, so that the legend names it once
        assert [ln["label"] for ln in lines if not ln["label"].startswith("_")] == METHODS
        assert sorted(ln["x"] for ln in lines if ln["joined"]) == sorted(joined * len(METHODS))
        assert sorted(ln["x"] for ln in lines if not ln["joined"]) == sorted(alone * len(METHODS))
        # every band spans exactly one run of neighbouring severities, never a severity that did not run
        assert sorted(panel["bands"]) == sorted(joined * len(METHODS))
        assert sorted(panel["bars"]) == sorted(alone * len(METHODS))
    assert panels[0]["legend"] == METHODS


def test_a_method_keeps_its_colour_and_the_next_figure_keeps_nothing_of_the_last(tmp_path):
    """Two backbones drawn in one redrawn figure: the second has only its own points, and a method has the same
    colour in both (its row's), even where a method before it has no trials on that backbone."""
    grid = SimpleNamespace(methods=["source", "sar", "tent"])
    a = _frame([1, 5])
    b = _frame([1, 2, 3]).assign(backbone="xclip", backbone_label="xclip")
    b = b[b.row != "source"]   # no Source on the second backbone
    colours = {}
    for name, fig in severity_figures(grid, pd.concat([a, b], ignore_index=True)):
        ax = fig.axes[0]
        drawn = {float(x) for ln in ax.get_lines() for x in ln.get_xdata()}
        assert drawn == ({0.0, 1.0, 5.0} if "clip4clip" in name else {0.0, 1.0, 2.0, 3.0}), name
        for ln in ax.get_lines():
            if not ln.get_label().startswith("_"):
                colours.setdefault(ln.get_label(), set()).add(ln.get_color())
    assert colours == {"source": {"C0"}, "tent": {"C2"}}
    files = plot_severity(grid, a, tmp_path)
    assert [f.name for f in files] == ["r1_severity_synthetic_v2t_clip4clip.png"] and files[0].stat().st_size > 0


def _two_backbones() -> Table:
    """R@1 of two methods on two backbones; xclip's values are all below clip4clip's."""
    rows = [("clip4clip", "source"), ("clip4clip", "tent"), ("xclip", "source"), ("xclip", "tent")]
    cols = [("low", "gaussian_noise"), ("", "Clean")]
    vals = {("clip4clip", "source"): (30.0, 85.0), ("clip4clip", "tent"): (31.0, 84.0),
            ("xclip", "source"): (12.0, 40.0), ("xclip", "tent"): (10.0, 41.0)}
    cells = {(r, c): Value(vals[r][j], "ok") for r in rows for j, c in enumerate(cols)}
    cells[("xclip", "tent"), ("", "Clean")] = Value(41.0, "ok")
    return Table("qs_R1", "R@1", rows, cols, cells)


def test_bold_marks_the_best_of_each_column_on_each_backbone():
    t = _two_backbones()
    md = table_markdown(t).splitlines()[2:]
    bold = {tuple(cell.strip() for cell in line.strip("|").split("|")[:2]):
            [c.strip().startswith("**") for c in line.strip("|").split("|")[2:]] for line in md}
    assert bold == {("clip4clip", "source"): [False, True], ("clip4clip", "tent"): [True, False],
                    ("xclip", "source"): [True, False], ("xclip", "tent"): [False, True]}
    page = table_html(t)
    for text in ("31.0", "85.0", "12.0", "41.0"):
        assert f"<b>{text}</b>" in page
    for text in ("30.0", "84.0", "10.0", "40.0"):
        assert f"<b>{text}</b>" not in page and f">{text}</td>" in page


def test_a_partial_mean_is_never_bold_and_a_backbone_without_a_complete_cell_has_no_bold():
    t = _two_backbones()
    for r in (("xclip", "source"), ("xclip", "tent")):
        v = t.cells[r, ("low", "gaussian_noise")]
        t.cells[r, ("low", "gaussian_noise")] = Value(v.value, "partial", of="1 of 2")
    md = table_markdown(t)
    assert "**12.0" not in md and "**10.0" not in md and "**31.0**" in md and "**41.0**" in md
