"""Fault injection for the tests: make a share of trials crash their worker, deterministically, to test the retry
path. Reached through the trial hook (docs/testing.md): tests/conftest.py sets MLVP_TRIAL_HOOK to
`fault_injection:before_trial`, which every trial's worker calls before the trial runs (orchestrator/run/tune.py
`call_hook`); production trials run no hook.

Off unless `MLVP_TEST_FAULT_RATE` is set (tests/test_faults.py sets it). When set, `before_trial` calls
`maybe_fail(key)`, which raises `InjectedFault` -- an ordinary exception in the worker, so Ray Tune treats it like
any crashed trial: retried `runtime.max_failures` times, then handed to the driver's `on_trial_error` and recorded in
the ledger as failed with its error.

- `MLVP_TEST_FAULT_RATE` (0..1): each (trial key, attempt) fails with this probability, drawn from a hash of
  (seed, key, attempt): a transient fault, usually gone on the retry.
- `MLVP_TEST_FAULT_PERSISTENT` (0..1, default 0): each trial key fails on every attempt with this probability.
- `MLVP_TEST_FAULT_SEED` (default "0"): salts the draws, so a test can pick a seed that gives it both kinds.
- Set to "0", the switch injects nothing but still counts attempts (tests/test_cluster.py: which trial was in
  flight on a node when it was killed, and that it ran again).
- `MLVP_TEST_FAULT_DIR`: where attempts are counted (one file per trial key; a retry may run in another worker
  process, so the count lives on disk). Default: `<tempdir>/mlvp-test-faults`.
- `MLVP_TEST_TRIAL_HOLD_S`: each trial waits this long in its worker (titled by its cell) before it runs, so that a
  slow observer sees it running (tests/test_report_dashboard.py polls the Ray dashboard, whose answers take seconds
  while a micro trial takes one).
- `MLVP_TEST_TRIAL_RELEASE`: a file path; the hold ends as soon as it exists, so the observer lets the trials go once
  it has seen what it waited for, and the hold is only a cap (a fixed hold lost the race on a loaded CI machine).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

RATE, PERSISTENT, SEED, DIR = ("MLVP_TEST_FAULT_RATE", "MLVP_TEST_FAULT_PERSISTENT", "MLVP_TEST_FAULT_SEED",
                               "MLVP_TEST_FAULT_DIR")
HOLD, RELEASE = "MLVP_TEST_TRIAL_HOLD_S", "MLVP_TEST_TRIAL_RELEASE"
VARIABLES = (RATE, PERSISTENT, SEED, DIR, HOLD, RELEASE)


class InjectedFault(RuntimeError):
    """Raised in a worker by `maybe_fail`."""


def _draw(seed: str, key: str, what: str) -> float:
    digest = hashlib.sha256(f"{seed}|{key}|{what}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def fails(key: str, attempt: int, rate: float, persistent: float = 0.0, seed: str = "0") -> bool:
    """Whether attempt `attempt` (0 = first) of trial `key` fails under these settings (pure: tests predict with it)."""
    return _draw(seed, key, "persistent") < persistent or _draw(seed, key, f"attempt{attempt}") < rate


def outcome(key: str, max_failures: int, rate: float, persistent: float = 0.0, seed: str = "0") -> tuple[bool, int]:
    """(succeeds, attempts made) for a trial Tune runs at most 1 + max_failures times."""
    for attempt in range(max_failures + 1):
        if not fails(key, attempt, rate, persistent, seed):
            return True, attempt + 1
    return False, max_failures + 1


def enabled() -> bool:
    return bool(os.environ.get(RATE) or os.environ.get(PERSISTENT))


def attempts_dir() -> Path:
    return Path(os.environ.get(DIR) or Path(tempfile.gettempdir()) / "mlvp-test-faults")


def attempts(key: str) -> int:
    """How many attempts of trial `key` `maybe_fail` has seen."""
    try:
        return len((attempts_dir() / key).read_text().split())
    except FileNotFoundError:
        return 0


def maybe_fail(key: str) -> None:
    """Count this attempt of trial `key`; raise InjectedFault when the settings say it fails. No-op when off."""
    if not enabled():
        return
    rate, persistent = float(os.environ.get(RATE) or 0), float(os.environ.get(PERSISTENT) or 0)
    seed = os.environ.get(SEED, "0")
    folder = attempts_dir()
    folder.mkdir(parents=True, exist_ok=True)
    attempt = attempts(key)
    with open(folder / key, "a") as f:   # one line per attempt; Tune runs one attempt of a trial at a time
        f.write(f"{os.getpid()}\n")
    if fails(key, attempt, rate, persistent, seed):
        kind = "persistent" if _draw(seed, key, "persistent") < persistent else "transient"
        raise InjectedFault(f"injected fault ({kind}, attempt {attempt + 1}) in trial {key[:12]} ({RATE}={rate}, "
                            f"{PERSISTENT}={persistent})")


def hold() -> None:
    """Wait `MLVP_TEST_TRIAL_HOLD_S` seconds, or until the `MLVP_TEST_TRIAL_RELEASE` file exists (test-only; a
    no-op when unset)."""
    import time

    seconds = float(os.environ.get(HOLD) or 0)
    release = os.environ.get(RELEASE)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def before_trial(spec) -> None:
    """The trial hook (MLVP_TRIAL_HOOK=fault_injection:before_trial): count and maybe fail this attempt, then hold
    the trial if asked; a no-op when no MLVP_TEST_* variable is set."""
    maybe_fail(spec.key)
    hold()
