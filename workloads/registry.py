"""One registry type for everything a grid names (datasets, backbones, methods), as timm and open_clip do it."""
from __future__ import annotations

from typing import Callable, Sequence


class Registry(dict):
    """name -> class, filled by the `register(name)` class decorator. `lookup` fails on unknown names with the
    list of known ones. The decorator sets the class attribute `attr` to the registered name."""

    def __init__(self, kind: str, attr: str = "name"):
        super().__init__()
        self.kind, self.attr = kind, attr

    def register(self, name: str) -> Callable[[type], type]:
        def wrap(cls: type) -> type:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            setattr(cls, self.attr, name)
            self[name] = cls
            return cls

        return wrap

    def lookup(self, name: str, order: Sequence[str] | None = None) -> type:
        if name not in self:
            known = ", ".join(order if order is not None else sorted(self))
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}s: {known}")
        return self[name]
