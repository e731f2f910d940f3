"""Typed options with ranges: one mechanism for grid fields, method options and dataset options.

An `Option` says what a value must be (kind, bounds or choices) and what it defaults to; `Option.check` returns the
value coerced to its kind or raises `OptionError` with one line naming the option, the rule and the bad value. Grids
check every option when they load (`plan` and `--dry-run` fail on `margin: 1.5`, not the trial after rendering).
"""
from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from typing import Any, Mapping

_KIND_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string"}

# An error message shows at most this many characters of a value: a grid's value can be a long string or a nested
# list many times the size of its file (YAML aliases), and its whole repr would be the message (issue #47 item 3;
# orchestrator/config/errors.py shows grid values with it too)
VALUE_CHARS = 200
_REPR = reprlib.Repr()   # bounded work as well as bounded text: a few items and levels of a container
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 8, 8, 8, 8
_REPR.maxstring = _REPR.maxother = VALUE_CHARS


def short_repr(value: Any) -> str:
    """`repr(value)` for an error message: whole when short, else its first ~200 characters and its size, without
    building the whole repr (every error message that shows a grid's value goes through here)."""
    if isinstance(value, str) and len(value) > VALUE_CHARS:
        return f"{value[:VALUE_CHARS]!r}... ({len(value):,} characters)"
    text = _REPR.repr(value)
    if len(text) > VALUE_CHARS:
        text = text[:VALUE_CHARS] + "..."
    if isinstance(value, (list, tuple, dict, set)) and (len(text) > VALUE_CHARS or "..." in text):
        text += f" ({len(value):,} item{'s' if len(value) != 1 else ''})"
    return text


class OptionError(ValueError):
    """An option value is invalid; the message is one line."""


@dataclass(frozen=True)
class Option:
    kind: type                     # bool, int, float or str
    default: Any = None            # None: resolved by the owner later (e.g. "depends on faithful")
    min: float | None = None       # inclusive bounds ...
    max: float | None = None
    above: float | None = None     # ... or exclusive lower bound (value > above)
    choices: tuple | None = None
    nullable: bool = True          # null means "the default"
    doc: str = ""

    def rule(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        lo = f"> {self.above:g}" if self.above is not None else f">= {self.min:g}" if self.min is not None else ""
        hi = f"<= {self.max:g}" if self.max is not None else ""
        bounds = " and ".join(b for b in (lo, hi) if b)
        return _KIND_NAMES.get(self.kind, self.kind.__name__) + (f" {bounds}" if bounds else "")

    def check(self, name: str, value: Any, owner: str = "") -> Any:
        """`value` coerced to `kind` (ints for floats, integral floats for ints, as JSON and YAML give them)."""
        where = f"{owner}: option {name!r}" if owner else f"{name}:"
        if value is None:
            if self.nullable:
                return None
            raise OptionError(f"{where} must be {self.rule()}, got null")
        kind = self.kind
        ok = True
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
                  and float(value) == int(value))
            value = int(value) if ok else value
        elif kind is float:
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            value = float(value) if ok else value
        elif kind is str:
            ok = isinstance(value, str)
        if ok and self.choices is not None:
            ok = value in self.choices
        if ok and kind in (int, float):
            ok = ((self.min is None or value >= self.min) and (self.max is None or value <= self.max)
                  and (self.above is None or value > self.above))
        if not ok:
            raise OptionError(f"{where} must be {self.rule()}, got {short_repr(value)}")
        return value


def check_options(owner: str, options: Mapping[str, Any], spec: Mapping[str, Option]) -> dict[str, Any]:
    """Validate `options` against `spec` and return every option with defaults filled in (None = resolve later).
    Unknown names are rejected with the allowed ones."""
    unknown = sorted(set(options) - set(spec))
    if unknown:
        raise OptionError(f"{owner}: unknown option(s) {', '.join(map(repr, unknown))}; allowed: "
                          f"{', '.join(sorted(spec))}")
    out = {name: opt.default for name, opt in spec.items()}
    for name, value in options.items():
        checked = spec[name].check(name, value, owner)
        if checked is not None:
            out[name] = checked
    return out


def describe(spec: Mapping[str, Option]) -> list[str]:
    """One line per option: name, rule, default, doc (for --help texts and docs)."""
    return [f"{name}: {opt.rule()}, default {opt.default!r}" + (f" ({opt.doc})" if opt.doc else "")
            for name, opt in spec.items()]
