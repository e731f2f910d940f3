"""Grid files as a user meets them (issue #47 items 1, 3 and 6).

The shipped grids live in the checkout's top-level grids/ and are installed as the package `orchestrator.grids`:
the README's own command, `python -m orchestrator submit grids/full_mlvp.yaml --dry-run`, runs from the root of a
fresh clone; a path that names a shipped grid but is not there says how to run it; pyproject.toml's package list
covers every package folder (tests/test_wheel.py checks the wheel itself).

A grid file is read within bounds (orchestrator/config/grid.py): a YAML alias bomb (nine nested anchors of nine
copies: 387 million values from 500 bytes) is refused in one line before anything is expanded, with the loading's
peak memory measured in a process of its own; no error message shows more than ~200 characters of a value.

`plan` (and `submit`'s plan) warns in one line above 100,000 trials, shortens long axis lists and prints notes that
differ only in their dataset as one line.
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import write_micro_grid
from orchestrator.config.errors import VALUE_CHARS, GridError
from orchestrator.config.grid import MAX_GRID_BYTES, MAX_GRID_VALUES, load_grid
from orchestrator.config.shipped import resolve_grid, shipped_folder, shipped_grids

REPO = Path(__file__).resolve().parents[1]


# -- item 1: the shipped grids in grids/ -------------------------------------------------------------------------
def test_the_shipped_grids_are_the_checkouts_top_level_grids_folder():
    assert shipped_folder() == REPO / "grids"
    assert not (REPO / "orchestrator" / "grids").exists()   # one copy in the repository
    grids = shipped_grids()
    assert {"quickstart", "full_mlvp"} <= set(grids) and all(p.parent == REPO / "grids" for p in grids.values())


def test_pyproject_lists_every_package_folder_and_maps_grids():
    """pyproject.toml lists its packages (automatic discovery does not combine with the package-dir mapping of
    grids/): a package folder added later and not listed would be missing from the wheel."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.relative_to(REPO).parts) for top in ("orchestrator", "workloads")
               for p in [REPO / top, *(REPO / top).rglob("*")]
               if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")}
    assert set(tool["packages"]) == folders | {"orchestrator.grids"}
    assert tool["package-dir"] == {"orchestrator.grids": "grids"}
    assert tool["package-data"]["orchestrator.grids"] == ["*.yaml"]


def test_mlvp_grids_lists_the_shipped_grids_and_their_folder(capsys):
    from orchestrator.__main__ import main

    assert main(["grids"]) == 0
    out = capsys.readouterr().out
    assert "quickstart" in out and "full_mlvp" in out and f"(files in {REPO / 'grids'};" in out
    assert main(["grids", "--path", "quickstart"]) == 0
    assert capsys.readouterr().out.strip() == str(REPO / "grids" / "quickstart.yaml")


