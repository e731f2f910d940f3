"""`submit` on a terminal, as a user sees it: `python -m orchestrator submit` runs on a real pseudo-terminal (Python's
pty module), where rich draws its live progress display. Only our own lines reach it: no Ray worker lines
(`(_finetune_task pid=...)`, `(raylet)`), no Ray Tune configuration box; those go to the log file
(orchestrator/run/console.py). One line per trial, the trials the clean check runs included; the MLflow line of a
fresh run says in plain words what it logged; and every trial records the versions `mlvp --version` prints
(workloads/versions.py). And the Ray token file that line points to is kept readable by its owner only."""
from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from conftest import private_cache, write_micro_grid

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# what Ray and Ray Tune print of their own: a worker's or a Ray process's prefix, Tune's box and its closing hint
LIBRARY = re.compile(r"\((?:[\w.:-]+ )?pid=\d+(?:, ip=[\d.]+)?\)|\((?:raylet|gcs_server|monitor|dashboard)\)|"
                     r"Configuration for experiment|View detailed results here|Number of trials|SearchGenerator")
TRIAL_LINE = re.compile(r"^\s*synthetic\s+(clip4clip|xpool)\s+(source|tent)\s+(v2t|t2v)\s+(\S+)\s+R@1\s")


def run_on_terminal(args: list[str], env: dict[str, str], timeout: float = 600) -> tuple[int, str]:
    """Run `args` with stdin, stdout and stderr on a new pseudo-terminal of 160 x 50; returns its exit code and
    everything it wrote there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env, start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as err:   # EIO: every copy of the terminal's other end is closed (the command ended)
                if err.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            chunks.append(data)
        else:
            os.killpg(proc.pid, 9)
            raise AssertionError("submit did not end in time:\n" + b"".join(chunks)[-3000:].decode(errors="replace"))
        return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)


def screen_lines(text: str) -> list[str]:
    """The terminal's output as lines: colour and cursor codes removed, split where the cursor returned."""
    return [line.rstrip() for line in re.split(r"[\r\n]+", ANSI.sub("", text)) if line.strip()]


@pytest.mark.slow
def test_submit_on_a_terminal_prints_our_lines_only_one_per_trial(tmp_path, shared_cache):
    from orchestrator.config.grid import load_grid
    from orchestrator.planning.paths import Paths
    from orchestrator.planning.plan import build_plan
    from orchestrator.record.ledger import TrialLedger
    from orchestrator.cli.main import version_lines
    from workloads.versions import software_versions

    grid_file = write_micro_grid(tmp_path / "micro.yaml")
    # the dataset is the session's; the checkpoints are fine-tuned here, so that Ray workers print their
    # `(_finetune_task pid=...)` lines during this submission
    cache = private_cache(tmp_path / "cache", shared_cache, share=("datasets",))
    results = tmp_path / "results"
    env = {**os.environ, "TERM": "xterm-256color", "OMP_NUM_THREADS": "1"}
    for k in ("COLUMNS", "LINES", "NO_COLOR", "RAY_COLOR_PREFIX"):
        env.pop(k, None)
    code, out = run_on_terminal([sys.executable, "-m", "orchestrator", "submit", str(grid_file), "--results-dir",
                                 str(results), "--cache-dir", str(cache)], env)
    lines = screen_lines(out)
    assert code == 0, "\n".join(lines[-40:])
    assert "\x1b[" in out   # a terminal indeed: rich drew colours and its live display

    # nothing of Ray's or Tune's own output on the terminal ...
    leaked = [line for line in lines if LIBRARY.search(line)]
    assert not leaked, leaked[:10]
    # ... it is in the log file the first line names
    (log,) = (results / "micro" / "logs").glob("submit-*.log")
    assert f"log: {log}" in "".join(lines)
    logged = log.read_text(errors="replace")
    assert re.search(r"\(_finetune_task pid=\d+\) training clip4clip", logged)
    assert "Configuration for experiment" in logged

    # our own lines: the plan, the check, the end
    text = "\n".join(lines)
    for ours in ("grid micro", "check: clean retrieval", "MLflow: parent run", "done in"):
        assert ours in text, ours
    # one line per trial, the clean Source cells the check ran included; none for the t2v direction the check also
    # scores, which is no trial of this v2t grid
    plan = build_plan(load_grid(str(grid_file)), Paths.make(results, cache))
    assert len(plan.trials) == 20
    printed = [m.groups() for m in map(TRIAL_LINE.match, lines) if m]
    assert sorted(printed) == sorted((t.backbone_label, t.method_label, t.direction, t.cell)
                                     for t in plan.trials), printed
    # the clean check's trials reach MLflow after the others: said as what they are, not as a recovery
    assert "MLflow: logged the 2 trials of the clean check to " in text
    assert "that the ledger holds" not in text and "missing there" not in text

    # every trial, the check's included, records what `mlvp --version` prints
    expected = software_versions(with_cuda=True, gpu=False)
    assert set(expected) == {"mlvp", "python", "torch", "torchvision", "open_clip", "ray", "mlflow", "numpy", "pyav",
                             "cuda"}
    version_text = "\n".join(version_lines())
    entries = TrialLedger(Paths.make(results, cache).ledger).entries([t.key for t in plan.trials], lists=False)
    assert len(entries) == 20
    for entry in entries:
        env_of = entry["environment"]
        assert {k: env_of.get(k) for k in expected} == expected, env_of
        assert all(str(v) in version_text for k, v in expected.items()), (expected, version_text)


def test_the_ray_token_file_is_made_private_and_the_dashboard_line_says_so(tmp_path, monkeypatch):
    """Ray writes ~/.ray/auth_token with the umask (0644 here): the dashboard line sets the owner's file to 0600 and
    says it did; a private file is left as it is and nothing is said; another user's file is only named."""
    from orchestrator.run.ray_env import auth_token_hint

    monkeypatch.setenv("HOME", str(tmp_path))
    assert "stored in" not in auth_token_hint()   # no token file: nothing to say of one
    token = tmp_path / ".ray" / "auth_token"
    token.parent.mkdir()
    token.write_text("t" * 64)
    token.chmod(0o644)
    hint = auth_token_hint()
    assert token.stat().st_mode & 0o777 == 0o600
    assert f"stored in {token}; its mode was 644, readable by other users: set to 600" in hint
    assert auth_token_hint().endswith(f"(stored in {token})")   # private now: nothing more to say
    if os.getuid() == 0:   # as root, a file of another user can be made: it is named, not changed
        token.chmod(0o640)
        os.chown(token, 65534, 65534)
        assert f"readable by other users (mode 640): run chmod 600 {token}" in auth_token_hint()
        assert token.stat().st_mode & 0o777 == 0o640
