"""The README stays true and short: two set-up commands (CI runs the test command verbatim; the quickstart command names
a grid that exists and validates), at most 200 lines, the add-a-method walk-through on tent.py as it is, and a map
that names every layer of the orchestrator."""
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
    assert "mlvp submit quickstart" in run and "-c constraints.txt" in run
    assert "pytest" in test and "-c constraints.txt" in test


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci.splitlines()


def test_quickstart_command_names_a_valid_grid():
    from orchestrator.config.shipped import resolve_grid

    name = re.search(r"submit (\S+)", readme_commands()[0]).group(1)
    assert load_grid(resolve_grid(name)).name == name


def test_readme_is_short_and_walks_through_adding_a_method():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    block = re.search(r"## Adding a method\n(.*?)\n## ", text, re.S).group(1)
    code = re.search(r"```python\n(.*?)```", block, re.S).group(1)
    tent = (ROOT / "workloads" / "methods" / "tent.py").read_text()
    for line in code.strip().splitlines():   # the example is tent.py's own code, line for line
        assert line.rstrip() in tent, line


def test_readme_maps_every_layer():
    text = (ROOT / "README.md").read_text()
    layers = sorted(p.name for p in (ROOT / "orchestrator").iterdir() if (p / "__init__.py").is_file())
    assert layers == ["cli", "config", "planning", "record", "report", "run", "stages"]
    for name in layers:
        assert f"`orchestrator/{name}/`" in text, name


def test_files_sharing_the_submission_fixture_run_in_one_worker():
    # each xdist worker builds its own session fixtures: every file that uses
    # tiny_results (a whole submission) must map to one scheduling scope (tests/conftest.py SAME_WORKER)
    from conftest import SAME_WORKER

    users = sorted(f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")
                   if re.search(r"def \w+\([^)]*\btiny_results\b", p.read_text()))
    assert len(users) >= 2
    assert len({SAME_WORKER.get(f, f) for f in users}) == 1, (users, SAME_WORKER)
