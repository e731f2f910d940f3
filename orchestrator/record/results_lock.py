"""One driver per results folder: the commands that write a results folder (`submit`, `resume`, `check`, `sync`,
`report`) hold an exclusive lock on it while they run; `status`, `plan` and `submit --dry-run` read without it.

The lock is `fcntl.flock` on `RESULTS/.mlvp.lock`, a file that is never removed. The kernel releases a flock when the
process holding it ends, however it ends (kill -9 included), so a lock can never be left held by a dead driver on this
host. Beside it, `RESULTS/.mlvp.lock.json` records who holds it (pid, host, command, start time); its holder removes it
on the way out. A second driver that finds the lock held fails with one line naming that holder (`ResultsFolderLocked`).
A record left without a held lock (its driver was killed) is stale: the next driver says so in one line and takes
the lock. A record from another host is the one case this host cannot check (over a shared filesystem a flock may or
may not reach the other host): the driver refuses and names `--break-lock`, which takes the lock anyway.

Without the lock, two drivers of one folder ran side by side: both generated the data, fine-tuned, rendered and ran
every trial, and MLflow got two parent runs and every cell twice (issue 47 item 2); the ledger's writes assume one
writer (docs/ledger.md).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

from orchestrator.planning.paths import check_writable
from workloads.atomic import atomic_write_text

LOCK_NAME, HOLDER_NAME = ".mlvp.lock", ".mlvp.lock.json"
# the folders this process holds (a command that holds one may call code that takes it again: not refused)
_HELD: dict[str, dict] = {}


class ResultsFolderLocked(RuntimeError):
    """The results folder is held by another driver (or by a record this host cannot check); the message is one
    line naming the holder and what to do."""


def _alive_here(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # exists, another user's
        return True
    return True


def _read_holder(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def describe_holder(holder: dict | None) -> str:
    """`mlvp submit quickstart` (pid 123 on host node1, since 2026-12-02 08:50:01 UTC, 3 min ago)."""
    if not holder:
        return "a driver that has not recorded itself yet (it is starting)"
    started = holder.get("started_unix")
    when = ""
    if isinstance(started, (int, float)):
        ago = max(0, time.time() - started)
        when = (f", since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(started))}, "
                + (f"{ago / 60:.0f} min ago" if ago >= 60 else f"{ago:.0f} s ago"))
    return f"`{holder.get('command', '?')}` (pid {holder.get('pid', '?')} on host {holder.get('host', '?')}{when})"


@contextlib.contextmanager
def results_lock(results: str | os.PathLike, command: str, break_lock: bool = False,
                 note: Callable[[str], None] | None = None) -> Iterator[dict]:
    """Hold the results folder's lock for the block (made with the folder when missing); yields the holder record
    written. Raises ResultsFolderLocked when another driver holds it. `note(line)`: where the one-line note about a
    stale record goes (default: stderr). `break_lock`: take a lock whose holder this host cannot check. Nested in a
    block of this process that holds it, it holds it too."""
    note = note or (lambda line: print(line, file=sys.stderr, flush=True))
    folder = Path(results).expanduser().resolve()
    held = _HELD.get(str(folder))
    if held is not None and held["pid"] == os.getpid():   # this process holds it already: nested, not refused
        held["depth"] += 1
        try:
            yield held["holder"]
        finally:
            held["depth"] -= 1
        return
    check_writable(folder)   # made when missing; else one line saying why it cannot take the lock
    lock_file, holder_file = folder / LOCK_NAME, folder / HOLDER_NAME
    fd = _acquire(lock_file, holder_file, folder, break_lock)
    try:
        previous = _read_holder(holder_file)
        if previous and previous.get("host") != platform.node() and not break_lock:
            raise ResultsFolderLocked(
                f"results folder {folder} is recorded as held by {describe_holder(previous)}, on another host: this "
                f"host cannot check whether it still runs; wait for it to end there, or if it is gone, run again "
                f"with --break-lock")
        if previous:
            why = ("the driver on another host was declared gone with --break-lock"
                   if previous.get("host") != platform.node() else "its driver ended without releasing it (killed?)")
            note(f"note: results folder {folder}: stale lock of {describe_holder(previous)} taken over: {why}")
        holder = {"pid": os.getpid(), "host": platform.node(), "command": command,
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "started_unix": time.time()}
        atomic_write_text(holder_file, json.dumps(holder))
    except BaseException:
        os.close(fd)   # releases the flock
        raise
    _HELD[str(folder)] = {"pid": os.getpid(), "depth": 1, "holder": holder}
    try:
        yield holder
    finally:
        _HELD.pop(str(folder), None)
        try:
            if (_read_holder(holder_file) or {}).get("pid") == os.getpid():
                holder_file.unlink(missing_ok=True)
        finally:
            os.close(fd)


def _acquire(lock_file: Path, holder_file: Path, folder: Path, break_lock: bool) -> int:
    """The lock file's descriptor, flocked (not inherited by the programs this process starts: O_CLOEXEC)."""
    for attempt in (0, 1):
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
        holder = _read_holder(holder_file)
        here = bool(holder) and holder.get("host") == platform.node()
        if here and isinstance(holder.get("pid"), int) and _alive_here(holder["pid"]):
            how = (f"wait for it to end, or stop it with `kill {holder['pid']}` (a stopped submission keeps every "
                   f"finished trial), or give this command another --results-dir")
        elif here:
            how = ("that process is gone but one it started still holds the lock: wait for it to end, or give this "
                   "command another --results-dir")
        elif not holder:
            how = "wait for it to end, or give this command another --results-dir"
        else:
            how = ("wait for it to end there; if it is gone, run again with --break-lock (this host cannot check a "
                   "process on another host)")
        if not break_lock or attempt or here or not holder:
            raise ResultsFolderLocked(f"results folder {folder} is in use by {describe_holder(holder)}: {how}")
        # --break-lock on a lock held from elsewhere (a shared filesystem): a new lock file; the old holder keeps
        # a lock on the removed one
        lock_file.unlink(missing_ok=True)
    raise AssertionError("unreachable")
