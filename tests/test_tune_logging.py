"""Tune's and Ray Train's tracebacks about the experiment state (a full disk) become one line per cause
(orchestrator/run/tune.py OneLineStateErrors; the disk-full fault test in tests/test_faults.py runs it for real)."""
import logging

from orchestrator.run.tune import OneLineStateErrors


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


_SIGTERM_IN_A_CALLBACK = r'''
import os, signal, sys, time, weakref
import ray
from orchestrator.run import ray_env

ray_env.start_ray(None, 1, dashboard=False)


@ray.remote(num_cpus=0)
class Worker:
    def pid(self):
        return os.getpid()

    def spin_in_a_weakref_callback(self, flag):
        quiet = sys.unraisablehook   # the setup hook's (orchestrator/run/worker_setup.py)

        def witness(args):   # records what reached the hook, so the test knows it happened
            names = []
            tb = args.exc_traceback
            while tb is not None:
                names.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            with open(flag + ".seen", "a") as fh:
                fh.write(args.exc_type.__name__ + " " + " ".join(names) + "\n")
            quiet(args)

        sys.unraisablehook = witness

        class Thing:
            pass

        def callback(ref):   # SIGTERM lands here: Python reports "Exception ignored in" it
            open(flag, "w").close()
            end = time.time() + 4
            while time.time() < end:
                pass
        thing = Thing()
        keep = weakref.ref(thing, callback)
        del thing
        return keep is not None


worker = Worker.remote()
pid = ray.get(worker.pid.remote())
flag = sys.argv[1]
worker.spin_in_a_weakref_callback.remote(flag)
while not os.path.exists(flag):
    time.sleep(0.05)
time.sleep(0.3)
os.kill(pid, signal.SIGTERM)
time.sleep(5)   # Ray's log monitor forwards worker output about once a second
print("worker-pid", pid, flush=True)
ray_env.stop_ray()
'''


def test_a_workers_sigterm_traceback_is_not_forwarded_to_the_driver(tmp_path):
    """Ray stops trial actors with SIGTERM; when it lands in a weakref callback Python prints 9 lines of
    "Exception ignored ... SystemExit: 1" that Ray forwarded to the submit's output (a flake in the fault tests'
    "no Traceback" checks, and a scary end to a good run). Made to happen for real here (a witness in the worker
    records the unraisable SystemExit before the setup hook drops it): the driver's output does not have it
    (orchestrator/run/worker_setup.py, installed in every worker by start_ray)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "driver.py"
    script.write_text(_SIGTERM_IN_A_CALLBACK)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "flag")], capture_output=True, text=True,
                          timeout=120, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    # it happened: Ray's SIGTERM handler raised SystemExit inside the callback, and Python reported it as unraisable
    seen = (tmp_path / "flag.seen").read_text()
    assert seen.startswith("SystemExit") and "sigterm_handler" in seen, seen
    assert "sigterm_handler" not in out and "Exception ignored" not in out and "SystemExit" not in out, out[-3000:]


def test_only_the_sigterm_traceback_is_dropped(capsys):
    """Real unraisable exceptions (raised in `__del__`): a SystemExit from a function named as Ray's SIGTERM handler
    is dropped, a worker's real error and any other SystemExit are still reported."""
    import sys

    from orchestrator.run.worker_setup import quiet_sigterm_teardown

    def sigterm_handler():   # named as Ray's
        raise SystemExit(1)

    class Stopped:
        def __del__(self):
            sigterm_handler()

    class Broken:
        def __del__(self):
            raise ValueError("a real error in a __del__")

    class Exits:
        def __del__(self):
            raise SystemExit(2)

    before = sys.unraisablehook
    try:
        sys.unraisablehook = sys.__unraisablehook__   # Python's own report (pytest installs a collector of its own)
        quiet_sigterm_teardown()
        for cls in (Stopped, Broken, Exits):
            obj = cls()
            del obj
    finally:
        sys.unraisablehook = before
    err = capsys.readouterr().err
    assert "ValueError: a real error in a __del__" in err and "SystemExit: 2" in err
    assert "sigterm_handler" not in err and "SystemExit: 1" not in err
