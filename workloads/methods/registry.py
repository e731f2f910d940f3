"""Method registry: grid names -> TTAMethod classes."""
from __future__ import annotations

from typing import Callable

METHODS: dict[str, type] = {}


def register_method(name: str) -> Callable[[type], type]:
    def wrap(cls: type) -> type:
        if name in METHODS:
            raise ValueError(f"method {name!r} registered twice")
        cls.name = name
        METHODS[name] = cls
        return cls

    return wrap
