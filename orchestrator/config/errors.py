"""How a bad grid is reported: `GridError` (one line: where, what, what is allowed), the helpers that write those
lines, and `MissingPath`, a path the grid names that is not on disk, collected instead of raised when a grid is only
being sized (`load_grid(..., missing=[...])`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
import difflib


class GridError(ValueError):
    """A grid file is invalid; the message is one line: where, what, and what is allowed."""


def did_you_mean(word: str, candidates) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_names(where: str, values: list, allowed: list, what: str) -> None:
    """Every value is one of `allowed` and none repeats; else a one-line GridError with a did-you-mean."""
    for i, v in enumerate(values):
        if v not in allowed:
            raise GridError(f"{where}[{i}]: unknown {what} {v!r}{did_you_mean(v, allowed)}; allowed: "
                            f"{', '.join(map(str, allowed))}")
    dupes = sorted({v for v in values if values.count(v) > 1}, key=str)
    if dupes:
        raise GridError(f"{where}: duplicate {what} {dupes[0]!r}")


def check_choice(where: str, value: Any, allowed: list) -> None:
    if value not in allowed:
        raise GridError(f"{where}: {value!r} is not allowed{did_you_mean(value, allowed)}; allowed: "
                        f"{', '.join(map(str, allowed))}")


@dataclass(frozen=True)
class MissingPath:
    """A path the grid names that is not on disk (or an unset variable in it), collected instead of raised when the
    grid is loaded to be sized before the data is there (`load_grid(..., missing=[])`, orchestrator/planning/plan.py).
    """

    key: str      # the grid key, e.g. datasets.msrvtt.root
    path: str     # as written after expansion (an unset ${VAR} is kept)
    fix: str      # what to set or put there

    def line(self) -> str:
        return f"{self.key}: {self.path} ({self.fix})"


