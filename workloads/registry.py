"""One registry type for everything a grid names (datasets, backbones, methods, perturbations, scenarios), as timm's
`@register_model` + `list_models()` do it.

A registry is the only list of its names. Entries register themselves with a decorator in their own module, so
adding an entry is one new file and nothing else. The order of `names()` (the order of the paper's tables) is carried
by the registration: `order=` when given, else the order of registration after every ordered entry.

Names are read without importing the entries: the registry parses the source of its package's modules for its
decorator (`@register_method("tent", order=1)`: a literal name and order), and imports an entry's module only when
the entry itself is asked for (`lookup`, `entry`, `info`). Listing and checking names (a grid's validation, `plan`,
`status`) thus never imports torch, OpenCV or NLTK, which cost seconds per command. A module that registers in a
way the parser cannot read (a name or order that is not a literal, a call that is not a decorator) is imported
when the names are first read, so nothing is missed; tests/test_registries.py checks that the parsed names equal
the imported ones for every registry.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import itertools
import math
import pkgutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

_sequence = itertools.count()


@dataclass(frozen=True)
class Entry:
    """One registered object with the metadata given at registration."""

    name: str
    obj: Any
    order: float
    sequence: int
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Declaration:
    """An entry as its module's source declares it (read without importing the module)."""

    name: str
    module: str
    order: float
    sequence: int
    info: dict[str, Any] = field(default_factory=dict)  # the decorator's literal keywords, but `order`


class Registry(dict):
    """name -> registered object, filled by the `register(name, order=..., **info)` decorator.

    - `names()`: every name in table order; `lookup(name)`: the object, or a ValueError listing the known names.
    - `entry(name).info`: the keyword metadata given at registration (a perturbation's level and assets, ...).
    - `package`: the package whose modules register entries; `decorators`: the names its modules register with
      (`register_method`, or `register` for a module-level wrapper), found by parsing the modules' source.
    - Classes get the attribute `attr` set to their registered name.
    """

    def __init__(self, kind: str, attr: str = "name", package: str | None = None,
                 decorators: tuple[str, ...] = ("register",)):
        super().__init__()
        self.kind, self.attr, self.package, self.decorators = kind, attr, package, tuple(decorators)
        self._entries: dict[str, Entry] = {}
        self._declared: dict[str, Declaration] = {}
        self._scanned = self._loaded = package is None
        self._scanning = False
        # one scan at a time: another thread (the tracker's, a Ray Data actor's) waits for a whole list of names;
        # re-entrant, because a module imported during the scan may register or list names
        self._scan_lock = threading.RLock()

    # -- registration -------------------------------------------------------------------------------------------
    def register(self, name: str, *, order: float | None = None, **info: Any) -> Callable[[Any], Any]:
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name):
            raise ValueError(f"{self.kind} names are non-empty letters, digits, '_' or '-'; got {name!r}")

        def wrap(obj: Any) -> Any:
            self.add(name, obj, order=order, **info)
            return obj

        return wrap

    def add(self, name: str, obj: Any, *, order: float | None = None, **info: Any) -> Entry:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        declared = self._declared.get(name)
        # a declared name is registered by its own module, while that module runs (it is in sys.modules then)
        if declared is not None and declared.module not in sys.modules:
            raise ValueError(f"{self.kind} {name!r} registered twice: {declared.module} declares it")
        if isinstance(obj, type):
            setattr(obj, self.attr, name)
        entry = Entry(name, obj, math.inf if order is None else float(order), next(_sequence), dict(info))
        self._entries[name] = entry
        dict.__setitem__(self, name, obj)
        return entry

    def remove(self, name: str) -> None:
        self._entries.pop(name)
        dict.__delitem__(self, name)

    @contextlib.contextmanager
    def temporary(self, name: str, obj: Any, **kwargs: Any) -> Iterator[Entry]:
        """Register `obj` for the duration of a `with` block (tests register throwaway entries this way)."""
        self._declarations()
        entry = self.add(name, obj, **kwargs)
        try:
            yield entry
        finally:
            self.remove(name)

    # -- declarations: the names, read from the package's source -----------------------------------------------
    def _declarations(self) -> dict[str, Declaration]:
        """name -> Declaration of every entry the package's modules declare (parsed once, in module order)."""
        if self._scanned:
            return self._declared
        with self._scan_lock:
            # another thread scanned while this one waited; or a module imported below asks (this thread, re-entered:
            # it sees what is declared so far)
            if self._scanned or self._scanning:
                return self._declared
            self._scanning = True
            try:
                self._scan()
            except BaseException:   # a module failed to import: the next call scans again, from nothing
                self._declared.clear()
                raise
            finally:
                self._scanning = False
            self._scanned = True
        return self._declared

    def _scan(self) -> None:
        """Fill `_declared` from the package's modules, in name order; import the modules the parser cannot read."""
        for module, path in _package_modules(self.package):
            found = _declared_in(path, self.decorators)
            if found is None:  # not readable from the source: import it, its registrations run
                importlib.import_module(module)
                continue
            for name, order, info in found:
                if name in self._declared:
                    raise ValueError(f"{self.kind} {name!r} declared twice: in {self._declared[name].module} and "
                                     f"{module}")
                self._declared[name] = Declaration(name, module, order, next(_sequence), info)

    def _place(self, name: str) -> tuple[float, int]:
        """(order, sequence): where `name` sits in names()."""
        declared = self._declarations().get(name)
        if declared is not None:
            return declared.order, declared.sequence
        entry = self._entries[name]
        return entry.order, entry.sequence

    def _import(self, name: str) -> Entry:
        """The entry `name` (known), its module imported when it was only declared."""
        if name not in self._entries:
            module = self._declarations()[name].module
            importlib.import_module(module)
            if name not in self._entries:
                raise ValueError(f"{self.kind} {name!r}: {module} declares it but did not register it")
        return self._entries[name]

    # -- reading ------------------------------------------------------------------------------------------------
    def load(self) -> "Registry":
        """Import every module that declares an entry (once), so every entry has registered."""
        if not self._loaded:
            self._loaded = True
            for name in self.names():
                self._import(name)
        return self

    def names(self) -> tuple[str, ...]:
        known = set(self._declarations()) | set(self._entries)
        return tuple(sorted(known, key=self._place))

    def entries(self) -> list[Entry]:
        return [self._import(n) for n in self.names()]

    def entry(self, name: str) -> Entry:
        self._check(name)
        return self._import(name)

    def info(self, name: str) -> dict[str, Any]:
        return self.entry(name).info

    def static_info(self, name: str) -> dict[str, Any]:
        """The keywords of `name`'s registration that its source gives as literals (a perturbation's `level`), read
        without importing its module; an entry registered otherwise (at run time, in a loop) gives its `info`. The
        tables and MLflow read levels this way, so writing them imports no perturbation code."""
        self._check(name)
        declared = self._declarations().get(name)
        return dict(declared.info) if declared is not None else dict(self._entries[name].info)

    def _check(self, name: str, order: Sequence[str] | None = None) -> None:
        if name not in self._declarations() and name not in self._entries:
            known = ", ".join(order if order is not None else self.names())
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}s: {known}")

    def lookup(self, name: str, order: Sequence[str] | None = None) -> Any:
        self._check(name, order)
        return self._import(name).obj

    # dict reads answer from the declarations, so `name in REGISTRY`, len() and iteration import nothing
    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._declarations() or name in self._entries)

    def __iter__(self):
        return iter(self.names())

    def __getitem__(self, name: str) -> Any:
        return self.lookup(name)

    def __len__(self) -> int:
        return len(self.names())

    def keys(self):  # type: ignore[override]
        return list(self.names())

    def items(self):  # type: ignore[override]
        return [(e.name, e.obj) for e in self.entries()]

    def values(self):  # type: ignore[override]
        return [e.obj for e in self.entries()]


