"""The helpers every benchmark shares, imported as `from benchmarks import provenance` (benchmarks/ is a package run
as `python -m benchmarks.NAME` from the repository root): where a figure was measured (the CPU's model with its
widest vector extension, the machine, the checkout's commit: benchmarks/RESULTS.md asks for them beside each figure),
a timer, the repository's paths, and the line a `--smoke` run prints for the part it skips.

Standard library only: `.ci/run` runs `python3.11 -m benchmarks.provenance` (it prints the CPU's model) with the
system Python before the virtualenv exists.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux) with its widest vector extension, "AMD EPYC (AVX-512)" or
    "(AVX2)": the dev machines' CPUs all read "AMD EPYC", and the one with AVX2 only renders about 2x slower
    (benchmarks/RESULTS.md, "Per-type pricing"); else the platform's processor string."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    return f"{fields['model name']} ({simd})" if simd else fields["model name"]


def machine() -> str:
    """One line naming the machine a figure comes from: CPU model, CPUs, Python and the load average now."""
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}{load}"


def commit(mark_uncommitted: bool = False) -> str:
    """The checkout's short commit ("unknown" outside a git checkout); with `mark_uncommitted`, "+uncommitted" when
    tracked files differ from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = mark_uncommitted and git("status", "--porcelain", "--untracked-files=no")
    return head + ("+uncommitted" if dirty else "")


class Timer:
    """Wall and CPU (process) seconds of a block: `with timed() as t: ...; t.wall, t.cpu`."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0


@contextmanager
def timed() -> Iterator[Timer]:
    t = Timer()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        yield t
    finally:
        t.wall = time.perf_counter() - wall0
        t.cpu = time.process_time() - cpu0


def smoke_argv(argv: list[str] | None, smoke: list[str]) -> list[str]:
    """The command line with a benchmark's `--smoke` sizes put first when it has `--smoke` (the options given after
    them still win: argparse keeps an option's last value); `argv` None reads sys.argv."""
    args = list(sys.argv[1:] if argv is None else argv)
    return [*smoke, *args] if "--smoke" in args else args


def smoke_skips(part: str, why: str) -> None:
    """What a `--smoke` run leaves out, said on stdout (tests/test_benchmarks.py runs every benchmark's smoke size):
    e.g. `smoke_skips("the CUDA run", "needs a GPU")`."""
    print(f"smoke: skipped {part} ({why})", flush=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.provenance` prints the CPU's model (`.ci/run`'s first line); `--all` the machine line
    and the commit too."""
    args = sys.argv[1:] if argv is None else argv
    print(cpu_model())
    if "--all" in args:
        print(machine())
        print(commit(mark_uncommitted=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
