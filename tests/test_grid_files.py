"""Grid files as a user meets them (issue #47 items 1, 3 and 6).

The shipped grids live in the checkout's top-level grids/ and are installed as the package `orchestrator.grids`:
the README's own command, `python -m orchestrator submit grids/full_mlvp.yaml --dry-run`, runs from the root of a
fresh clone; a path that names a shipped grid but is not there says how to run it; pyproject.toml's package list
covers every package folder (tests/test_wheel.py checks the wheel itself).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from orchestrator.config.errors import GridError
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
