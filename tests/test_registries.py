"""Every registry is the only list of its names, and a new entry needs nothing but its own registration: a throwaway
method, video perturbation and scenario registered here are planned from a grid and run, with no other edit."""
from dataclasses import dataclass, field

import pandas as pd
import pytest

from orchestrator.config.grid import parse_grid
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from orchestrator.report.results import write_tables
from orchestrator.config.scenarios import SCENARIOS
from orchestrator.config.scenarios.base import Cell, Scenario
from orchestrator.config.tables import Table, Value
from workloads.backbones import BACKBONES
from workloads.datasets import DATASETS
from workloads.methods import METHODS
from workloads.methods.base import NoAdaptation
from workloads.perturbations.video import VIDEO_PERTURBATIONS
from workloads.registry import Registry

REGISTRIES = {"method": METHODS, "backbone": BACKBONES, "dataset": DATASETS, "video perturbation": VIDEO_PERTURBATIONS,
              "scenario": SCENARIOS}


@pytest.mark.parametrize("kind", REGISTRIES)
def test_registry_lists_every_entry_once_in_table_order(kind):
    reg = REGISTRIES[kind]
    names = reg.names()
    assert names and len(set(names)) == len(names)
    orders = [reg.entry(n).order for n in names]
    assert orders == sorted(orders), "names() follows the registration order"
    for name in names:
        assert name in reg and reg.lookup(name) is reg[name]
    with pytest.raises(ValueError, match=f"unknown {kind} 'no-such-thing'; known {kind}s: {names[0]}"):
        reg.lookup("no-such-thing")


# every registry's names, read from the source alone and then from the imported entries, in a fresh interpreter
_NAMES_WITHOUT_IMPORTS = """
import json, sys
from orchestrator.config.scenarios import SCENARIOS
from workloads.backbones import BACKBONES
from workloads.datasets import DATASETS
from workloads.methods import METHODS
from workloads.perturbations.text import TEXT_PERTURBATIONS
from workloads.perturbations.video import VIDEO_PERTURBATIONS
from workloads.spec import TrialResult, TrialSpec   # what the driver and a no-op trial handle
regs = {"method": METHODS, "backbone": BACKBONES, "dataset": DATASETS, "video perturbation": VIDEO_PERTURBATIONS,
        "text perturbation": TEXT_PERTURBATIONS, "scenario": SCENARIOS}
declared = {k: list(r.names()) for k, r in regs.items()}
heavy = sorted(m for m in ("torch", "cv2", "av", "open_clip", "scipy") if m in sys.modules)
static = {k: {n: r.static_info(n) for n in r.names()} for k, r in regs.items()}
loaded = {k: [(e.name, e.order) for e in r.load().entries()] for k, r in regs.items()}
info = {k: {e.name: e.info for e in r.entries()} for k, r in regs.items()}
print(json.dumps({"declared": declared, "loaded": loaded, "heavy": heavy, "static": static, "info": info}))
"""


