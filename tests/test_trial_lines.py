"""The line `submit` prints as each trial finishes (orchestrator/record/recorder.py `TrialColumns`, printed by
`LiveRecorder`): every line of a submission has its columns at the same offsets, a plan with several seeds names each
line's seed, a searched configuration's values come in a column of their own, and a failed trial reads `failed`
where a finished one reads its R@1. Lines are read as the console writes them (rich markup rendered, to a file: no
colour codes). No trial runs here."""
from __future__ import annotations

import io
import json
import math

from orchestrator.config.grid import parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan, plan_for_sizing
from orchestrator.planning.search import SearchedConfig, config_text, config_text_width, tpe_spec, tpe_streams
from orchestrator.record.ledger import TrialLedger
from orchestrator.record.recorder import RESULT_WIDTH, LiveRecorder, TrialColumns
from orchestrator.run.console import make_console

BASE = {"name": "lines", "models": {"clip_model": "mlvp-micro"},
        "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
        "backbones": ["clip4clip"], "methods": ["source", "tent"],
        "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise", "impulse_noise"],
                        "severities": [5], "clean": True}}
SEARCH = {"algorithm": "random", "budget": 2, "seed": 0,
          "methods": {"tent": {"lr": {"loguniform": [1e-5, 1e-2]}, "temperature": {"loguniform": [1e-4, 0.1]},
                               "steps": [1, 3]}}}
NAN_ERROR = "RuntimeError: NaN scores after step 2\n  File \"workloads/trial.py\", line 500"


def plan_of(tmp_path, **changes):
    grid = parse_grid({**BASE, **changes}, "lines.yaml")
    return build_plan(grid, Paths.make(tmp_path / "results", tmp_path / "cache"))


def ok(spec, r1=41.25, skew=1.5, seconds=2.0):
    return {"key": spec.key, "spec": spec.to_dict(), "status": "ok", "metrics": {"R1": r1, "hub_skewness": skew},
            "timings": {"total_s": seconds}}


def failed(spec, error=NAN_ERROR):
    return {"key": spec.key, "spec": spec.to_dict(), "status": "failed", "error": error, "metrics": {}, "timings": {}}


class NoStore:   # the MLflow side is tested elsewhere (tests/test_tracking.py); here only the console matters
    uri = "none"

    def log_trial_later(self, parent, grid_name, entry, on_logged, on_error):
        pass


def printed(tmp_path, plan, results) -> list[str]:
    """The lines a submission's recorder prints for `results`, as a log file (not a terminal) receives them."""
    from rich.progress import Progress

    out = io.StringIO()
    progress = Progress(console=make_console(out))
    recorder = LiveRecorder(TrialLedger(tmp_path / "ledger"), NoStore(), "parent", plan.grid.name, "sub-1", progress,
                            progress.add_task("trials", total=len(results)), TrialColumns.for_plan(plan))
    for result in results:
        recorder.result(result)
    text = out.getvalue()
    assert "\x1b" not in text   # no colour codes where stdout is not a terminal
    return text.splitlines()


def offsets(line: str, *words: str) -> list[int]:
    return [line.index(w) for w in words]


def test_each_seed_of_a_configuration_is_named_on_its_line(tmp_path):
    plan = plan_of(tmp_path, seeds=[0, 1, 2])
    cell = [t for t in plan.trials if t.method == "tent" and t.perturbation == "gaussian_noise"]
    assert sorted(t.seed for t in cell) == [0, 1, 2]
    lines = printed(tmp_path, plan, [ok(t) for t in cell])
    assert len(lines) == 3 and len(set(lines)) == 3   # three seeds of one configuration: three different lines
    for t, line in zip(cell, lines):
        assert line.split() == ["synthetic", "clip4clip", "tent", "v2t", "gaussian_noise-5", "seed", str(t.seed),
                                "R@1", "41.2", "skew", "1.50", "(2.0s)"], line
    assert len({line.index("R@1") for line in lines}) == 1


def test_a_single_seed_grids_lines_name_no_seed(tmp_path):
    plan = plan_of(tmp_path)
    lines = printed(tmp_path, plan, [ok(t) for t in plan.trials])
    assert len(lines) == len(plan.trials) == 6 and not any("seed" in line for line in lines)
    tent = next(line for line in lines if " tent " in line and "impulse" in line)
    assert tent.split() == ["synthetic", "clip4clip", "tent", "v2t", "impulse_noise-5", "R@1", "41.2", "skew", "1.50",
                            "(2.0s)"]
    assert len({line.index("R@1") for line in lines}) == 1   # "clean" and "gaussian_noise-5" cells line up


