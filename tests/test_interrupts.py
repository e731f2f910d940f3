"""A Ctrl-C that Python swallows is raised again (orchestrator/run/interrupts.py). Python runs a signal handler in the
main thread wherever it is; inside a finalizer the KeyboardInterrupt cannot propagate ("Exception ignored in ...")
and the Ctrl-C was lost: a submission then ran to the end and exited 0 (a rare flake of
tests/test_faults.py::test_sigint_exits_130...). Both tests make the signal land in a finalizer for real, in a process
of their own (the handlers are the process's)."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PREAMBLE = r'''
import signal, sys
sys.unraisablehook = lambda args: print("swallowed", args.exc_type.__name__, flush=True)


class Finalized:
    def __del__(self):   # Ctrl-C arrives while a finalizer runs, as it can in the driver's Ray and Tune loop
        signal.raise_signal(signal.SIGINT)
        for _ in range(100):   # the handler runs at one of these bytecodes, inside the finalizer
            pass


def ctrl_c_in_a_finalizer():
    thing = Finalized()
    del thing
'''

_ALONE = _PREAMBLE + r'''
from orchestrator.run.interrupts import handle_signals, raise_if_pending, taken

handle_signals()
ctrl_c_in_a_finalizer()
print("went on", flush=True)
try:
    raise_if_pending()
except KeyboardInterrupt:
    print("raised again", flush=True)
taken()
raise_if_pending()
print("taken", flush=True)
'''

_IN_TUNE = _PREAMBLE + r'''
import json
import ray
from orchestrator.run.interrupts import handle_signals
from orchestrator.run import ray_env
from orchestrator.run.tune import run_trials
from workloads.spec import TrialSpec


def trainable(config):
    import time
    from ray import tune

    time.sleep(0.5)
    tune.report({"result_json": json.dumps({"seed": config["spec"]["seed"]})})


specs = [TrialSpec(dataset="d", direction="v2t", scenario="query_shift", perturbation="fog", severity=1,
                   method="source", backbone="clip4clip", seed=i) for i in range(8)]
seen = []


def on_result(result):
    seen.append(result["seed"])
    if len(seen) == 1:
        ctrl_c_in_a_finalizer()


handle_signals()   # as the command line does
ray_env.start_ray(None, 1, dashboard=False)
try:
    run_trials(specs, None, storage_path=sys.argv[1], name="sigint", cpus_per_trial=1, gpus_per_trial=0,
               max_failures=0, max_concurrent=None, on_result=on_result, on_crash=lambda *a: None,
               trainable=trainable)
    print("finished", len(seen), flush=True)
except KeyboardInterrupt:
    print("interrupted after", len(seen), flush=True)
finally:
    ray.shutdown()
'''


def _run(script: str, *args: str, timeout: float = 30) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout.splitlines()


def test_a_ctrl_c_swallowed_by_a_finalizer_is_raised_again_until_taken():
    lines = _run(_ALONE)
    # it happened for real: the interrupt was swallowed and the program went on; then it came back, once
    assert lines == ["swallowed KeyboardInterrupt", "went on", "raised again", "taken"], lines


def test_a_ctrl_c_swallowed_during_tunes_loop_stops_the_trials(tmp_path):
    """The finalizer runs in the driver while Tune hands it a result (our scheduler's callback): the interrupt is
    swallowed there, and run_trials still stops with it before the eight trials are done."""
    lines = _run(_IN_TUNE, str(tmp_path / "tune"), timeout=180)
    assert "swallowed KeyboardInterrupt" in lines, lines
    stopped = [ln for ln in lines if ln.startswith(("interrupted after", "finished"))]
    assert len(stopped) == 1 and stopped[0].startswith("interrupted after"), lines
    assert int(stopped[0].split()[-1]) < 8, lines
