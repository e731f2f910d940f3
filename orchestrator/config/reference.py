"""The grid reference (docs/grid_reference.md), generated from the schema itself: every section's dataclass, each
key with its type, default, allowed range and the comment written beside it in the source. A test regenerates it
and fails when the file is stale, so the reference cannot drift from what `load_grid` accepts.

    python -m orchestrator.config.reference > docs/grid_reference.md
"""
from __future__ import annotations

import dataclasses
import inspect
import io
import sys
import tokenize
import typing
from typing import Any

from orchestrator.config.grid import MAX_GRID_BYTES, MAX_GRID_VALUES, scenario_classes
from orchestrator.config.shipped import MAX_NAME
from orchestrator.config.schema import GridSpec

HIDDEN = {"source", "scenarios"}   # set by the loader, not written in a grid


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment beside it (same line) or the comment lines right above it, from the class source."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[str, str] = {}
    names = {f.name for f in dataclasses.fields(cls)}
    for i, line in enumerate(lines, start=1):
        stripped = line.strip()
        name = stripped.split(":", 1)[0]
        if name not in names or not line.startswith("    ") or line.startswith("     "):
            continue
        above, j = [], i - 1
        while j in comments and lines[j - 1].strip().startswith("#"):
            above.insert(0, comments[j])
            j -= 1
        out[name] = " ".join(above + ([comments[i]] if i in comments else []))
    return out


def _type(tp: Any) -> str:
    if isinstance(tp, str):
        return tp
    origin = typing.get_origin(tp)
    if origin is None:
        return "mapping" if dataclasses.is_dataclass(tp) else getattr(tp, "__name__", str(tp))
    args = [a for a in typing.get_args(tp)]
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"mapping {_type(args[0])} -> {_type(args[1])}"
    names = [_type(a) for a in args if a is not type(None)]
    return " or ".join(names) + (" or null" if type(None) in args else "")


def _yaml(value: Any) -> str:
    """A default as it is written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return repr(value).replace("'", "")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return "null" if f.default is None else f"`{_yaml(f.default)}`"
    if f.default_factory is not dataclasses.MISSING:   # type: ignore[misc]
        value = f.default_factory()                      # type: ignore[misc]
        return "see below" if dataclasses.is_dataclass(value) else f"`{_yaml(value)}`"
    return "**required**"


def _rule(f: dataclasses.Field) -> str:
    rule = f.metadata.get("rule") or {}
    parts = [f"{'>=' if k == 'min' else '<=' if k == 'max' else '>'} {v}" for k, v in rule.items()
             if k in ("min", "max", "above")]
    if "choices" in rule:
        parts.append("one of " + ", ".join(map(str, rule["choices"])))
    return "; ".join(parts)


def section(cls: type, key: str, doc: str | None = None) -> list[str]:
    """One section's table, and the tables of the sections nested in it."""
    hints = typing.get_type_hints(cls)
    notes = field_comments(cls)
    head = f"## `{key}`" if key else "## Top level"
    text = doc if doc is not None else inspect.cleandoc(cls.__doc__ or "") if cls.__doc__ and \
        not cls.__doc__.startswith(cls.__name__ + "(") else ""
    out = [head, ""] + ([" ".join(text.split()), ""] if text else [])
    out += ["| key | type | default | allowed | what it is |", "|---|---|---|---|---|"]
    nested = []
    for f in dataclasses.fields(cls):
        if f.name in HIDDEN:
            continue
        tp = hints[f.name]
        out.append(f"| `{f.name}` | {_type(tp)} | {_default(f)} | {_rule(f)} | {notes.get(f.name, '')} |")
        where = f"{key}.{f.name}" if key else f.name
        if typing.get_origin(tp) is dict:
            if dataclasses.is_dataclass(typing.get_args(tp)[1]):
                nested.append((typing.get_args(tp)[1], f"{where}.<name>"))
        else:
            nested += [(a, where) for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
    out.append("")
    for sub, where in nested:
        out += section(sub, where)
    return out


def grid_reference() -> str:
    """The whole reference as Markdown."""
    out = ["# Grid reference", "",
           "Every key a grid file may hold, generated from the schema (orchestrator/config/schema.py and the scenario "
           "sections of orchestrator/config/scenarios) by `python -m orchestrator.config.reference`; "
           "tests/test_grid_reference.py fails when this file is stale. A grid is checked when it loads: an unknown "
           "key, a wrong type or a value out of range fails in one line naming the key. Paths may name environment "
           "variables, `${VAR}` or `${VAR:-default}`. A grid file is at most "
           f"{MAX_GRID_BYTES / 2**20:g} MiB and {MAX_GRID_VALUES:,} values with its YAML aliases (`*name`) expanded; "
           f"its `name` at most {MAX_NAME} characters (a folder of the results).", ""]
    out += section(GridSpec, "")
    for cls in scenario_classes().values():
        doc = " ".join((cls.__doc__ or "").split()) or None
        out += section(cls.Config, cls.section, doc.split(". ")[0] + "." if doc else None)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(grid_reference())
