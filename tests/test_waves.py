"""`run_trials` in waves (orchestrator/run/tune.py "Waves"): with real Ray Tune, several `Tuner.fit` one after another
on one `ReadyGate`, each handing out at most `wave` trials; every trial runs once, and a closed gate stops the loop."""
import json
import os
import threading

import pytest

from orchestrator.run.gate import ReadyGate
from orchestrator.run.tune import run_trials
from workloads.spec import TrialSpec


def _specs(n: int) -> list[TrialSpec]:
    return [TrialSpec(dataset="d", direction="v2t", scenario="query_shift", perturbation="fog", severity=1,
                      method="source", backbone="clip4clip", seed=i) for i in range(n)]


def _trainable(runs_dir: str):
    def trainable(config):   # a closure: Ray ships it by value to workers that cannot import tests/
        import os

        from ray import tune

        key = config["spec"]["seed"]
        with open(os.path.join(runs_dir, f"{key}-{os.getpid()}-{os.urandom(4).hex()}"), "w"):
            pass   # one file per execution: a trial run twice leaves two
        tune.report({"result_json": json.dumps({"seed": key})})
    return trainable


def test_waves_run_every_trial_once_and_stop_on_a_closed_gate(tmp_path):
    import ray

    from orchestrator.run import ray_env

    runs = tmp_path / "runs"
    runs.mkdir()
    specs = _specs(5)
    # the last trial waits for an input that comes later: the third wave waits for it, the loop does not end early
    gate = ReadyGate(specs, lambda t: ["late"] if t.seed == 4 else [])
    results: list[int] = []
    common = dict(cpus_per_trial=1, gpus_per_trial=0, max_failures=0, max_concurrent=None,
                  on_crash=lambda *a: None, trainable=_trainable(str(runs)), wave=2)
    ray_env.start_ray(None, 2, dashboard=False)
    try:
        timer = threading.Timer(1.0, gate.ready, args=("late",))
        timer.start()
        run = run_trials(specs, None, storage_path=str(tmp_path / "tune"), name="w", gate=gate,
                         on_result=lambda r: results.append(r["seed"]), **common)
        timer.join()
        assert sorted(results) == [0, 1, 2, 3, 4]
        assert sorted(int(p.name.split("-")[0]) for p in runs.iterdir()) == [0, 1, 2, 3, 4]   # each ran once
        assert (run.waves, run.trials, run.errors) == (3, 5, 0)
        assert sorted(p.name for p in (tmp_path / "tune").iterdir()) == ["w", "w-w2", "w-w3"]

        # a gate closed (a producer failed) during the first wave: no second wave
        closing = ReadyGate(_specs(5))
        seen: list[int] = []

        def on_result(r):
            seen.append(r["seed"])
            closing.close(RuntimeError("check missed"))

        run = run_trials(specs, None, storage_path=str(tmp_path / "tune2"), name="c", gate=closing,
                         on_result=on_result, **common)
        assert run.waves == 1 and 1 <= run.trials <= 2 and len(seen) == run.trials
        assert [p.name for p in (tmp_path / "tune2").iterdir()] == ["c"]
        assert str(closing.error) == "check missed"
    finally:
        ray.shutdown()


def test_tune_keeps_as_many_of_our_trials_pending_as_of_its_own_grid(monkeypatch):
    """Tune allows a custom search algorithm one pending trial (its trial starts serialised: half plain Tune's rate,
    docs/notes/2026-11-results-history.md §15); inside `run_trials`' context it allows ours what it allows its grid
    search, and saves its experiment state once a minute; values the user set stay theirs. Asked of Tune's
    own functions, on our real searcher."""
    from ray.tune.execution.tune_controller import _get_max_pending_trials
    from ray.tune.search import SearchGenerator

    from orchestrator.run.tune import EXPERIMENT_STATE_PERIOD_S, GatedSearcher, _tune_settings_for_many_trials

    monkeypatch.delenv("TUNE_MAX_PENDING_TRIALS_PG", raising=False)
    monkeypatch.delenv("TUNE_GLOBAL_CHECKPOINT_S", raising=False)
    ours = SearchGenerator(GatedSearcher(ReadyGate(_specs(3))))
    assert _get_max_pending_trials(ours) == 1   # Tune's default for a searcher: what this fixes
    with _tune_settings_for_many_trials():
        assert _get_max_pending_trials(ours) >= 200
        # as Tune's controller reads it: a period, longer than "auto"'s 10 s at least
        assert float(os.environ["TUNE_GLOBAL_CHECKPOINT_S"]) == EXPERIMENT_STATE_PERIOD_S > 10
    assert _get_max_pending_trials(ours) == 1   # nothing left behind in the environment
    assert "TUNE_GLOBAL_CHECKPOINT_S" not in os.environ
    monkeypatch.setenv("TUNE_MAX_PENDING_TRIALS_PG", "7")
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "30")
    with _tune_settings_for_many_trials():
        assert _get_max_pending_trials(ours) == 7
        assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "30"


