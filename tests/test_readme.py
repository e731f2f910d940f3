"""The README's two set-up commands stay true: CI runs the test command verbatim, and the quickstart command names
a grid that exists and validates."""
import re
from pathlib import Path

from orchestrator.config.grid import load_grid

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start\n(.*?)\n## ", text, re.S).group(1)
    return [line.strip() for line in re.findall(r"```(?:bash|sh)?\n(.*?)```", block, re.S)]


def test_readme_has_exactly_two_setup_commands():
    cmds = readme_commands()
    assert len(cmds) == 2, cmds
    run, test = cmds
    assert "python -m orchestrator submit orchestrator/grids/quickstart.yaml" in run
    assert "pytest" in test


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()


def test_quickstart_command_names_a_valid_grid():
    grid = re.search(r"submit (\S+\.yaml)", readme_commands()[0]).group(1)
    load_grid(ROOT / grid)


def test_files_sharing_the_submission_fixture_run_in_one_worker():
    # the test command's `--dist loadfile` gives each worker its own session fixtures: every file that uses
    # tiny_results (a whole submission) must map to one scheduling scope (tests/conftest.py SAME_WORKER)
    from conftest import SAME_WORKER

    users = sorted(f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")
                   if re.search(r"def \w+\([^)]*\btiny_results\b", p.read_text()))
    assert len(users) >= 2
    assert len({SAME_WORKER.get(f, f) for f in users}) == 1, (users, SAME_WORKER)