@pytest.mark.parametrize("arg", ["grids/quickstart.yaml", "orchestrator/grids/quickstart.yaml"])
def test_a_missing_path_that_names_a_shipped_grid_says_how_to_run_it(arg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # another folder than the clone's root: grids/quickstart.yaml is not here
    with pytest.raises(GridError) as e:
        resolve_grid(arg)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{arg}: grid file not found; ")
    assert "'quickstart' is a grid shipped with mlvp" in msg and "`mlvp submit quickstart`" in msg
    assert msg.endswith(str(REPO / "grids" / "quickstart.yaml"))


def test_from_the_root_the_shipped_path_works_and_the_old_one_is_named(monkeypatch):
    monkeypatch.chdir(REPO)
    assert resolve_grid("grids/full_mlvp.yaml") == "grids/full_mlvp.yaml"
    with pytest.raises(GridError, match=r"its file, grids/full_mlvp\.yaml$"):
        resolve_grid("orchestrator/grids/full_mlvp.yaml")
    with pytest.raises(GridError, match=r"^my_grid\.yaml: grid file not found; shipped grids: "):
        resolve_grid("my_grid.yaml")   # not a shipped name: the list of names, as before


@pytest.mark.slow   # two CLI processes and a clone: ~10 s
def test_the_readme_command_runs_from_the_root_of_a_fresh_clone(tmp_path):
    """`python -m orchestrator submit grids/full_mlvp.yaml --dry-run` and `plan grids/full_mlvp.yaml`, literally, in a
    `git clone` of this branch's HEAD (what is committed: commit before running this test), with no data on disk:
    both size the grid (exit 0) and write nothing into the clone."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout (it clones this one)")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    # this repository's tests and the conftest's environment, with the clone's code instead of this checkout's
    env = {k: v for k, v in os.environ.items() if k not in ("MLVP_DATA", "MLVP_WEIGHTS", "MLVP_CACHE_DIR")}
    env["PYTHONPATH"] = os.pathsep.join([str(clone), str(clone / "tests")])
    for args, last in ((["submit", "grids/full_mlvp.yaml", "--dry-run"], "nothing started"),
                       (["plan", "grids/full_mlvp.yaml"], "trials")):
        done = subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert "grid file not found" not in done.stdout + done.stderr
        assert done.stdout.startswith("grid full_mlvp (grids/full_mlvp.yaml): "), done.stdout[:300]
        assert last in done.stdout.splitlines()[-1]
        status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=clone, capture_output=True,
                                text=True, check=True).stdout
        assert [s for s in status.splitlines() if "__pycache__" not in s] == [], status


# -- item 3: YAML read within bounds -----------------------------------------------------------------------------
def grid_with(path: Path, key: str, raw: str) -> Path:
    """conftest's micro grid (valid) with `key` (dotted) set to `raw`, YAML text written as is (flow style)."""
    data = yaml.safe_load(write_micro_grid(path).read_text())
    *parents, last = key.split(".")
    node = data
    for k in parents:
        node = node.setdefault(k, {})
    node[last] = "RAW_VALUE_HERE"
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=10**9).replace("RAW_VALUE_HERE", raw))
    return path


def alias_bomb(levels: int = 9, copies: int = 9) -> str:
    """A flow list whose last item is `levels` nested anchors of `copies` aliases each: copies**levels values."""
    items = [f"&a0 [{', '.join(['lol'] * copies)}]"]
    items += [f"&a{i} [{', '.join([f'*a{i - 1}'] * copies)}]" for i in range(1, levels)]
    return f"[{', '.join(items)}]"


# In a process of its own: the refusal, and the peak of the memory Python allocated while loading (tracemalloc, from
# the call to its end); a timeout, not a hang, when the loading expands the bomb
LOAD_AND_MEASURE = textwrap.dedent("""
    import sys, tracemalloc
    from orchestrator.config.errors import GridError
    from orchestrator.config.grid import load_grid
    tracemalloc.start()
    try:
        load_grid(sys.argv[1])
        print("LOADED")
    except GridError as err:
        print("ERROR", err)
    print("PEAK", tracemalloc.get_traced_memory()[1])
""")