def test_first_pending_scheduler_chooses_as_tunes_fifo_scheduler():
    """FirstPendingScheduler skips the finished prefix of Tune's trial list instead of walking it on every step; it
    must still choose exactly the trial Tune's FIFOScheduler would, through Tune's transitions: trials created in
    order, started, finished (TERMINATED), given up on (ERROR), or put back to PENDING after a crash while RUNNING
    (Tune's `_requeue_trial`), paused and resumed."""
    import random
    import types

    from ray.tune.experiment import Trial
    from ray.tune.schedulers import FIFOScheduler

    from orchestrator.run.tune import FirstPendingScheduler

    rng = random.Random(0)
    trials: list = []
    controller = types.SimpleNamespace(get_trials=lambda: trials)
    ours, tunes = FirstPendingScheduler(), FIFOScheduler()
    moves = {Trial.PENDING: [Trial.RUNNING, Trial.PAUSED], Trial.PAUSED: [Trial.PENDING, Trial.RUNNING],
             Trial.RUNNING: [Trial.TERMINATED, Trial.TERMINATED, Trial.ERROR, Trial.PENDING, Trial.PAUSED]}
    chosen = set()
    for step in range(3000):
        if rng.random() < 0.3 and len(trials) < 400:
            trials.append(types.SimpleNamespace(status=Trial.PENDING))
        live = [t for t in trials if t.status in moves]
        for t in rng.sample(live, min(len(live), rng.randint(0, 3))):
            t.status = rng.choice(moves[t.status])
        expected = tunes.choose_trial_to_run(controller)
        assert ours.choose_trial_to_run(controller) is expected, f"step {step}"
        chosen.add(None if expected is None else expected.status)
    assert chosen == {None, Trial.PENDING, Trial.PAUSED}   # every kind of answer was compared
    assert ours._finished_prefix > 100                      # and the finished prefix was skipped


@pytest.mark.parametrize("cpus, producer_cpus, waves", [(2, 2, 2), (3, 1, 1)],
                         ids=["producer-blocked", "producer-runs"])
def test_an_idle_wave_gives_its_actors_back_to_the_producers(tmp_path, cpus, producer_cpus, waves):
    """With no trial running and none ready, Tune blocks up to 600 s asking the searcher for the next one without
    stepping its actor manager (ray/tune/execution/tune_controller.py `_update_trial_queue`): its cached trial actor
    and the one it is stopping keep their CPUs. A producer (a render actor) that needs one of those CPUs then never
    starts, its input never comes, and the run stalled for 10 minutes (tests/test_check.py did, 2 runs in 6 on CI).
    Here two trials run on the cluster; the third waits for an input made by a task started once both are done. On
    2 CPUs a 2-CPU task needs the CPU of the actor Tune caches: the idle wave must end and free its actors, the task
    run, and a next wave run the third trial. (A 1-CPU task there ran in one wave in 1 CI run of many, when Tune had
    already stopped its second actor: no stall to prevent then.) On 3 CPUs a 1-CPU task runs beside the idle actors:
    the wave keeps them and runs the third trial itself (a new wave costs a new Tuner.fit and cold trial actors)."""
    import ray

    from orchestrator.run import ray_env

    runs = tmp_path / "runs"
    runs.mkdir()
    specs = _specs(3)
    gate = ReadyGate(specs, lambda t: ["made"] if t.seed == 2 else [])
    results: list[int] = []

    @ray.remote(num_cpus=producer_cpus)
    def producer():   # longer than an idle wave waits before it asks whether a producer is blocked
        import time

        time.sleep(4)
        return "made"

    def make_input():   # as the render stream does: a CPU task, then `ready`
        gate.ready(ray.get(producer.remote()))

    def on_result(r):
        results.append(r["seed"])
        if len(results) == 2:
            threading.Thread(target=make_input, daemon=True).start()

    ray_env.start_ray(None, cpus, dashboard=False)
    # the stall would be 600 s: give up long before, and say so
    watchdog = threading.Timer(90, gate.close, args=(TimeoutError("stalled: the producer never got a CPU"),))
    watchdog.start()
    try:
        run = run_trials(specs, None, storage_path=str(tmp_path / "tune"), name="idle", gate=gate,
                         cpus_per_trial=1, gpus_per_trial=0, max_failures=0, max_concurrent=None,
                         on_result=on_result, on_crash=lambda *a: None, trainable=_trainable(str(runs)), wave=None)
        assert gate.error is None, gate.error
        assert sorted(results) == [0, 1, 2] and run.trials == 3 and run.waves == waves
    finally:
        watchdog.cancel()
        ray.shutdown()


