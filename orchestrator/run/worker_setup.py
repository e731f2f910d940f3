"""What every Ray worker process of a submission runs first (Ray's `worker_process_setup_hook`, set by
orchestrator/run/ray_env.py `start_ray`).

`quiet_sigterm_teardown`: Ray stops idle and finished workers with SIGTERM, and its handler raises SystemExit. When
the signal lands while Python runs a weakref callback or a `__del__`, the interpreter cannot raise it there and
prints "Exception ignored in: <function WeakSet...>" with eight lines of traceback ending in "SystemExit: 1" to the
worker's stderr, which Ray forwards to the driver's console: noise at the end of a good run (the worker's work was
done and recorded), and it reads as a failure. This hook drops exactly that report, through Python's own
`sys.unraisablehook`; every other unraisable exception is reported as before.
"""
from __future__ import annotations

import sys
from types import TracebackType


def from_sigterm_handler(exc_type: type[BaseException] | None, tb: TracebackType | None) -> bool:
    """A SystemExit raised by a function named `sigterm_handler` (Ray's, in every Ray version we know)."""
    if exc_type is None or not issubclass(exc_type, SystemExit):
        return False
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "sigterm_handler":
            return True
        tb = tb.tb_next
    return False


def quiet_sigterm_teardown() -> None:
    previous = sys.unraisablehook

    def hook(args) -> None:
        if not from_sigterm_handler(args.exc_type, args.exc_traceback):
            previous(args)

    sys.unraisablehook = hook
