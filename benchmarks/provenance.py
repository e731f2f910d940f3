"""Where a benchmark's figures were measured, for the lines that record them (benchmarks/RESULTS.md asks for the
command, commit and machine of each figure): the CPU's model and the checkout's commit. Imported by the scripts of
this folder, which Python runs with the folder on its path."""
from __future__ import annotations

import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
