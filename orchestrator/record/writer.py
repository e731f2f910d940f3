"""Trial runs logged in the background, in order, so the driver's trial hook returns after the ledger write (the
record) and not after the MLflow round trips: `BackgroundLogging` (what the driver asks of a store, whether MLflow
runs in this process or in its own) and the thread that does the work, `TrialLogWriter`. After a store failure the
rest are dropped: the ledger has them and `sync` logs them later."""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable


class BackgroundLogging:
    """What the driver does with a store, the same whether MLflow runs in this process (Tracker) or in its own
    (TrackerProcess): trials logged on a background thread, `flush`, `close`. Subclasses give `uri`, `trial_runs`,
    `log_trial` and `log_trials`."""

    uri: str
    _writer: TrialLogWriter | None = None

    def log_trial_later(self, parent_id: str | Callable[[], str], grid_name: str, entry: dict[str, Any],
                        on_logged: Callable[[str], None], on_error: Callable[[Exception], None]) -> None:
        """`log_trial` on this tracker's background thread (in order); `on_logged(run id)` after each, `on_error`
        once if the store fails (the rest are then dropped: the ledger has them and `sync` logs them later).
        `parent_id` may be a callable, called on that thread (a parent run that a `later` job starts)."""
        self._background().put((parent_id, grid_name, entry, on_logged, on_error))

    def later(self, job: Callable[[], Any], on_error: Callable[[Exception], None]) -> None:
        """`job()` on the same background thread, in order with the trials logged there: `submit` starts its parent
        run and syncs the store this way, so its trials do not wait for the store (docs/notes/2026-11-results-history.md
        §15). A job that raises counts as a store failure: `on_error(err)`, and what follows is dropped."""
        self._background().put(_Job(job, on_error))

    def _background(self) -> "TrialLogWriter":
        if self._writer is None:
            self._writer = TrialLogWriter(self)
        return self._writer

    def flush(self) -> None:
        """Wait until every trial handed to `log_trial_later` is logged (or dropped after a store failure)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """End the background logging thread after what is queued (without waiting for it): a process that submits
        many grids (the tests, a notebook) would otherwise keep one idle thread per submission."""
        if self._writer is not None:
            self._writer.stop()
            self._writer = None


_STOP = object()   # TrialLogWriter's queue: the thread ends here
_FLUSH = object()  # TrialLogWriter's queue: someone waits (`flush`): log what is gathered now, do not linger


@dataclasses.dataclass
class _Job:
    """Work for TrialLogWriter's thread besides trial runs (`BackgroundLogging.later`)."""

    run: Callable[[], Any]
    on_error: Callable[[Exception], None]


class TrialLogWriter:
    """One background thread that logs trial runs in order, so the driver's trial hook (orchestrator/run/tune.py
    RecordingScheduler -> LiveRecorder) returns after the ledger write (the record) instead of after ~5 MLflow round
    trips per trial (benchmarks/orchestration_overhead.py); jobs (`BackgroundLogging.later`) run on it in their turn.
    `flush()` waits for the queue. After a store failure the rest are dropped: the ledger has them."""

    linger_s = 0.5   # how long a batch gathers after its first run (`flush` cuts it short)

    def __init__(self, tracker: BackgroundLogging):
        self.tracker = tracker
        self.queue: queue.Queue = queue.Queue()
        self.failed: Exception | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="mlflow-trial-writer", daemon=True)
        self.thread.start()

    def put(self, item: tuple) -> None:
        """(parent run id, grid name, ledger entry, on_logged(run id), on_error(err))."""
        self.queue.put(item)

    def flush(self) -> None:
        if self.stopped:   # no thread would take a flush mark off the queue: wait for the thread's end instead
            self.thread.join()
            return
        self.queue.put(_FLUSH)   # the batch being gathered goes now: the caller waits for it
        self.queue.join()

    def stop(self) -> None:
        """The thread ends once the items queued before this are logged."""
        self.stopped = True
        self.queue.put(_STOP)

    def _loop(self) -> None:
        held = None   # an item taken while gathering a batch, handled next (a job, or the stop mark)
        while True:
            first, held = (self.queue.get() if held is None else held), None
            if first is _STOP:
                self.queue.task_done()
                return
            if first is _FLUSH:
                self.queue.task_done()
                continue
            if isinstance(first, _Job):
                self._run_job(first)
                continue
            items = [first]
            # what queues within half a second goes in one transaction (Tracker.log_trials): logging one run at a
            # time kept this thread busy 60% of the time at 4,270 no-op trials, slowing Tune's loop on the GIL
            deadline = time.monotonic() + self.linger_s
            while len(items) < 1000:
                try:
                    item = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is _FLUSH:   # logged at once, not after the linger: `flush` waits for it
                    self.queue.task_done()
                    break
                if item is _STOP or isinstance(item, _Job):
                    held = item
                    break
                items.append(item)
            try:
                if self.failed is None:
                    self._log(items)
            except Exception as err:  # tracking trouble never loses a result: the ledger has it
                self._failed(err, items[0][4])
            finally:
                for _ in items:
                    self.queue.task_done()

    def _run_job(self, job: _Job) -> None:
        try:
            if self.failed is None:
                job.run()
        except Exception as err:
            self._failed(err, job.on_error)
        finally:
            self.queue.task_done()

    def _failed(self, err: Exception, on_error: Callable[[Exception], None]) -> None:
        self.failed = err
        try:
            on_error(err)
        except Exception:
            pass

    def _log(self, items: list[tuple]) -> None:
        groups: dict[tuple[str, str], list[tuple]] = {}
        for item in items:
            parent = item[0]() if callable(item[0]) else item[0]
            groups.setdefault((parent, item[1]), []).append(item)
        for (parent, grid_name), group in groups.items():
            # an error stops here (`_failed`): runs logged before it are found by the next sync, by trial key
            rids = self.tracker.log_trials(parent, grid_name, [g[2] for g in group])
            for g, rid in zip(group, rids):
                g[3](rid)