DRIVER = """
import json, sys
from ray import tune
from orchestrator.run import ray_env
from orchestrator.run.gate import ReadyGate
from orchestrator.run.tune import run_trials
from workloads.spec import TrialSpec

def trainable(config):
    tune.report({"result_json": json.dumps({"seed": config["spec"]["seed"]})})

specs = [TrialSpec(dataset="d", direction="v2t", scenario="query_shift", perturbation="fog", severity=1,
                   method="source", backbone="clip4clip", seed=i) for i in range(3)]
seen = []
ray_env.start_ray(None, 2, dashboard=False)
run = run_trials(specs, None, storage_path=sys.argv[1], name="m", cpus_per_trial=1, gpus_per_trial=0, max_failures=0,
                 max_concurrent=None, on_result=lambda r: seen.append(r["seed"]), on_crash=lambda *a: None,
                 trainable=trainable)
ray_env.stop_ray()
print(json.dumps({"seen": sorted(seen), "mlflow": "mlflow" in sys.modules}))
"""


def test_the_driver_running_trials_does_not_import_mlflow(tmp_path):
    """MLflow belongs to the tracking process (orchestrator/record/mlflow_store.py TrackerProcess), not to the driver
    running Ray Tune: Tune imports it (~40 MB) to count the callbacks a user passes, so `run_trials` passes none and
    records through its scheduler (RecordingScheduler). Checked in a fresh interpreter, where nothing else imported
    it."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "tune")], capture_output=True, text=True,
                          timeout=300, cwd=repo, env=dict(os.environ))   # conftest.py: this checkout first
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"seen": [0, 1, 2], "mlflow": False}


def test_waves_bound_the_trials_the_driver_holds(tmp_path, monkeypatch):
    """Tune keeps every `Trial` of a `fit` until it ends; waves (`runtime.trials_per_wave`, orchestrator/run/tune.py
    "Waves") bound what the driver holds by running the trials in several fits: counted as live `Trial` objects in
    the driver while 240 trials run in waves of 40, at most two waves' worth (Tune alone keeps all 240 until its one
    `fit` ends). A trial that crashes is counted as an error in its wave."""
    import gc

    import ray
    from ray.tune.experiment import Trial

    from orchestrator.run import ray_env

    def trainable(config):
        from ray import tune

        if config["spec"]["seed"] == 7:
            raise RuntimeError("worker crashed")
        tune.report({"result_json": json.dumps({"seed": config["spec"]["seed"]})})

    live: list[int] = []
    seen: list[int] = []
    crashed: list[int] = []
    monkeypatch.setenv("TUNE_MAX_PENDING_TRIALS_PG", "4")   # Tune creates trials as slots free, not 200 up front

    def on_result(r):
        seen.append(r["seed"])
        if len(seen) % 20 == 0:
            gc.collect()   # a finished wave's Trials are unreachable cycles until collected: count what is held
            live.append(sum(isinstance(o, Trial) for o in gc.get_objects()))

    ray_env.start_ray(None, 2, dashboard=False)
    try:
        run = run_trials(_specs(240), None, storage_path=str(tmp_path / "tune"), name="f", cpus_per_trial=1,
                         gpus_per_trial=0, max_failures=0, max_concurrent=None, on_result=on_result,
                         on_crash=lambda spec, err: crashed.append(spec["seed"]), trainable=trainable, wave=40)
    finally:
        ray.shutdown()
    assert sorted(seen) == [i for i in range(240) if i != 7] and crashed == [7]
    assert (run.waves, run.trials, run.errors) == (6, 240, 1)
    # counted every 20 results: the driver holds at most this wave's Trials and the previous wave's (measured 25, 45,
    # 65, 45, 65, ...: the previous wave's are still referenced while the next one starts), never all 240
    assert len(live) == 11 and max(live) <= 2 * 40 < 240, live