def _package_modules(package: str | None) -> list[tuple[str, Path]]:
    """(module name, source file) of each public module of `package`, in name order, found without importing it."""
    if package is None:
        return []
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"registry package {package!r} not found")
    modules = []
    for mod in sorted(pkgutil.iter_modules(spec.submodule_search_locations), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        folder = Path(mod.module_finder.path)  # type: ignore[union-attr]
        path = folder / mod.name / "__init__.py" if mod.ispkg else folder / f"{mod.name}.py"
        modules.append((f"{package}.{mod.name}", path))
    return modules


def _declared_in(path: Path, decorators: tuple[str, ...]) -> list[tuple[str, float, dict[str, Any]]] | None:
    """[(name, order, literal keywords)] of the entries `path` declares with `@<decorator>("name", order=<number>,
    ...)`, or None when it registers in a way only its import reveals (a computed name or order, a call that is not
    a decorator, no readable source)."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    as_decorator: set[int] = set()
    found: list[tuple[str, float, dict[str, Any]]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            as_decorator.update(id(d) for d in node.decorator_list)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _called(n) in decorators]
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        if id(call) not in as_decorator or not call.args or not isinstance(call.args[0], ast.Constant) \
                or not isinstance(call.args[0].value, str):
            return None
        order_node = next((k.value for k in call.keywords if k.arg == "order"), None)
        order = math.inf if order_node is None else _literal(order_node)
        if isinstance(order, bool) or not isinstance(order, (int, float)):
            return None
        info = {k.arg: _literal(k.value) for k in call.keywords if k.arg not in (None, "order")}
        found.append((call.args[0].value, float(order), {k: v for k, v in info.items() if v is not _NOT_LITERAL}))
    return found


_NOT_LITERAL = object()


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _NOT_LITERAL


def _called(call: ast.Call) -> str | None:
    """The called name: `register_method` of `register_method(...)` and of `registry.register_method(...)`."""
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
