"""Which trials may start: each trial waits until every one of its needs (orchestrator/planning/needs.py) has been
declared ready by the producer that makes it; Ray Tune is fed from here (orchestrator/run/tune.py GatedSearcher)."""
from __future__ import annotations

import heapq
import threading
import time
from typing import Callable, Iterable

from workloads.spec import TrialSpec


class ReadyGate:
    """Which trials may start: each trial waits until every one of its needs has been declared ready.

    Thread-safe: producers (the render stream's thread, the stage thread of orchestrator/run/submit.py) call `ready`,
    Tune's driver loop calls `pop` through `GatedSearcher`. Trials come out in plan order among those ready (a heap of
    plan indices), so render sets ordered by the trials that need them are consumed in the same order. `close(error)`
    stops handing out trials (a check miss, a failed checkpoint): Tune finishes the running ones and returns."""

    DONE = "DONE"   # `pop`: no trial will come out any more

    def __init__(self, specs: Iterable[TrialSpec], needs: Callable[[TrialSpec], Iterable[str]] | None = None):
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)   # a need met, a trial dropped, the gate closed
        self._specs: list[TrialSpec | None] = list(specs)
        self._missing: list[int] = []                      # per trial: needs not met yet
        self._waiting: dict[str, list[int]] = {}           # need -> trials waiting for it
        self._met: set[str] = set()
        self._heap: list[int] = []
        self._out = [False] * len(self._specs)             # per trial: handed out
        self.error: BaseException | None = None
        self.closed = False
        self.promised = 0          # trials still to be added (`add`) by a search proposing them as results come in
        self._needs = needs
        self.handed_out = 0
        self.first_ready: float | None = None
        for i, spec in enumerate(self._specs):
            wanted = set(needs(spec)) if needs is not None else set()
            self._missing.append(len(wanted))
            for need in wanted:
                self._waiting.setdefault(need, []).append(i)
            if not wanted:
                self._heap.append(i)
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._specs)

    def specs(self) -> list[TrialSpec]:
        """The trials still on the list, in plan order."""
        with self._lock:
            return [s for s in self._specs if s is not None]

    def add(self, spec: TrialSpec, promised: bool = True) -> None:
        """Put a trial on the list while the gate runs (a configuration a search proposed: orchestrator/run/search.py),
        after the trials already on it; `promised`: it is one of the `promised` trials (counted off)."""
        with self._lock:
            i = len(self._specs)
            self._specs.append(spec)
            self._out.append(False)
            wanted = {n for n in (self._needs(spec) if self._needs is not None else ()) if n not in self._met}
            self._missing.append(len(wanted))
            for need in wanted:
                self._waiting.setdefault(need, []).append(i)
            if not wanted:
                heapq.heappush(self._heap, i)
            if promised:
                self.promised = max(0, self.promised - 1)
            self._changed.notify_all()

    def promise(self, n: int) -> None:
        """`n` more trials will be added later (`add`): until they are, the gate is not done."""
        with self._lock:
            self.promised += n
            self._changed.notify_all()

    def withdraw(self, n: int) -> None:
        """`n` promised trials will not come (a search that stopped early)."""
        with self._lock:
            self.promised = max(0, self.promised - n)
            self._changed.notify_all()

    def ready(self, need: str) -> None:
        with self._lock:
            if need in self._met:
                return
            self._met.add(need)
            for i in self._waiting.pop(need, ()):
                self._missing[i] -= 1
                if self._missing[i] == 0:
                    heapq.heappush(self._heap, i)
            self._changed.notify_all()

    def is_ready(self, need: str) -> bool:
        with self._lock:
            return need in self._met

    def drop(self, keys: set[str]) -> int:
        """Take trials off the list (run elsewhere meanwhile, e.g. by `check`); returns how many were dropped."""
        with self._lock:
            n = 0
            for i, spec in enumerate(self._specs):
                if spec is not None and spec.key in keys:
                    self._specs[i] = None
                    n += 1
            self._changed.notify_all()
            return n

    def close(self, error: BaseException | None = None) -> None:
        with self._lock:
            self.closed = True
            if error is not None and self.error is None:
                self.error = error
            self._changed.notify_all()

    def pop(self) -> TrialSpec | None | str:
        """The next trial to start, None when none is ready yet, `ReadyGate.DONE` when none is left (or the gate is
        closed)."""
        with self._lock:
            if self.closed:
                return ReadyGate.DONE
            while self._heap:
                i = heapq.heappop(self._heap)
                spec = self._specs[i]
                if spec is not None:
                    self._out[i] = True
                    self.handed_out += 1
                    if self.first_ready is None:
                        self.first_ready = time.time()
                    return spec
            return ReadyGate.DONE if self._left() == 0 else None

    def wait(self, timeout: float) -> bool:
        """Block until `pop` would not say "not yet" (a trial is ready, the gate closed, or none is left), at most
        `timeout` seconds; True if so."""
        with self._changed:
            return self._changed.wait_for(self._decided, timeout)

    def _decided(self) -> bool:
        return self.closed or any(self._specs[i] is not None for i in self._heap) or self._left() == 0

    def _left(self) -> int:
        return sum(1 for i, s in enumerate(self._specs) if s is not None and self._missing[i] > 0) + self.promised

    def remaining(self) -> int:
        """Trials still to hand out (ready, waiting, or promised), dropped ones not counted."""
        with self._lock:
            return sum(1 for i, s in enumerate(self._specs) if s is not None and not self._out[i]) + self.promised

    def pending(self) -> dict[str, int]:
        """Needs still unmet -> how many remaining trials wait for each (for a stuck-run message)."""
        with self._lock:
            return {n: sum(1 for i in idx if self._specs[i] is not None) for n, idx in self._waiting.items()}