def test_names_are_read_from_the_source_without_importing_the_entries():
    """Listing names, and a trial's spec and result, import no entry module (torch, OpenCV, PyAV stay out of `plan`,
    `status` and the driver), and listing gives the same names, in the same order, as importing every entry does."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", _NAMES_WITHOUT_IMPORTS], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1])
    got = json.loads(out.stdout)
    assert got["heavy"] == [], f"listing names imported {got['heavy']}"
    for kind, entries in got["loaded"].items():
        assert got["declared"][kind] == [n for n, _ in entries], kind
        assert [o for _, o in entries] == sorted(o for _, o in entries), kind
        for name, info in got["info"][kind].items():  # what the source says literally is what the import registers
            static = got["static"][kind][name]
            both = info.keys() & static.keys()
            assert {k: static[k] for k in both} == {k: info[k] for k in both}, (kind, name)
    # the tables and MLflow read each perturbation's level without importing it
    for kind in ("video perturbation", "text perturbation"):
        assert all(got["static"][kind][n]["level"] == got["info"][kind][n]["level"] for n in got["declared"][kind])
    assert got["declared"]["method"][:2] == ["source", "tent"] and len(got["declared"]["video perturbation"]) == 12


@pytest.fixture
def throwaway_package(tmp_path, monkeypatch):
    """make(package, kind, decorator, {module: source}) -> the Registry of a package written under tmp_path, whose
    modules register into it with `decorator`; importable until the test ends."""
    import importlib
    import sys

    made: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(package: str, kind: str, decorator: str, modules: dict[str, str]):
        folder = tmp_path / package
        folder.mkdir()
        (folder / "__init__.py").write_text(
            f"from workloads.registry import Registry\n"
            f"REGISTRY = Registry({kind!r}, package={package!r}, decorators=({decorator!r},))\n"
            f"{decorator} = REGISTRY.register\n")
        for module, source in modules.items():
            (folder / f"{module}.py").write_text(f"from {package} import {decorator}\n{source}")
        made.append(package)
        return importlib.import_module(package).REGISTRY

    yield make
    for m in [m for m in sys.modules if m.split(".")[0] in made]:
        del sys.modules[m]


def test_declarations_are_parsed_and_an_unreadable_module_is_imported(throwaway_package):
    """A package whose modules declare entries with literal decorators is listed without importing them; a module
    that registers in a way the parser cannot read (a computed name) is imported to list its names."""
    import sys

    widgets = throwaway_package("widgets_pkg", "widget", "register_widget", {
        "a_static": "@register_widget('spanner', order=2)\nclass Spanner: pass\n"
                    "@register_widget('hammer')\ndef hammer(): pass\n",
        "b_dynamic": "for _n, _o in (('saw', 1), ('drill', 3)):\n    register_widget(_n, order=_o)(object())\n",
        "c_later": "@register_widget('file', order=0)\nclass File: pass\n"})

    assert widgets.names() == ("file", "saw", "spanner", "drill", "hammer")
    assert "widgets_pkg.b_dynamic" in sys.modules          # read only by importing it
    assert "widgets_pkg.a_static" not in sys.modules and "widgets_pkg.c_later" not in sys.modules
    assert "spanner" in widgets and len(widgets) == 5 and "widgets_pkg.a_static" not in sys.modules
    assert widgets.lookup("spanner").name == "spanner"
    assert "widgets_pkg.a_static" in sys.modules and "widgets_pkg.c_later" not in sys.modules
    assert widgets.names() == ("file", "saw", "spanner", "drill", "hammer")   # the same after the import
    with pytest.raises(ValueError, match="widget 'file' registered twice: widgets_pkg.c_later declares it"):
        widgets.register("file")(object())
    with pytest.raises(ValueError, match="unknown widget 'nail'; known widgets: file, saw, spanner, drill, hammer"):
        widgets.lookup("nail")
    assert [n for n, _ in widgets.items()] == list(widgets.names())


def test_a_second_thread_waits_for_the_whole_list_of_names(throwaway_package):
    """Names are listed from any thread (the tracker's reads levels while the driver plans): a thread that asks while
    another is still reading the package gets every name, not the ones read so far."""
    import threading
    import time

    gadgets = throwaway_package("slow_pkg", "gadget", "register_gadget", {
        "a_first": "@register_gadget('lever', order=0)\nclass Lever: pass\n",
        "b_slow": "import time\ntime.sleep(0.5)\n"
                  "for _n in ('pulley', 'wedge'):\n    register_gadget(_n, order=1)(object())\n",
        "c_last": "@register_gadget('screw', order=2)\nclass Screw: pass\n"})

    first: list = []
    reader = threading.Thread(target=lambda: first.append(gadgets.names()))
    reader.start()
    time.sleep(0.2)   # the reader is importing b_slow: 'lever' is declared, the rest is not yet
    assert gadgets.names() == ("lever", "pulley", "wedge", "screw")
    reader.join()
    assert first == [("lever", "pulley", "wedge", "screw")]


def test_temporary_registration_and_errors():
    reg = Registry("widget")
    reg.register("b", order=1)(object())
    reg.register("a", order=0)(object())
    reg.register("c")(object())                       # unordered entries follow the ordered ones
    with reg.temporary("z", object(), order=0.5):
        assert reg.names() == ("a", "z", "b", "c")
    assert reg.names() == ("a", "b", "c")
    with pytest.raises(ValueError, match="widget 'a' registered twice"):
        reg.register("a")(object())
    with pytest.raises(ValueError, match="names are non-empty letters"):
        reg.register("a b")


MICRO = {
    "name": "throwaway",
    "datasets": {"synthetic": {"options": {"n_train": 96, "n_test": 40, "size": 32}}},
    "models": {"clip_model": "mlvp-micro"},
    "backbones": ["clip4clip"],
    "query_shift": {"datasets": ["synthetic"], "perturbations": ["gaussian_noise"], "severities": [1]},
}


def test_throwaway_method_and_perturbation_plan_and_run_with_no_other_edit(shared_cache, tmp_path):
    from workloads.render_cache import RenderCache, render_video
    from workloads.trial import TrialContext, run

    class ReversedSource(NoAdaptation):
        """Scores like Source, negated: the ranking of every query reversed (a method nobody would ship)."""

        def score(self, out, batch):
            return -out.scores

    def inverted(ctx, severity, rng):
        return 255 - ctx.sampled, {"faithful": True}

    with METHODS.temporary("reversed_source", ReversedSource, order=99), \
            VIDEO_PERTURBATIONS.temporary("colour_inversion", _info("colour_inversion", inverted), order=99,
                                          level="high"):
        grid = parse_grid({**MICRO, "methods": ["source", "reversed_source"],
                           "query_shift": {**MICRO["query_shift"], "perturbations": ["colour_inversion"]}}, "t.yaml")
        plan = build_plan(grid, Paths.make(tmp_path / "results", shared_cache))
        assert {t.method for t in plan.trials} == {"source", "reversed_source"}
        assert ("colour_inversion", 1) in plan.renders["synthetic"]

        cache = RenderCache(tmp_path / "render")
        ds = plan.datasets["synthetic"]
        from orchestrator.planning.render_sets import render_keys

        for pair in ds.test.pairs:
            statuses = render_video(pair.video_path, render_keys(plan, "synthetic", pair.video_id), cache)
            assert all(s["status"] == "ok" for s in statuses), statuses
        ctx = TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root,
                           dataset_options=ds.options)
        results = {(t.method, t.perturbation): run(t, ctx) for t in plan.trials}
    assert all(r.status == "ok" for r in results.values()), [r.error for r in results.values()]
    # the reversed ranking puts each ground truth at G + 1 - its Source rank
    for pert in ("clean", "colour_inversion"):
        src, rev = results[("source", pert)], results[("reversed_source", pert)]
        assert src.metrics["MnR"] + rev.metrics["MnR"] == pytest.approx(src.n_gallery + 1)
    # gone again after the block: the grid no longer accepts the names
    with pytest.raises(ValueError, match="unknown method or variant 'reversed_source'"):
        parse_grid({**MICRO, "methods": ["reversed_source"]}, "t.yaml")


def _info(name, fn):
    from workloads.perturbations.video._registry import PerturbationInfo

    return PerturbationInfo(name, fn, "high", False, None, "")


@dataclass
class EveryOtherConfig:
    datasets: list[str] = field(default_factory=list)


class EveryOther(Scenario):
    """A scenario nobody would ship: clean v2t cells of each dataset, one table counting its trials."""
    section = "every_other"
    Config = EveryOtherConfig
    prefix = "every_other"
    title = "Every other"

    def cells(self, grid):
        return [Cell(ds, "v2t", ds) for ds in self.config.datasets]

    def tables(self, grid, df, order, metric=None):
        counts = self.mine(df).groupby(["backbone", "row"]).size()
        cells = {(r, ("", "trials")): Value(float(n), "ok") for r, n in counts.items()}
        return [Table("every_other", "trials per row", list(counts.index), [("", "trials")], cells, digits=0)]


def test_throwaway_scenario_is_a_grid_section_plans_and_writes_its_tables(tmp_path, shared_cache):
    with SCENARIOS.temporary("every_other", EveryOther, order=99):
        EveryOther.name = "every_other"
        grid = parse_grid({**{k: v for k, v in MICRO.items() if k != "query_shift"}, "methods": ["source"],
                           "every_other": {"datasets": ["synthetic"]}}, "t.yaml")
        plan = build_plan(grid, Paths.make(tmp_path / "results", shared_cache))
        assert [(t.scenario, t.dataset, t.perturbation) for t in plan.trials] == [("every_other", "synthetic", "clean")]
        entry = {"key": plan.trials[0].key, "spec": plan.trials[0].to_dict(), "status": "ok",
                 "metrics": {"R1": 1.0}}
        files = write_tables([entry], tmp_path / "tables", grid)
        assert {f.name for f in files} == {"trials.parquet", "every_other.parquet", "every_other_tables.md"}
        assert pd.read_parquet(tmp_path / "tables" / "every_other.parquet")["trials"].tolist() == [1.0]
    with pytest.raises(ValueError, match="every_other: unknown key"):
        parse_grid({**MICRO, "methods": ["source"], "every_other": {}}, "t.yaml")
