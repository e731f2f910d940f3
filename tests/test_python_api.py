"""`orchestrator.submit` from Python (README, "From Python"), run as the README shows it on a micro grid: in a process
that initialised Ray itself, the submission joins that Ray and leaves it running and usable
(orchestrator/run/submit.py `Submission` stops only what it started); in a process without Ray, it starts one and
stops it at the end."""
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import write_micro_grid

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## From Python\n(.*?)\n## ", text, re.S).group(1)
    return re.search(r"```python\n(.*?)```", block, re.S).group(1)


def test_the_readme_example_submits_the_shipped_quickstart_with_a_callers_ray():
    code = readme_example()
    assert 'orchestrator.submit("quickstart", results_dir="results")' in code
    assert "ray.init(" in code and "assert ray.is_initialized()" in code


def test_unknown_options_are_named_with_the_known_ones(tmp_path):
    import orchestrator

    with pytest.raises(TypeError, match=r"unknown option\(s\) result_dir; the options are .*results_dir"):
        orchestrator.submit("quickstart", result_dir=str(tmp_path))


@pytest.mark.e2e
def test_submit_joins_the_callers_ray_and_leaves_it_running(tmp_path, shared_cache):
    grid = write_micro_grid(tmp_path / "api.yaml", name="api", backbones="[clip4clip]", methods="[source, tent]",
                            perturbations="[gaussian_noise]", severities="[5]")
    results = tmp_path / "results"
    options = f"results_dir={str(results)!r}, cache_dir={str(shared_cache)!r}, dashboard=False"
    example = (readme_example()
               .replace('"quickstart"', repr(str(grid)))
               .replace('results_dir="results"', options)
               .replace("ray.init(num_cpus=2)", "ray.init(num_cpus=2, include_dashboard=False)"))
    script = example + textwrap.dedent(f"""
        gcs = ray.get_runtime_context().gcs_address
        print("REPORT", report.ok, report.failed, len(report.plan.trials))
        print("STILL", ray.get(ray.remote(lambda: 41 + 1).remote()))   # the caller's Ray still runs tasks
        ray.shutdown()
        # without a Ray of the caller's, the submission starts its own and stops it
        again = orchestrator.submit({str(grid)!r}, {options}, rerun=True)
        print("AGAIN", again.ok, again.failed, ray.is_initialized())
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ok, failed, trials = map(int, re.search(r"^REPORT (\d+) (\d+) (\d+)$", run.stdout, re.M).groups())
    assert (ok, failed) == (trials, 0) and trials == 4   # clean and gaussian_noise 5, Source and Tent
    assert re.search(r"^STILL 42$", run.stdout, re.M)
    assert re.search(r"^AGAIN 4 0 False$", run.stdout, re.M), run.stdout[-3000:]
    assert (results / "api" / "trials.parquet").is_file()


@pytest.mark.e2e
def test_a_submission_from_python_holds_the_results_folders_lock_until_it_closes(tmp_path, shared_cache, worker_ray):
    """The Python API is a driver like `mlvp submit`: from `start` to `close` a CLI driver of the same results folder
    stops in one line naming it (orchestrator/record/results_lock.py); after `close` the folder is free."""
    from orchestrator.run.options import SubmitOptions
    from orchestrator.run.submit import Submission

    grid = write_micro_grid(tmp_path / "held.yaml", name="held", backbones="[clip4clip]", methods="[source]",
                            perturbations="[gaussian_noise]", severities="[5]")
    results = tmp_path / "results"
    sync = [sys.executable, "-m", "orchestrator", "sync", str(grid), "--results-dir", str(results),
            "--cache-dir", str(shared_cache)]
    with Submission(str(grid), SubmitOptions(results_dir=str(results), cache_dir=str(shared_cache),
                                             dashboard=False)) as sub:
        sub.start()
        held = subprocess.run(sync, capture_output=True, text=True, timeout=300)
        assert held.returncode == 2 and held.stderr.strip().count("\n") == 0, held.stderr
        assert f"`orchestrator.submit {grid}`" in held.stderr and "results folder" in held.stderr
    free = subprocess.run(sync, capture_output=True, text=True, timeout=300)
    assert free.returncode == 0, free.stdout[-2000:] + free.stderr[-2000:]