def test_searched_and_plain_trials_share_every_column(tmp_path):
    """A searched configuration (`lr=3.21e-05 temperature=0.00353 steps=1`) is wider than any method's name: its values
    sit in a column after the result, so every column of every line, plain and searched, finished and failed, starts
    at one offset; the lines fit 120 columns."""
    plan = plan_of(tmp_path, seeds=[0, 1], search=SEARCH)
    trials = [t for t in plan.trials if t.perturbation == "gaussian_noise"]
    searched = [t for t in trials if t.config]
    plain = [t for t in trials if not t.config]
    assert len(searched) == 2 * 2 and len(plain) == 2 * 2   # tent's 2 drawn configurations, Source and tent, 2 seeds
    results = [ok(t, r1=100.0 * (i % 2), skew=-0.25, seconds=12.5 * i) for i, t in enumerate(trials)]
    results += [failed(searched[0]), failed(plain[1], "worker crashed: InjectedFault: injected fault")]
    lines = printed(tmp_path, plan, results)
    assert len(lines) == len(results)
    finished, broken = lines[:len(trials)], lines[len(trials):]
    # the names, the seed and the result start at one offset on every line
    columns = {tuple(offsets(line, "synthetic", "clip4clip", "v2t", "gaussian_noise-5", "seed ")) for line in lines}
    assert len(columns) == 1, lines
    state = {line.index("R@1") for line in finished} | {line.index("failed") for line in broken}
    assert len(state) == 1, lines
    # each searched configuration reads its own values, at one offset, after the result
    names = TrialColumns.for_plan(plan).searched
    assert names == {"tent": ("lr", "temperature", "steps")}
    for t, line in zip(trials, finished):
        config = config_text(t, names)
        if t.config:
            options = json.loads(t.options)
            assert config == f"lr={options['lr']:.3g} temperature={options['temperature']:.3g} steps={t.steps}"
            assert line.endswith(f"  {config}"), line
        else:
            assert line.endswith("s)") and "lr=" not in line, line   # the grid's own configuration: nothing after
    # the columns before the configuration fit a 100-column terminal; only the configuration's values pass it
    (result_at,) = state
    assert {line.index("lr=") for line in lines if "lr=" in line} == {result_at + RESULT_WIDTH + 2}
    assert result_at + RESULT_WIDTH < 100
    # a failed trial: `failed` where R@1 would be, then its configuration, then its error's first line
    assert "R@1" not in broken[0] and "R@1" not in broken[1]
    assert broken[0].split("failed", 1)[1].split() == [*config_text(searched[0], names).split(),
                                                       "RuntimeError:", "NaN", "scores", "after", "step", "2"]
    assert broken[1].split("failed", 1)[1].strip() == "worker crashed: InjectedFault: injected fault"
    # errors start at one offset: after the configuration column on a searched line, in its place on a plain one
    assert broken[1].index("worker") == broken[0].index("lr=")


def test_the_configuration_column_fits_what_tpe_proposes_while_the_grid_runs(tmp_path):
    """TPE's configurations are not in the plan: the column is as wide as any value the search space can give."""
    search = {**SEARCH, "algorithm": "tpe", "budget": 2, "source_pairs": 16,
              "methods": {"tent": {**SEARCH["methods"]["tent"], "steps": {"randint": [1, 12]}}}}
    plan = plan_of(tmp_path, search=search)
    assert not any(t.config for t in plan.trials)
    stream = tpe_streams(plan)[0]
    widest = tpe_spec(stream, SearchedConfig("tpe-1", {"lr": 1.2345e-05, "temperature": 0.0001234}, steps=12))
    narrow = tpe_spec(stream, SearchedConfig("tpe-2", {"lr": 0.01, "temperature": 0.1}, steps=1))
    columns = TrialColumns.for_plan(plan)
    assert columns.config == len(config_text(widest, columns.searched)) == len(
        "lr=1.23e-05 temperature=0.000123 steps=12")
    lines = printed(tmp_path, plan, [ok(stream), ok(widest), ok(narrow), failed(widest), failed(narrow),
                                     failed(stream)])
    config_at = {line.index("lr=") for line in lines if "lr=" in line}
    assert len(config_at) == 1, lines
    # a searched failure's error after the widest configuration; a plain one's where the configuration would be
    assert lines[3].index("RuntimeError") == lines[4].index("RuntimeError") == config_at.pop() + columns.config + 2
    assert lines[5].index("RuntimeError") == lines[3].index("lr=")


def test_a_metric_the_trial_did_not_report_reads_missing(tmp_path):
    plan = plan_of(tmp_path)
    spec = plan.trials[0]
    (line,) = printed(tmp_path, plan, [ok(spec, r1=math.nan, skew=None)])
    assert "R@1 missing  skew missing" in line and "nan" not in line


def test_config_text_width_bounds_every_drawn_configuration(tmp_path):
    """The shipped hp_selection grid (random search, three seeds): the column's width is no narrower than any
    configuration it draws, and its lines name their seeds."""
    from orchestrator.config.shipped import shipped_grids

    plan = plan_for_sizing(shipped_grids()["hp_selection"], Paths.make(tmp_path / "results", tmp_path / "cache"))
    columns = TrialColumns.for_plan(plan)
    for entry in columns.searched:
        texts = [config_text(t, columns.searched) for t in plan.trials if t.config and t.method_label == entry]
        assert texts and max(map(len, texts)) <= config_text_width(plan.grid, entry) <= columns.config
    assert columns.seed == len("seed 2") and RESULT_WIDTH == len("R@1 100.0  skew -1.00  (9999.9s)")
