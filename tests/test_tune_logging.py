"""Tune's and Ray Train's tracebacks about the experiment state (a full disk) become one line per cause
(orchestrator/tune.py OneLineStateErrors; the disk-full fault test in tests/test_faults.py runs it for real)."""
import logging

from orchestrator.tune import OneLineStateErrors


def _record(msg: str, exc_info=None, level=logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("ray.train._internal.syncer", level, __file__, 1, msg, None, exc_info)


def test_tracebacks_in_the_message_or_attached_are_one_line_per_cause(capsys):
    f = OneLineStateErrors()
    syncer = ("Last sync command failed with the following error:\nTraceback (most recent call last):\n"
              '  File "syncer.py", line 343, in _launch_sync_process\n    self.wait()\n'
              "OSError: [Errno 28] No space left on device")
    assert f.filter(_record(syncer)) is False and f.filter(_record(syncer)) is False
    try:
        raise PermissionError(13, "Permission denied")
    except OSError as err:
        attached = _record("Failed to save experiment state to '/r/tune'", (OSError, err, err.__traceback__),
                           logging.ERROR)
    assert f.filter(attached) is False and f.filter(attached) is False
    assert f.filter(_record("an ordinary warning")) is True   # everything else passes through untouched
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "Ray Tune could not save its experiment state under the results directory (OSError: [Errno 28] No space "
        "left on device); the ledger keeps every result",
        "Ray Tune could not save its experiment state under /r/tune (PermissionError: [Errno 13] Permission denied); "
        "the ledger keeps every result"]
