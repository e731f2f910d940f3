"""The orchestrator's layers (docs/architecture.md, "Layers"): imports point one way, from cli down to config, and
no module imports itself back through others. Function-level imports count as imports here: a module that imports
another inside a function depends on it all the same. The layers are also an import-linter contract in
pyproject.toml (`lint-imports`), run here; the cycle check below needs no tool beyond the standard library."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "workloads")
LAYERS = ["cli", "run", "stages", "report", "record", "planning", "config"]   # top to bottom
SIBLINGS = {"stages": "report", "report": "stages"}                          # one floor, independent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of the package it imports, anywhere in its source (function bodies included)."""
    files = {module_name(p): p for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[:len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                # `from a.b import c` imports module a.b.c when there is one (as import-linter reads it), else a.b
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for t in targets:
                while t and t not in files:   # a name inside a module: the module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package):
    found = cycles(import_graph(package))
    assert not found, "import cycles (function-level imports included):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_layers_point_down():
    """Every import between two layers goes down the list (stages and report never import each other)."""
    wrong = []
    for mod, deps in import_graph("orchestrator").items():
        for dep in deps:
            a, b = layer(mod), layer(dep)
            if a is None or b is None or a == b:
                continue
            if SIBLINGS.get(a) == b or LAYERS.index(b) < LAYERS.index(a):
                wrong.append(f"{mod} -> {dep}")
    assert not wrong, "imports against the layers (docs/architecture.md):\n" + "\n".join(sorted(wrong))


def test_the_finder_sees_function_level_imports(tmp_path, monkeypatch):
    """The graph is built from every import statement, so a cycle closed only inside a function is found."""
    global ROOT
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert cycles(import_graph("pkg")) == [["pkg.a", "pkg.b"]]


def test_import_linter_contract():
    """pyproject.toml's [tool.importlinter] layers contract, checked by import-linter itself."""
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    proc = subprocess.run([str(exe), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_no_product_module_imports_test_code():
    """Production code never imports the tests' modules (fault injection reaches trials through the trial hook)."""
    tests = {p.stem for p in (ROOT / "tests").glob("*.py")}
    bad = [f"{m} -> {d}" for pkg in PACKAGES for m, deps in import_graph(pkg).items() for d in deps
           if d.split(".")[0] in tests]
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                bad += [f"{path.relative_to(ROOT)} -> {n}" for n in names if n.split(".")[0] in tests | {"tests"}]
    assert not bad, bad
