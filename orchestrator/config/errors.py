"""How a bad grid is reported: `GridError` (one line: where, what, what is allowed), the helpers that write those
lines (`short_repr`, from workloads/options.py: a value as an error message shows it, at most ~200 characters of
it), and `MissingPath`, a path the grid names that is not on disk, collected instead of raised when a grid is only
being sized (`load_grid(..., missing=[...])`)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any
import difflib

# the one helper that shows a value in an error message (defined with the options, the lowest layer that needs it)
from workloads.options import VALUE_CHARS, short_repr

__all__ = ["GridError", "MissingPath", "VALUE_CHARS", "check_choice", "check_names", "did_you_mean", "short_repr"]


class GridError(ValueError):
    """A grid file is invalid; the message is one line: where, what, and what is allowed."""


def did_you_mean(word: str, candidates) -> str:
    if not isinstance(word, (str, int, float)) or len(str(word)) > VALUE_CHARS:   # no name looks like it
        return ""
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_names(where: str, values: list, allowed: list, what: str) -> None:
    """Every value is one of `allowed` and none repeats; else a one-line GridError with a did-you-mean."""
    for i, v in enumerate(values):
        if v not in allowed:
            raise GridError(f"{where}[{i}]: unknown {what} {short_repr(v)}{did_you_mean(v, allowed)}; allowed: "
                            f"{', '.join(map(str, allowed))}")
    counts = Counter(values)   # one pass: a long list is not counted once per item
    dupes = sorted((v for v, n in counts.items() if n > 1), key=str)
    if dupes:
        raise GridError(f"{where}: duplicate {what} {short_repr(dupes[0])}")


def check_choice(where: str, value: Any, allowed: list) -> None:
    if value not in allowed:
        raise GridError(f"{where}: {short_repr(value)} is not allowed{did_you_mean(value, allowed)}; allowed: "
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


