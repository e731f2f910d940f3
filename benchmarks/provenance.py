"""Where a benchmark's figures were measured, for the lines that record them (benchmarks/RESULTS.md asks for the
command, commit and machine of each figure): the CPU's model and the checkout's commit. Imported by the scripts of
this folder, which Python runs with the folder on its path."""
from __future__ import annotations

import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
