"""The command line as a user drives it (subprocesses, real exit codes): submit, a failed trial, status, resume,
report, plan, --help, and bad input."""
import os
import subprocess
import sys

import pytest

from conftest import private_cache, write_micro_grid
from orchestrator.config.grid import load_grid
from orchestrator.record.ledger import TrialLedger
from orchestrator.planning.paths import Paths
from orchestrator.planning.plan import build_plan
from workloads.trial import render_key
from workloads.render_cache import RenderCache

def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"}, timeout=600)


def _commands() -> list[str]:
    import argparse

    from orchestrator.cli.main import _parser

    return list(next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices)


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_help_with_an_example(command):
    out = cli(command, "--help")
    assert out.returncode == 0 and "usage:" in out.stdout and "example" in out.stdout


def test_bad_grid_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndatasets: {synthetic: {}}\nbackbones: [clip4clip]\nmethods: [tnet]\n"
                   "query_shift: {datasets: [synthetic]}\n")
    out = cli("submit", str(bad), "--dry-run")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "methods[0]: unknown method or variant 'tnet'" in out.stderr and "tent" in out.stderr


@pytest.mark.e2e
def test_failed_trial_shows_in_status_and_resume_reruns_it(tmp_path, shared_cache):
    grid_file = write_micro_grid(tmp_path / "cli.yaml", name="cli", backbones="[clip4clip]", methods="[source]",
                                 perturbations="[impulse_noise]", severities="[2]")
    private_cache(tmp_path / "cache", shared_cache)   # its renders are its own: it corrupts one
    common = ["--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")]
    out = cli("submit", str(grid_file), *common, "--num-cpus", "2", "--no-dashboard")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 trials ok, 0 failed now" in out.stdout

    # flip a byte inside one cached clip of the impulse trial: the probe passes, the checksum does not
    paths = Paths.make(tmp_path / "results", tmp_path / "cache")
    plan = build_plan(load_grid(grid_file), paths)
    trial = next(t for t in plan.trials if t.perturbation == "impulse_noise")
    clip = RenderCache(paths.render).path(render_key(trial, plan.datasets["synthetic"].test.pairs[3].video_id))
    data = bytearray(clip.read_bytes())
    data[400] ^= 0xFF
    clip.write_bytes(bytes(data))
    out = cli("submit", str(grid_file), *common, "--num-cpus", "2", "--no-dashboard", "--rerun")
    assert out.returncode == 1  # a failed trial makes submit exit non-zero
    assert TrialLedger(paths.ledger).status(trial.key) == "failed"

    out = cli("status", str(grid_file), *common)
    assert out.returncode == 1   # a failed cell: status says so in its exit code too
    assert "1 done, 1 failed, 0 never run" in out.stdout and "render cache entry corrupt" in out.stdout
    assert "mlvp resume" in out.stdout

    out = cli("resume", str(grid_file), *common, "--num-cpus", "2", "--no-dashboard")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "1 rendered" in out.stdout and "1 trials ok, 0 failed now" in out.stdout
    assert TrialLedger(paths.ledger).status(trial.key) == "ok"
    out = cli("resume", str(grid_file), *common)
    assert out.returncode == 0 and "nothing to resume: 2/2 cells done" in out.stdout

    out = cli("report", str(grid_file), *common, "--metric", "hub_skewness")
    assert out.returncode == 0 and "k-occurrence skewness: synthetic, v2t, severity 2" in out.stdout
    assert "| clip4clip | source |" in out.stdout
    out = cli("plan", str(grid_file), *common)
    assert out.returncode == 0 and "2 trials (2 done, 0 failed, 0 new)" in out.stdout
