"""What the README and docs/*.md say of the code and of `plan`, checked against them (docs/notes/ is history and
is not checked):

- every function, class or constant the docs name in a file of this repository exists there. The forms the docs use:
  `` `path.py` `name` `` (also unquoted `path.py`, and a list `` `a`, `b` and `c` ``), `` `name` in path.py `` and
  `` `package.module.name` ``; a dotted name (`TrialSpec.key`) is looked up in its class. Paths outside this
  repository's packages (the authors' `losses.py`) are not checked; a path inside them that does not exist is a stale
  claim too.
- the README's trial count for `plan full_mlvp` is the one `plan` prints.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workloads", "orchestrator", "tests", "benchmarks")
NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
PATH = r"(?:[A-Za-z0-9_]+/)*[A-Za-z0-9_]+\.py"
# `path.py` `name`, path.py `name`, then more names: ", `b`", " and `c`"
PATH_THEN_NAMES = re.compile(rf"`?({PATH})`?\s+`({NAME})`((?:\s*(?:,|,?\s+and)\s+`{NAME}`)*)")
MORE_NAMES = re.compile(rf"`({NAME})`")
NAME_IN_PATH = re.compile(rf"`({NAME})`\s+in\s+`?({PATH})`?")
DOTTED = re.compile(rf"`((?:{'|'.join(PACKAGES)})\.{NAME})`")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def references(text: str) -> list[tuple[str, str]]:
    """(file path, name) for every reference to a name in a file of this repository's packages that `text` makes."""
    text = re.sub(r"\s+", " ", text)   # a reference may break across lines
    out = []
    for m in PATH_THEN_NAMES.finditer(text):
        names = [m.group(2), *MORE_NAMES.findall(m.group(3))]
        out += [(m.group(1), n) for n in names]
    out += [(m.group(2), m.group(1)) for m in NAME_IN_PATH.finditer(text)]
    for m in DOTTED.finditer(text):
        parts = m.group(1).split(".")
        for i in range(len(parts) - 1, 0, -1):   # the longest prefix that is a module
            module = "/".join(parts[:i])
            for candidate in (f"{module}.py", f"{module}/__init__.py"):
                if (ROOT / candidate).is_file():
                    out.append((candidate, ".".join(parts[i:])))
                    break
            else:
                continue
            break
        else:
            out.append(("/".join(parts[:-1]) + ".py", parts[-1]))   # no such module: reported as a missing file
    return [(path, name) for path, name in out if path.split("/")[0] in PACKAGES]


@functools.lru_cache(maxsize=None)
def defined(path: str) -> dict[str, set[str]]:
    """The names a module defines at its top level (functions, classes, assignments, imports), each with the names
    its class body defines (methods, properties, attributes)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    names: dict[str, set[str]] = {}

    def inner(body) -> set[str]:
        return {t.id for s in body for t in _targets(s)} | {s.name for s in body if isinstance(
            s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}

    def walk(body) -> None:
        for s in body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.setdefault(s.name, set())
            elif isinstance(s, ast.ClassDef):
                names.setdefault(s.name, set()).update(inner(s.body))
            elif isinstance(s, (ast.Import, ast.ImportFrom)):
                for a in s.names:
                    names.setdefault((a.asname or a.name).split(".")[0], set())
            elif isinstance(s, (ast.If, ast.Try, ast.With)):
                walk(s.body)
                for extra in (getattr(s, "orelse", []), getattr(s, "finalbody", []),
                              *(h.body for h in getattr(s, "handlers", []))):
                    walk(extra)
            for t in _targets(s):
                names.setdefault(t.id, set())

    walk(tree.body)
    return names


def _targets(s) -> list[ast.Name]:
    if isinstance(s, ast.Assign):
        return [t for target in s.targets for t in ast.walk(target) if isinstance(t, ast.Name)]
    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
        return [s.target]
    return []


def problem(path: str, name: str) -> str | None:
    """Why `name` is not in `path` (None: it is)."""
    if not (ROOT / path).is_file():
        return f"{path} does not exist"
    top, *rest = name.split(".")
    names = defined(path)
    if top not in names:
        return f"{path} defines no {top}"
    if rest and rest[0] not in names[top]:
        return f"{path}: {top} has no {rest[0]}"
    return None


def test_the_checker_finds_each_form_and_a_planted_stale_reference():
    text = ("see `workloads/trial.py` `encode_source`, and workloads/metrics.py `uniformity`,\n`modality_gap` and "
            "`tie_rule`; `RENDER_POINTS` in orchestrator/planning/cost_model.py; `workloads.trial.run`; "
            "`workloads/spec.py` `TrialSpec.key`; the authors' `losses.py` `observation`; "
            "`workloads/methods/titan.py` `titan_source_note`; `workloads.methods.titan.titan_source_note`; "
            "`orchestrator/nowhere.py` `f`; `workloads/spec.py` `TrialSpec.no_such_field`")
    refs = references(text)
    assert refs == [("workloads/trial.py", "encode_source"), ("workloads/metrics.py", "uniformity"),
                    ("workloads/metrics.py", "modality_gap"), ("workloads/metrics.py", "tie_rule"),
                    ("workloads/spec.py", "TrialSpec.key"), ("workloads/methods/titan.py", "titan_source_note"),
                    ("orchestrator/nowhere.py", "f"), ("workloads/spec.py", "TrialSpec.no_such_field"),
                    ("orchestrator/planning/cost_model.py", "RENDER_POINTS"), ("workloads/trial.py", "run"),
                    ("workloads/methods/titan.py", "titan_source_note")]
    found = {ref: problem(*ref) for ref in refs}
    assert [ref for ref, p in found.items() if p] == [
        ("workloads/methods/titan.py", "titan_source_note"), ("orchestrator/nowhere.py", "f"),
        ("workloads/spec.py", "TrialSpec.no_such_field")]


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_function_the_docs_name_exists_where_they_say(doc):
    stale = [f"{path} `{name}`: {why}" for path, name in references(doc.read_text(encoding="utf-8"))
             if (why := problem(path, name))]
    assert not stale, stale


def test_the_readme_counts_the_trials_plan_full_mlvp_prints(tmp_path):
    """README: "`mlvp plan full_mlvp` sizes the matrix (N trials; M where WordNet's data ... is not installed)": N or
    M, whichever this machine's case is, is what `plan full_mlvp` says, with no data on disk (the README's case:
    before the download). CI installs WordNet (docs/testing.md), so there N is checked."""
    import io

    from orchestrator.config.shipped import shipped_grids
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import plan_for_sizing
    from orchestrator.run.console import make_console, print_plan

    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    claims = re.findall(r"`mlvp plan full_mlvp` sizes the matrix \(([\d,]+) trials; ([\d,]+) where WordNet's data",
                        readme)
    assert len(claims) == 1, "the README's sentence on `mlvp plan full_mlvp` changed: update this test"
    plan = plan_for_sizing(shipped_grids()["full_mlvp"], Paths.make(tmp_path / "results", tmp_path / "cache"))
    without_wordnet = any("WordNet data not found" in note for note in plan.notes)
    claim = claims[0][1] if without_wordnet else claims[0][0]
    out = io.StringIO()
    print_plan(plan, {t.key: "missing" for t in plan.trials}, list(plan.trials), make_console(out))
    printed = re.search(r"^grid full_mlvp \(.*?\): (\d+) trials", out.getvalue(), re.M)
    assert printed, out.getvalue()[:500]
    assert int(claim.replace(",", "")) == int(printed.group(1)) == len(plan.trials)
