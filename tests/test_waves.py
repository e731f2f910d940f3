"""`run_trials` in waves (orchestrator/tune.py "Waves"): with real Ray Tune, several `Tuner.fit` one after another on
one `ReadyGate`, each handing out at most `wave` trials; every trial runs once, and a closed gate stops the loop."""
import json
import threading

from orchestrator.tune import ReadyGate, run_trials
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

    from orchestrator import ray_env

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
    benchmarks/RESULTS.md section 15); inside `run_trials`' context it allows ours what it allows its grid search, and
    a value the user set stays theirs. Asked of Tune's own function, on our real searcher."""
    from ray.tune.execution.tune_controller import _get_max_pending_trials
    from ray.tune.search import SearchGenerator

    from orchestrator.tune import GatedSearcher, _pending_trials_like_grid_search

    monkeypatch.delenv("TUNE_MAX_PENDING_TRIALS_PG", raising=False)
    ours = SearchGenerator(GatedSearcher(ReadyGate(_specs(3))))
    assert _get_max_pending_trials(ours) == 1   # Tune's default for a searcher: what this fixes
    with _pending_trials_like_grid_search():
        assert _get_max_pending_trials(ours) >= 200
    assert _get_max_pending_trials(ours) == 1   # nothing left behind in the environment
    monkeypatch.setenv("TUNE_MAX_PENDING_TRIALS_PG", "7")
    with _pending_trials_like_grid_search():
        assert _get_max_pending_trials(ours) == 7
