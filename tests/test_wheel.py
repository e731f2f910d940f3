"""The wheel works outside the repository (issue #30 item 2).

Builds the wheel and the sdist of this checkout, installs the wheel into a fresh virtualenv with the constraints and
no package index, and runs `mlvp --version`, `mlvp --help` and `mlvp plan quickstart` from a folder outside the
checkout, with nothing of the checkout on the import path: the shipped grids and model configs must come from the
wheel's package data.

The fresh virtualenv reaches the dependencies already installed in this test environment through a `.pth` file
instead of downloading them again (a full install of torch, Ray and MLflow takes 3-9 minutes here, most of the suite's
budget); `--no-index` then makes pip prove that the wheel's requirements are met by the versions of
constraints.txt. `.ci/run` installs the same dependency ranges from the index into its own fresh virtualenv.
"""
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration


def _run(cmd, cwd, env, timeout=600):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pytest.importorskip("build", reason="the wheel test builds with `build` (pip install -e '.[test]')")
    work = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLVP_TRIAL_HOOK", "VIRTUAL_ENV")}
    # --no-isolation: build with this environment's setuptools instead of fetching one into a throwaway env
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(work / "dist"), str(REPO)], work, env)
    wheels = list((work / "dist").glob("*.whl"))
    sdists = list((work / "dist").glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list((work / "dist").iterdir())

    venv = work / "venv"
    # without its own pip and setuptools: a fresh venv's older setuptools would shadow the one torch requires; pip
    # comes from this environment through the .pth file and installs into the new venv's prefix
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work,
                     env).strip())
    (site / "test_environment_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(python), "-m", "pip", "install", "-q", "--no-index", "-c", str(REPO / "constraints.txt"),
          str(wheels[0])], work, env)
    outside = work / "elsewhere"
    outside.mkdir()
    return {"wheel": wheels[0], "sdist": sdists[0], "mlvp": venv / "bin" / "mlvp", "python": python,
            "cwd": outside, "env": env}


def test_the_wheel_carries_the_shipped_grids_and_model_configs(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    shipped = sorted(p.name for p in (REPO / "grids").glob("*.yaml"))
    # the checkout's top-level grids/ is installed as the package orchestrator.grids (pyproject.toml's package-dir)
    in_wheel = sorted(Path(n).name for n in names if n.startswith("orchestrator/grids/") and n.endswith(".yaml"))
    assert shipped and in_wheel == shipped
    configs = sorted(p.name for p in (REPO / "workloads" / "backbones" / "model_configs").glob("*.json"))
    assert configs and all(f"workloads/backbones/model_configs/{c}" in names for c in configs)
    assert not any(n.startswith(("tests/", "benchmarks/", ".venv/", "grids/")) for n in names)


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    where = _run([str(installed["python"]), "-c", "import orchestrator, workloads; "
                  "print(orchestrator.__file__); print(workloads.__file__)"], installed["cwd"], installed["env"])
    assert str(REPO) not in where and where.count("site-packages") == 2, where


def test_mlvp_version_and_help_outside_the_checkout(installed):
    version = _run([str(installed["mlvp"]), "--version"], installed["cwd"], installed["env"])
    for name in ("mlvp 0.1.0", "python 3.", "torch ", "ray ", "mlflow "):
        assert name in version, version
    helped = _run([str(installed["mlvp"]), "--help"], installed["cwd"], installed["env"])
    for verb in ("submit", "resume", "plan", "status", "report"):
        assert verb in helped, helped


def test_mlvp_plan_quickstart_outside_the_checkout_reads_the_shipped_grid(installed):
    out = _run([str(installed["mlvp"]), "plan", "quickstart"], installed["cwd"], installed["env"])
    assert "grid quickstart" in out and "24 trials" in out, out
    # plan writes nothing, not even the results folder
    assert list(installed["cwd"].iterdir()) == []
