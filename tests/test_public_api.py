"""The product uses the libraries it is built on only through their public APIs (README, "Public APIs only"): no import
of a private module of Ray, MLflow, open_clip or torch (`ray._private`, `ray._raylet`, `mlflow.store.*`, a path
with a `_name` part), no SQL on MLflow's tables (`sqlalchemy`), and no `._name` attribute of their objects.

Read from the source of orchestrator/ and workloads/ (function bodies included). A `._name` access counts as a
library's private attribute when the name is not one the project defines itself (its own `_helpers`, `self._state`);
ALLOWED lists what is truly unavoidable, each with why."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("ray", "mlflow", "open_clip", "torch", "torchvision", "sqlalchemy")
FORBIDDEN_MODULES = ("mlflow.store", "sqlalchemy")
# (file, name) -> why it cannot be avoided; empty: nothing is
ALLOWED: dict[tuple[str, str], str] = {}


def product_files() -> list[Path]:
    return sorted(p for pkg in ("orchestrator", "workloads") for p in (ROOT / pkg).rglob("*.py"))


def own_private_names(files: list[Path]) -> set[str]:
    """Every `_name` the project defines: functions, classes, assignments, attributes set on objects, arguments."""
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return {n for n in names if n.startswith("_")}


def private_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in LIBRARIES and (any(p.startswith("_") for p in parts[1:])
                                      or any(module == f or module.startswith(f + ".") for f in FORBIDDEN_MODULES))


def findings() -> list[str]:
    files = product_files()
    ours = own_private_names(files)
    found = []
    for path in files:
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{rel}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                found += [f"{where}: import {a.name}" for a in node.names if private_module(a.name)]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if private_module(node.module):
                    found.append(f"{where}: from {node.module} import ...")
                elif node.module.split(".")[0] in LIBRARIES:
                    found += [f"{where}: from {node.module} import {a.name}" for a in node.names
                              if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if node.attr not in ours and (rel, node.attr) not in ALLOWED:
                    found.append(f"{where}: ._{node.attr[1:]} (not a name of this project: a library's private)")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "getattr", "setattr", "hasattr") and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.startswith("_") \
                        and not name.value.startswith("__") and name.value not in ours \
                        and (rel, name.value) not in ALLOWED:
                    found.append(f"{where}: {node.func.id}(..., {name.value!r})")
    return found


def test_no_private_api_of_the_libraries():
    found = findings()
    assert not found, "private APIs used (make them public-API calls, or allow-list them with why):\n" + \
        "\n".join(found)


def test_the_scan_finds_what_it_looks_for(tmp_path, monkeypatch):
    """The scan is not vacuous: each kind of private use is found in a planted file."""
    pkg = tmp_path / "orchestrator"
    pkg.mkdir()
    (tmp_path / "workloads").mkdir()
    (pkg / "bad.py").write_text(
        "import ray._private.worker\nfrom mlflow.store.tracking import dbmodels\nfrom sqlalchemy import insert\n"
        "from open_clip.factory import _rescan_model_configs\n"
        "def f(client, trial):\n    client._tracking_client.store\n    getattr(trial, '_stopped_trials')\n"
        "class Mine:\n    def __init__(self):\n        self._mine = 1\n    def g(self):\n        return self._mine\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    found = "\n".join(findings())
    for what in ("ray._private.worker", "mlflow.store.tracking", "sqlalchemy", "_rescan_model_configs",
                 "_tracking_client", "'_stopped_trials'"):
        assert what in found, (what, found)
    assert "_mine" not in found   # the project's own private names are its own business
