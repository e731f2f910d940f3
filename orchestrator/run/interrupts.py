"""How a submission is stopped: Ctrl-C (SIGINT) and SIGTERM (what `timeout`, Slurm and Kubernetes send) become a
KeyboardInterrupt in the main thread, which unwinds through Ray Tune's loop, so the finished trials stay recorded, the
parent run is closed KILLED (orchestrator/run/submit.py) and the command exits 130 or 143 (orchestrator/cli/main.py).

An interrupt that is swallowed is raised again. Python runs a signal's handler in the main thread between two
bytecodes, wherever they are; when that is inside a finalizer (a `__del__`, a weakref callback: the driver's Ray and
Tune loop runs many), the KeyboardInterrupt cannot propagate: Python prints "Exception ignored in ..." and goes on,
and the Ctrl-C is lost (Ray's workers lost SIGTERM the same way: tests/test_tune_logging.py). So the handlers remember
the signal until the submission has taken it (`taken`), and the code of ours that Tune's loop runs (orchestrator/run/
tune.py: the scheduler, the searcher, between waves) calls `raise_if_pending`, which raises it again
(tests/test_interrupts.py).
"""
from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is."""


_STATE = {"pending": None, "sigterm": False}   # the signal received and not yet taken; SIGTERM seen at all


def _on_sigint(signum, frame) -> None:
    _STATE["pending"] = signal.SIGINT
    raise KeyboardInterrupt


def _on_sigterm(signum, frame) -> None:
    _STATE["pending"], _STATE["sigterm"] = signal.SIGTERM, True
    raise Terminated()


def handle_signals() -> None:
    """Install both handlers in the main thread (elsewhere Python allows none). Called again after Ray starts: Ray's
    core installs its own SIGTERM handler (it prints a C++ stack trace and exits). SIGINT is left alone where it is
    not Python's default, e.g. ignored in a job started in the background by a shell script."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_sigint):
        signal.signal(signal.SIGINT, _on_sigint)


def raise_if_pending() -> None:
    """Raise the interrupt a signal asked for if nothing has taken it yet (it was swallowed on its way)."""
    if _STATE["pending"] is not None:
        raise Terminated() if _STATE["pending"] == signal.SIGTERM else KeyboardInterrupt()


def taken() -> None:
    """The interrupt has reached the code that stops the submission: do not raise it again."""
    _STATE["pending"] = None


def stopped_by_sigterm(err: BaseException) -> bool:
    """Whether an interrupt came from SIGTERM. The interrupt that unwinds the submission may be another
    KeyboardInterrupt than ours (a stopped stage raises its own: orchestrator/run/pipeline.py `_wait`), so the
    signal's arrival is remembered too."""
    return isinstance(err, Terminated) or _STATE["sigterm"]
