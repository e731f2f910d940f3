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
print("worker-pid", pid, ray._private.worker.global_worker.node.get_logs_dir_path(), flush=True)
ray_env.stop_ray()
'''


def test_a_workers_sigterm_traceback_is_not_forwarded_to_the_driver(tmp_path):
    """Ray stops trial actors with SIGTERM; when it lands in a weakref callback Python prints 9 lines of
    "Exception ignored ... SystemExit: 1" that Ray forwarded to the submit's output (a flake in the fault tests'
    "no Traceback" checks, and a scary end to a good run). Made to happen for real here: the worker's own log has
    the traceback, the driver's output does not (orchestrator/run/ray_env.py quiet_worker_teardown)."""
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
    pid, logs = next(ln.split()[1:] for ln in done.stdout.splitlines() if ln.startswith("worker-pid"))
    worker_err = "".join(p.read_text() for p in Path(logs).glob(f"*{pid}*.err"))
    assert "Exception ignored in" in worker_err and "sigterm_handler" in worker_err   # it did happen
    assert "sigterm_handler" not in out and "Exception ignored" not in out, out[-3000:]


def test_only_the_sigterm_traceback_is_dropped():
    from orchestrator.run.ray_env import without_sigterm_tracebacks

    teardown = ["Exception ignored in: <function WeakSet.__init__.<locals>._remove at 0x7f115830a3e0>",
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3.11/_weakrefset.py", line 39, in _remove',
                "    def _remove(item, selfref=ref(self)):", "",
                '  File "ray/_private/worker.py", line 1063, in sigterm_handler',
                "    raise_sys_exit_with_custom_error_message(",
                '  File "python/ray/_raylet.pyx", line 712, in ray._raylet.raise_sys_exit_with_custom_error_message',
                "SystemExit: 1"]
    other = ["Exception ignored in: <function Foo.__del__>", "Traceback (most recent call last):",
             '  File "x.py", line 3, in __del__', "ValueError: boom"]
    assert without_sigterm_tracebacks(["a"] + teardown + ["b"]) == ["a", "b"]
    assert without_sigterm_tracebacks(other + teardown) == other   # a worker's real error still shows
