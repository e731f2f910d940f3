"""Every maintained benchmark runs (benchmarks/__init__.py MAINTAINED): `python -m benchmarks.NAME --smoke` from the
repository root exits 0 and prints its figures' lines; and every module of benchmarks/ is either maintained or a shared
helper, so none lands without a smoke run. The smoke runs that start Ray or take more than ~20 s are in the
integration tier (docs/testing.md)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import benchmarks
from benchmarks import HELPERS, MAINTAINED

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
# benchmarks whose smoke run a file of their own tests, with more to check than their figures' lines
SMOKED_ELSEWHERE = {"render_bench": "tests/test_benchmarks_smoke.py"}
# render_bench imports the authors' perturbation code from a checkout of theirs (not a package) by its path: the only
# sys.path lines allowed, and only there
LOADS_THE_AUTHORS_CODE = {"render_bench"}


def _params() -> list:
    # each smoke run its own xdist group: one file's group would run them all, minutes, on one worker
    return [pytest.param(b, id=b.name, marks=[pytest.mark.xdist_group(f"benchmarks.{b.name}"),
                                              *([pytest.mark.integration] if b.integration else [])])
            for b in MAINTAINED]


@pytest.fixture
def scratch():
    """A short temporary folder, removed after the test: Ray puts its sockets under TMPDIR, and their paths must stay
    under 108 bytes (pytest's tmp_path is too deep)."""
    folder = Path(tempfile.mkdtemp(prefix="mlvp-bench-", dir="/tmp" if Path("/tmp").is_dir() else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("bench", _params())
def test_a_maintained_benchmark_runs_at_its_smoke_size_and_prints_its_figures(bench, scratch):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "TMPDIR": str(scratch)}   # what a smoke run writes in a temporary folder goes there, removed after it
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", f"benchmarks.{bench.name}", "--smoke"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:   # what it printed until then says where it stood
        pytest.fail(f"no end after {e.timeout:.0f} s\n{(e.stdout or b'')[-3000:]!r}\n{(e.stderr or b'')[-3000:]!r}")
    seconds = time.perf_counter() - t0
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode} after {seconds:.0f} s\n{out[-3000:]}\n{done.stderr[-3000:]}"
    for pattern in bench.figures:
        assert re.search(pattern, out, re.M), f"no line matching {pattern!r} in its output:\n{out[-3000:]}"


def test_every_benchmark_module_is_maintained_or_a_helper():
    names = {p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "__init__"}
    listed = [b.name for b in MAINTAINED]
    assert len(listed) == len(set(listed)), "a benchmark listed twice in MAINTAINED"
    assert not set(listed) & set(HELPERS)
    unlisted = names - set(listed) - set(HELPERS) - set(SMOKED_ELSEWHERE)
    assert not unlisted, (f"benchmarks/{sorted(unlisted)[0]}.py is neither in benchmarks/__init__.py MAINTAINED "
                          "(with a --smoke size) nor in HELPERS; a one-off investigation goes to docs/notes/ instead")
    missing = (set(listed) | set(HELPERS)) - names
    assert not missing, f"listed but not in benchmarks/: {sorted(missing)}"
    assert Path(benchmarks.__file__).parent == BENCHMARKS


def test_no_benchmark_edits_the_import_path():
    """benchmarks/ is a package run with `python -m`: its modules import the project and each other normally."""
    hacks = [f"{p.name}:{i}" for p in sorted(BENCHMARKS.glob("*.py")) if p.stem not in LOADS_THE_AUTHORS_CODE
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"sys\.path\b", line)]
    assert not hacks, f"sys.path edited in {', '.join(hacks)}"


def test_the_provenance_helper_runs_on_the_standard_library_alone():
    """`.ci/run` runs `python3.11 -m benchmarks.provenance` with the system Python, before the virtualenv exists:
    run here with `-S -E` (no site-packages, no PYTHON* variables), it must still print the CPU's model."""
    done = subprocess.run([sys.executable, "-S", "-E", "-m", "benchmarks.provenance"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "\n" not in done.stdout.strip()
