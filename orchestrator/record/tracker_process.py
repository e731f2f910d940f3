"""A `Tracker` in a process of its own, for `submit`'s driver: MLflow (its import and its store) stays out of the
memory of the driver that runs Ray Tune, and the store's writes take no GIL time from Tune's loop."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
import signal
import threading
import time
import types

from orchestrator.record.mlflow_store import Tracker, TrackingError
from orchestrator.record.writer import BackgroundLogging


class TrackerProcess(BackgroundLogging):
    """A `Tracker` in a process of its own, for `submit`'s driver (the long-lived process that runs Ray Tune): MLflow
    (its import, ~90 MB, and its SQLAlchemy store) stays out of the driver's memory, whose growth at thousands of trials
    is Ray Tune's (docs/notes/2026-11-results-history.md §15), and the store's writes take no GIL time from Tune's loop.

    One tracking process per driver interpreter, shared by its TrackerProcess objects and serving every store they name
    (one Tracker per store in it): MLflow is imported once per interpreter and a store opened once, as MLflow caches its
    stores in-process; an interpreter that submits many times (the tests, a notebook) pays the ~3 s start once
    (docs/notes/2026-11-results-history.md §15). It is started with the first one (spawn: a fresh interpreter, MLflow
    imported while Ray starts) and serves one call at a time, in order; each call blocks until it answers, and an error
    comes back as TrackingError (the original type name in `kind`). It ignores SIGINT, so a submission stopped with
    Ctrl-C still closes its parent run as KILLED, and ends with the driver however the driver ends, kill -9 included
    (`end_with_parent`: a process pool's worker does not notice its parent's death by itself, and a tracking process
    left behind held `mlflow.db` open, with multiprocessing's resource tracker, for minutes: issue 47); a broken one
    is replaced by the next TrackerProcess."""

    def __init__(self, tracking_uri: str, results_dir: str | os.PathLike, templates: str | os.PathLike | None = None):
        """`templates`: where a new local store is started from (`Tracker`)."""
        self.uri = tracking_uri
        self.results_dir = Path(results_dir).resolve()
        self._writer = None
        self._pool = _tracking_pool()
        self._pid = self._pool.submit(os.getpid)   # starts the process now, if new
        # and opens the store (a new sqlite store's migrations: ~1.5 s) while the caller goes on (Ray starts); an
        # error here is raised again by the first call
        self._pool.submit(_call_tracker, self.uri, str(self.results_dir), None, (),
                          None if templates is None else str(templates))

    @property
    def pid(self) -> int:
        """The tracking process's pid."""
        return self._pid.result()

    def _call(self, name: str, *args):
        try:
            return self._pool.submit(_call_tracker, self.uri, str(self.results_dir), name, args).result()
        except BrokenProcessPool as err:
            raise TrackingError("BrokenProcessPool", f"the tracking process ended ({err})") from None
        except RuntimeError as err:
            if "after shutdown" in str(err):   # closed: the caller asked after `close`
                raise TrackingError("TrackerClosed", "the tracking process was closed") from None
            raise

    def start_parent(self, grid, grid_text: str, summary: dict[str, Any], pid: int | None = None) -> str:
        return self._call("start_parent", types.SimpleNamespace(name=grid.name, source=grid.source), grid_text,
                          summary, pid or os.getpid())

    def close_stale_parents(self, grid_name: str) -> list[str]:
        return self._call("close_stale_parents", grid_name)

    def log_trial(self, parent_id: str, grid_name: str, entry: dict[str, Any]) -> str:
        return self._call("log_trial", parent_id, grid_name, entry)

    def log_trials(self, parent_id: str, grid_name: str, entries: list[dict[str, Any]]) -> list[str]:
        return self._call("log_trials", parent_id, grid_name, entries)

    def trial_runs(self, grid_name: str) -> dict[tuple[str, str], str]:
        return self._call("trial_runs", grid_name)

    def current_trial_runs(self, grid_name: str) -> dict[str, list[tuple[str, str, str]]]:
        return self._call("current_trial_runs", grid_name)

    def supersede(self, grid_name: str, key: str, current: str) -> list[str]:
        return self._call("supersede", grid_name, key, current)

    def finish_parent(self, parent_id: str, metrics: dict[str, float], files: list[Path], status: str) -> None:
        self._call("finish_parent", parent_id, metrics, [Path(f) for f in files], status)

    def close(self) -> None:
        """Returns once what is queued is logged (bounded: a dead store fails each call within ~30 s and the writer
        then drops the rest); the process stays for the driver's next submission."""
        writer = self._writer
        super().close()
        if writer is not None:
            writer.thread.join(timeout=60)


_TRACKING: dict[str, Any] = {}   # this interpreter's tracking process (TrackerProcess): {"pool", "pid"}


def _tracking_pool():
    """This interpreter's tracking process, started anew when there is none yet, it broke (a broken pool refuses
    new work at once), or this is a forked child of the interpreter that started it."""
    pool = _TRACKING.get("pool")
    if pool is not None and _TRACKING.get("pid") == os.getpid():
        try:
            pool.submit(int)
            return pool
        except (BrokenProcessPool, RuntimeError):   # broken, or shut down
            pass
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_serve_tracker,
                               initargs=(os.getpid(),))
    _TRACKING.update(pool=pool, pid=os.getpid())
    return pool


# the tracking process's side of TrackerProcess: one Tracker per (store, results dir)
_SERVED: dict[tuple[str, str], Tracker] = {}


def _serve_tracker(driver: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the driver's to handle: it closes the parent run
    end_with_parent(driver)


def end_with_parent(parent: int, every: float = 0.5) -> threading.Thread:
    """End this process (at once: SIGKILL) within `every` seconds of its parent `parent` (a pid) ending, however it
    ends: a daemon thread compares the parent pid with `parent`, which changes when the parent dies and this process
    is handed to init or a subreaper. For the helper processes a driver starts (the tracking process here, the
    outputs child: orchestrator/report/outputs.py). Not Linux's PR_SET_PDEATHSIG: it fires when the *thread* that
    started the child ends, not the process, and a pool may start its worker from any thread; this works on every
    POSIX system. A store write cut short this way is rolled back by SQLite's journal, and the ledger has the
    result (`mlvp sync`)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os.kill(os.getpid(), signal.SIGKILL)   # at once, no clean-up to wait on (what a dead driver's kill -9 gives)

    thread = threading.Thread(target=watch, name="mlvp-end-with-parent", daemon=True)
    thread.start()
    return thread


def _call_tracker(tracking_uri: str, results_dir: str, name: str, args: tuple, templates: str | None = None):
    try:
        tracker = _SERVED.get((tracking_uri, results_dir))
        if tracker is None:
            tracker = _SERVED[(tracking_uri, results_dir)] = Tracker(tracking_uri, results_dir, templates)
        return None if name is None else getattr(tracker, name)(*args)   # None: open the store only
    except Exception as err:
        raise TrackingError(type(err).__name__, str(err)) from None


