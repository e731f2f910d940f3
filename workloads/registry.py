"""One registry type for everything a grid names (datasets, backbones, methods, perturbations, scenarios), as timm's
`@register_model` + `list_models()` do it.

A registry is the only list of its names. Entries register themselves with a decorator in their own module; the
registry imports every module of its package the first time it is asked for its names, so adding an entry is one new
file and nothing else. The order of `names()` (the order of the paper's tables) is carried by the registration:
`order=` when given, else the order of registration after every ordered entry.
"""
from __future__ import annotations

import contextlib
import importlib
import itertools
import math
import pkgutil
from dataclasses import dataclass, field
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


class Registry(dict):
    """name -> registered object, filled by the `register(name, order=..., **info)` decorator.

    - `names()`: every name in table order; `lookup(name)`: the object, or a ValueError listing the known names.
    - `entry(name).info`: the keyword metadata given at registration (a perturbation's level and assets, ...).
    - `package`: modules of this package are imported on first use, so their registrations run.
    - Classes get the attribute `attr` set to their registered name.
    """

    def __init__(self, kind: str, attr: str = "name", package: str | None = None):
        super().__init__()
        self.kind, self.attr, self.package = kind, attr, package
        self._entries: dict[str, Entry] = {}
        self._loaded = package is None

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
        self.load()
        entry = self.add(name, obj, **kwargs)
        try:
            yield entry
        finally:
            self.remove(name)

    # -- reading ------------------------------------------------------------------------------------------------
    def load(self) -> "Registry":
        """Import every module of the package (once), so every entry has registered."""
        if not self._loaded:
            self._loaded = True
            pkg = importlib.import_module(self.package)
            for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
                if not mod.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{mod.name}")
        return self

    def names(self) -> tuple[str, ...]:
        self.load()
        return tuple(e.name for e in sorted(self._entries.values(), key=lambda e: (e.order, e.sequence)))

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def entry(self, name: str) -> Entry:
        self.lookup(name)
        return self._entries[name]

    def info(self, name: str) -> dict[str, Any]:
        return self.entry(name).info

    def lookup(self, name: str, order: Sequence[str] | None = None) -> Any:
        self.load()
        if name not in self._entries:
            known = ", ".join(order if order is not None else self.names())
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}s: {known}")
        return self._entries[name].obj

    # dict reads go through the lazy load too, so `name in REGISTRY` and iteration see every entry
    def __contains__(self, name: object) -> bool:
        self.load()
        return dict.__contains__(self, name)

    def __iter__(self):
        return iter(self.names())

    def __getitem__(self, name: str) -> Any:
        return self.lookup(name)

    def __len__(self) -> int:
        self.load()
        return dict.__len__(self)

    def keys(self):  # type: ignore[override]
        return list(self.names())

    def items(self):  # type: ignore[override]
        return [(n, self._entries[n].obj) for n in self.names()]

    def values(self):  # type: ignore[override]
        return [self._entries[n].obj for n in self.names()]