@pytest.mark.parametrize("field", ["name", "description", "methods", "query_shift.perturbations"])
def test_an_alias_bomb_is_refused_in_one_line_before_it_is_expanded(field, tmp_path):
    bomb = grid_with(tmp_path / "bomb.yaml", field, alias_bomb())   # 9**9 = 387,420,489 values once expanded
    assert bomb.stat().st_size < 1000
    done = subprocess.run([sys.executable, "-c", LOAD_AND_MEASURE, str(bomb)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    error, peak = done.stdout.splitlines()
    assert error == (f"ERROR {bomb}: YAML aliases (*name) expand it to more than {MAX_GRID_VALUES:,} values, the "
                     "limit of a grid file (the shipped grids hold a few hundred): write the repeated parts out, or "
                     "nest fewer anchors")
    assert int(peak.split()[1]) < 2_000_000, peak   # bytes: the composed nodes, never their expansion


@pytest.mark.parametrize("field, where", [("description", "description: expected a string, got [['lol', "),
                                          ("methods", "methods[0]: expected a string, got ['lol', ")])
def test_a_smaller_bomb_within_the_limit_gives_a_short_message(field, where, tmp_path):
    """5 levels of 9 (59,049 values, under the limit): read, and refused by the schema in a message that shows
    ~200 characters of the value, not its 300 KB repr."""
    bomb = grid_with(tmp_path / "small.yaml", field, alias_bomb(levels=5))
    with pytest.raises(GridError) as e:
        load_grid(bomb)
    msg = str(e.value)
    assert msg.startswith(f"{bomb}: {where}"), msg
    assert "\n" not in msg and len(msg) < len(str(bomb)) + 150 + VALUE_CHARS, msg


def test_a_recursive_alias_deep_nesting_and_a_huge_file_are_refused_in_one_line(tmp_path):
    cases = {"cycle.yaml": ("methods", "&m [source, *m]", "a YAML alias inside its own anchor"),
             "deep.yaml": ("description", "[" * 3000 + "]" * 3000, "nested too deeply"),
             "many.yaml": ("seeds", "[" + ", ".join(["0"] * (MAX_GRID_VALUES + 1)) + "]",
                           f"it holds more than {MAX_GRID_VALUES:,} values"),
             "huge.yaml": ("description", "x" * MAX_GRID_BYTES, "more than a grid file may be")}
    for name, (key, raw, expected) in cases.items():
        path = grid_with(tmp_path / name, key, raw)
        with pytest.raises(GridError) as e:
            load_grid(path)
        msg = str(e.value)
        assert msg.startswith(f"{path}: ") and expected in msg and "\n" not in msg and len(msg) < 400, msg


LONG = "y" * 5000


@pytest.mark.parametrize("key, raw, where", [
    ("name", f"[{LONG}]", "name: expected a string, got ['yyy"),
    ("name", LONG, "name: 'yyy"),              # a valid name's characters, too long for a folder name
    ("description", f"{{a: [{LONG}]}}", "description: expected a string, got {'a': ['yyy"),
    ("methods", f"[source, {LONG}]", "methods[1]: unknown method or variant 'yyy"),
    ("runtime.cpus_per_trial", LONG, "runtime.cpus_per_trial: expected a number, got 'yyy"),
    ("models.clip_model", LONG, "models.clip_model: unknown open_clip config 'yyy"),
    ("models.finetune.precision", LONG, "models.finetune.precision: must be one of"),
    ("method_options", f"{{tent: {{lr: {LONG}}}}}", "lr"),
])
def test_a_long_bad_value_gives_a_short_error(key, raw, where, tmp_path):
    with pytest.raises(GridError) as e:
        load_grid(grid_with(tmp_path / "long.yaml", key, raw))
    msg = str(e.value)
    assert where in msg, msg
    assert "\n" not in msg and msg.count("y") <= VALUE_CHARS + 20 and len(msg) < 1000, msg


# -- item 6: plan at scale -----------------------------------------------------------------------------------------
def _plan_text(grid_file: Path, tmp_path: Path, *extra: str) -> str:
    """`mlvp plan GRID` in this process, its output (plan writes nothing)."""
    from orchestrator.__main__ import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["plan", str(grid_file), "--results-dir", str(tmp_path / "results"), "--cache-dir",
                     str(tmp_path / "cache"), *extra]) == 0
    return buf.getvalue()


def _seeded_grid(tmp_path: Path, seeds: int) -> Path:
    """conftest's micro grid (2 backbones x 2 methods x (4 perturbed + 1 clean) cells = 20 trials) at `seeds` seeds."""
    return grid_with(tmp_path / "seeded.yaml", "seeds", f"[{', '.join(map(str, range(seeds)))}]")


def test_plan_warns_in_one_line_above_the_threshold_and_not_at_it(tmp_path, monkeypatch):
    from orchestrator.planning import describe

    grid = _seeded_grid(tmp_path, 3)   # 60 trials: the threshold planted at 59 and at 60
    monkeypatch.setattr(describe, "LARGE_PLAN", 59)
    out = _plan_text(grid, tmp_path)
    warnings = [line for line in out.splitlines() if "warning" in line]
    assert len(warnings) == 1, out
    assert warnings[0].startswith("  warning: a large grid: 60 trials (3 seeds x 20), more than 59; estimated ")
    assert "GPU-hours" in warnings[0] and warnings[0].endswith("check its axes")
    assert out.splitlines()[1] == warnings[0]   # right under the grid's line, above everything else
    monkeypatch.setattr(describe, "LARGE_PLAN", 60)
    assert "warning" not in _plan_text(grid, tmp_path)


def test_submit_dry_run_warns_too(tmp_path, monkeypatch):
    from orchestrator.__main__ import main
    from orchestrator.planning import describe

    monkeypatch.setattr(describe, "LARGE_PLAN", 19)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["submit", str(write_micro_grid(tmp_path / "g.yaml")), "--dry-run", "--results-dir",
                     str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "  warning: a large grid: 20 trials, more than 19; estimated " in buf.getvalue()


def test_the_default_threshold_is_100000():
    from orchestrator.planning.describe import LARGE_PLAN

    assert LARGE_PLAN == 100_000


def test_long_axis_lists_are_shortened(tmp_path):
    from orchestrator.planning.describe import short_list

    assert short_list(range(1000)) == "0, 1, 2, ... 999 (1,000)"
    assert short_list([5, 7]) == "5, 7" and short_list(range(8)) == "0, 1, 2, 3, 4, 5, 6, 7"
    out = _plan_text(_seeded_grid(tmp_path, 50), tmp_path)
    assert "  seeds: 0, 1, 2, ... 49 (50) (every trial and render set at each)" in out.splitlines()


def test_notes_that_differ_only_in_their_dataset_are_one_line():
    from orchestrator.planning.describe import grouped_notes

    datasets = ["msrvtt", "msvd", "msrvtt_9k"]
    notes = [f"{d} t2v formal: unavailable, not run: no models [datasets.{d}.assets.text_precomputed.formal]"
             for d in datasets]
    notes += ["titan on msvd: its head is off", "titan on msrvtt: its head is off", "titan on msvd: its head is off",
              "msrvtt->msvd: a pair note", "a note about nothing", "msrvtt_9k t2v casual: unavailable"]
    assert grouped_notes(notes, datasets) == [
        "t2v formal on 3 datasets (msrvtt, msvd, msrvtt_9k): unavailable, not run: no models "
        "[datasets.<dataset>.assets.text_precomputed.formal]",
        "titan on 2 datasets (msvd, msrvtt): its head is off",
        "msrvtt->msvd: a pair note", "a note about nothing", "msrvtt_9k t2v casual: unavailable"]


def test_plan_full_mlvp_groups_its_unavailable_notes(tmp_path, monkeypatch):
    """Without data or text models, full_mlvp's sentence-level text types (and, without WordNet, the word-level ones)
    are unavailable on all five datasets: one line per type, not one per type and dataset."""
    for var in ("MLVP_DATA", "MLVP_WEIGHTS"):
        monkeypatch.delenv(var, raising=False)
    out = _plan_text(REPO / "grids" / "full_mlvp.yaml", tmp_path)
    unavailable = [line for line in out.splitlines() if "unavailable" in line]
    assert len(unavailable) >= 5 and len({line.split(" on ")[0] for line in unavailable}) == len(unavailable)
    datasets = "on 5 datasets (msrvtt, activitynet, lsmdc, msvd, didemo): unavailable, not run: "
    assert all(line.startswith("  note: t2v ") and datasets in line for line in unavailable), unavailable
    assert not any(f"{d} t2v" in out for d in ("msrvtt", "activitynet", "lsmdc", "msvd", "didemo"))
