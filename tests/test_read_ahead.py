"""Reading a stream's inputs ahead of the consumer (workloads/read_ahead.py), and a trial that reads its clips ahead
(workloads/trial.py): the same values in the same order, errors where their item is, bounded work, and the stream's
wait for its input reported."""
import threading
import time

import pytest

from workloads.read_ahead import Waited, read_ahead


def recorder(delay: float = 0.0, fail_at: int | None = None):
    started: list[int] = []
    lock = threading.Lock()

    def read(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(delay)
        if i == fail_at:
            raise KeyError(f"item {i}")
        return i * i

    return read, started


def settle(started: list[int], n: int, timeout: float = 5.0) -> None:
    """Wait until `n` reads have started (or the timeout), then a little longer for any that should not."""
    end = time.monotonic() + timeout
    while len(started) < n and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(0.2)


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_the_same_values_in_the_same_order_as_map(depth):
    # uneven read times: later items finish before earlier ones when read side by side
    delays = {i: 0.02 * ((7 * i) % 5) for i in range(20)}

    def read(i):
        time.sleep(delays[i])
        return (i, threading.current_thread().name)

    out = list(read_ahead(read, range(20), depth))
    assert [i for i, _ in out] == list(range(20))
    threads = {name for _, name in out}
    if depth == 0:
        assert threads == {threading.current_thread().name}
    else:
        assert all(name.startswith("read-ahead") for name in threads) and len(threads) <= depth


def test_an_items_error_is_raised_where_the_item_is_after_the_earlier_items():
    read, _ = recorder(fail_at=3)
    got = []
    with pytest.raises(KeyError, match="item 3"):
        for value in read_ahead(read, range(10), 2):
            got.append(value)
    assert got == [0, 1, 4]


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_at_most_depth_items_are_read_beyond_the_one_held(depth):
    read, started = recorder()
    stream = read_ahead(read, range(50), depth)
    assert next(stream) == 0
    settle(started, depth + 1)
    assert sorted(started) == list(range(depth + 1))
    assert next(stream) == 1
    settle(started, depth + 2)
    assert sorted(started) == list(range(depth + 2))
    stream.close()


def test_a_consumer_that_stops_early_starts_no_further_read():
    read, started = recorder(delay=0.05)
    stream = read_ahead(read, range(100), 3)
    next(stream)
    stream.close()
    settle(started, 4)
    n = len(started)
    assert n <= 4
    time.sleep(0.3)
    assert len(started) == n
    assert not any(t.name.startswith("read-ahead") for t in threading.enumerate() if t.is_alive())


def test_waited_sums_the_time_spent_waiting_for_items_not_the_time_holding_them():
    def slow():
        for i in range(3):
            time.sleep(0.05)
            yield i

    items = Waited(slow())
    got = []
    for i in items:
        got.append(i)
        time.sleep(0.1)   # the consumer's own work: not waiting
    assert got == [0, 1, 2]
    assert 0.15 <= items.seconds < 0.25


def test_a_negative_depth_is_refused_naming_it():
    with pytest.raises(ValueError, match="got -1"):
        list(read_ahead(str, range(3), -1))


def test_a_trial_reads_ahead_with_the_same_result_and_reports_its_wait(tmp_path, shared_cache, monkeypatch):
    import dataclasses

    from workloads import render_cache

    from orchestrator.config.grid import parse_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.planning.render_sets import render_keys
    from workloads.render_cache import RenderCache, render_video
    from workloads.trial import TrialContext, run

    grid = {"name": "read_ahead", "models": {"clip_model": "mlvp-micro"}, "backbones": ["clip4clip"],
            "datasets": {"synthetic": {"options": {"n_train": 16, "n_test": 40, "size": 32}}},
            "methods": ["tent"], "runtime": {"batch_size": 8},
            "query_shift": {"datasets": ["synthetic"], "directions": ["v2t"], "perturbations": ["gaussian_noise"],
                            "severities": [5]}}
    plan = build_plan(parse_grid(grid, "read_ahead.yaml"), Paths.make(tmp_path / "results", shared_cache))
    cache = RenderCache(tmp_path / "render")
    ds = plan.datasets["synthetic"]
    for pair in ds.test.pairs:
        render_video(pair.video_path, render_keys(plan, "synthetic", pair.video_id), cache)
    spec = next(t for t in plan.trials if t.cell != "clean")
    inline = TrialContext(render_cache=str(cache.root), checkpoint=None, dataset_root=ds.root,
                          dataset_options=ds.options, read_ahead=0)
    readers: set[str] = set()
    real_read = render_cache.RenderCache.read

    def read(self, key):   # the real read, noting which thread asked
        readers.add(threading.current_thread().name)
        return real_read(self, key)

    monkeypatch.setattr(render_cache.RenderCache, "read", read)
    results, threads = {}, {}
    for n in (0, 2):
        readers.clear()
        results[n] = run(spec, dataclasses.replace(inline, read_ahead=n))
        threads[n] = set(readers)
    assert threads[0] == {threading.current_thread().name}
    assert threads[2] and all(name.startswith("read-ahead") for name in threads[2])
    assert all(r.status == "ok" for r in results.values()), {n: r.error for n, r in results.items()}
    assert results[0].metrics == results[2].metrics
    assert results[0].query_R1 == results[2].query_R1 and results[0].n_queries == 40
    for r in results.values():
        assert 0 < r.timings["input_wait_s"] < r.timings["adapt_s"]

