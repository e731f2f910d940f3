"""Atomic file writes: readers see the old file or the whole new one, never a torn write, and a crash leaves no
half-written file under the final name. Every cache, ledger and checkpoint write goes through here.

A write that fails removes its temporary file. A process that dies mid-write cannot (kill -9, or a memory-mapped
write on a full disk, which ends the process with SIGBUS): its temporary file stays, so `sweep_temporaries` removes
the stale ones when the next driver starts (orchestrator/cli/commands.py)."""
from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Iterator

# `atomic_path`'s temporary names: ".NAME.PID.tmp" and ".NAME.PID.tmp.SUFFIX"
TEMPORARY = re.compile(r"^\..+\.(\d+)\.tmp(\.[A-Za-z0-9]+)?$")
# a temporary file changed this recently may belong to a writer on another host (a shared cache), whose pid this
# host cannot check: the sweep leaves it
SWEEP_MARGIN_S = 120.0


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling of `path` to write; on success it replaces `path` in one rename, on error it is
    removed. The temporary name is hidden (leading dot) and unique per process; `suffix` ends it (writers that pick
    a format by extension, e.g. ".mp4")."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding, newline="")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):   # another user's process; an impossible pid is nobody's
        return True
    return True


def sweep_temporaries(roots, started: float | None = None) -> tuple[int, int]:
    """Remove the stale temporary files `atomic_path` left under `roots` (folders; missing ones skipped): last changed
    over SWEEP_MARGIN_S before `started` (default: now), and named by a pid that is not a live process on this host.
    Returns (files removed, bytes freed). Only files are removed, and only names of `atomic_path`'s pattern. Linked
    folders are followed once each (a cache whose folders link to another's: tests/conftest.py private_cache)."""
    before = (time.time() if started is None else started) - SWEEP_MARGIN_S
    removed = freed = 0
    stack = [os.fspath(r) for r in roots]
    linked: set[str] = set()
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            try:
                if entry.is_dir():
                    if entry.is_symlink():
                        real = os.path.realpath(entry.path)
                        if real in linked:
                            continue
                        linked.add(real)
                    stack.append(entry.path)
                    continue
                if not name.startswith(".") or ".tmp" not in name:   # most names: no regex, no stat
                    continue
                match = TEMPORARY.match(name)
                if match is None or entry.is_symlink():
                    continue
                st = entry.stat(follow_symlinks=False)
                if st.st_mtime >= before or _alive(int(match.group(1))):
                    continue
                os.unlink(entry.path)
                removed, freed = removed + 1, freed + st.st_size
            except OSError:   # gone meanwhile, or not ours to remove
                continue
    return removed, freed
