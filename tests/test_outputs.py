"""The end of a submission's tables and report, written by a spawned child process (orchestrator/report/outputs.py): the
same files and counts as in the driver's own process, an error inside the child raised in the driver, and a child that
dies reported as an error (the ledger untouched); a child started ahead of its job is the one that writes, and one
never used ends when closed. Real processes, a real ledger; no Ray."""
from __future__ import annotations

import os

import pytest

from conftest import plan_unrun
from orchestrator.record.ledger import TrialLedger
from orchestrator.report.outputs import APART_FROM_TRIALS, OutputsAhead, WriterChild, write_outputs, write_outputs_apart


@pytest.fixture
def planned(tmp_path, shared_cache):
    plan = plan_unrun(tmp_path, shared_cache, "outs")
    ledger = TrialLedger(plan.paths.ledger)
    for i, t in enumerate(plan.trials[:-1]):   # the last trial never ran
        ledger.put({"key": t.key, "spec": t.to_dict(), "status": "failed" if i == 0 else "ok",
                    "metrics": {} if i == 0 else {"R1": 10.0 + i, "R5": 50.0, "hub_skewness": 0.5},
                    "error": "RuntimeError: boom" if i == 0 else None, "k_occurrence": [i, 2, 0, 1],
                    "batch_R1": [10.0 + i]}, submission="s1")
    return plan


class _DiesWhenUnpickled:
    """Unpickled in the child, it ends that process at once (as an OOM kill would)."""

    def __reduce__(self):
        return (os._exit, (3,))


def test_child_writes_what_the_driver_would(planned, tmp_path):
    plan = planned
    apart = write_outputs_apart(plan.grid, plan.trials, tmp_path / "apart", plan.paths.ledger)
    here = write_outputs(plan.grid, plan.trials, tmp_path / "here", plan.paths.ledger)
    assert apart.error is None and apart.report_error is None, (apart.error, apart.report_error)
    assert (apart.ok, apart.failed, apart.present) == (here.ok, here.failed, here.present) == (4, 1, 5)
    rel = sorted(str(f.relative_to(tmp_path / "apart")) for f in apart.files)
    assert rel == sorted(str(f.relative_to(tmp_path / "here")) for f in here.files)
    assert "trials.parquet" in rel and "report/index.html" in rel
    assert all(f.is_file() and f.stat().st_size > 0 for f in apart.files)
    assert apart.peak_rss_mb and apart.peak_rss_mb > 20   # the child's own peak: an interpreter with pandas at least
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "apart" / "trials.parquet").equals(pq.read_table(tmp_path / "here" /
                                                                                      "trials.parquet"))
    # the child draws the severity figures in a forked process of its own (report.severity_apart): same pixels
    severity = sorted(f for f in rel if "/r1_severity_" in f)
    assert severity and all((tmp_path / "apart" / f).read_bytes() == (tmp_path / "here" / f).read_bytes()
                            for f in severity)


def test_a_small_grid_is_written_here_a_large_one_apart(planned, tmp_path, monkeypatch):
    """`submit` writes a small grid's outputs in its own process (a child's start costs more than they do) and a
    large grid's in a child (outputs.write_grid_outputs)."""
    from orchestrator.report import outputs

    assert len(planned.trials) <= outputs.APART_FROM_TRIALS
    small = outputs.write_grid_outputs(planned.grid, planned.trials, tmp_path / "small", planned.paths.ledger)
    monkeypatch.setattr(outputs, "APART_FROM_TRIALS", len(planned.trials) - 1)
    large = outputs.write_grid_outputs(planned.grid, planned.trials, tmp_path / "large", planned.paths.ledger)
    assert small.writer_pid == os.getpid() and large.writer_pid not in (None, os.getpid())
    assert [f.name for f in small.files] == [f.name for f in large.files] and small.ok == large.ok == 4


def test_an_error_in_the_child_is_raised_in_the_driver(planned, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        write_outputs_apart(planned.grid, planned.trials, blocker / "grid", planned.paths.ledger)


def test_a_child_that_dies_is_an_error_not_a_crash(planned, tmp_path):
    before = sorted(p.name for p in planned.paths.ledger.rglob("*.json"))
    out = write_outputs_apart(_DiesWhenUnpickled(), planned.trials, tmp_path / "dead", planned.paths.ledger)
    assert out.error and "died" in out.error and not out.files
    assert (out.ok, out.failed, out.present) == (4, 1, 5)   # still counted, from the ledger, for the parent run
    assert sorted(p.name for p in planned.paths.ledger.rglob("*.json")) == before
    assert not (tmp_path / "dead").exists()


def test_a_child_started_ahead_writes_the_outputs_and_ends(planned, tmp_path):
    child = WriterChild()
    out = write_outputs_apart(planned.grid, planned.trials, tmp_path / "ahead", planned.paths.ledger, child)
    here = write_outputs(planned.grid, planned.trials, tmp_path / "here", planned.paths.ledger)
    assert out.error is None and out.report_error is None, (out.error, out.report_error)
    assert out.writer_pid == child.proc.pid and out.writer_started == child.started
    assert sorted(f.name for f in out.files) == sorted(f.name for f in here.files) and out.ok == here.ok == 4
    assert child.proc.returncode == 0 and not child.folder.exists()


def test_a_child_started_ahead_and_never_used_ends_when_closed(planned):
    small = OutputsAhead(APART_FROM_TRIALS)
    small.start()
    assert small.child is None   # a small grid's outputs are written in the driver: no child
    ahead = OutputsAhead(APART_FROM_TRIALS + 1)
    ahead.start()
    child = ahead.child
    ahead.start()
    assert ahead.child is child   # one child, however many results start it
    ahead.close()
    assert child.proc.returncode == 0 and not child.folder.exists() and ahead.child is None


def test_a_child_killed_while_it_waits_is_an_error_not_a_crash(planned, tmp_path):
    child = WriterChild()
    child.proc.kill()
    child.proc.wait()
    out = write_outputs_apart(planned.grid, planned.trials, tmp_path / "killed", planned.paths.ledger, child)
    assert out.error and "died" in out.error and not out.files
    assert (out.ok, out.failed, out.present) == (4, 1, 5)


def test_closing_a_child_that_ended_by_itself_closes_its_pipe(planned):
    """A child that ended before the driver closed it (killed, or crashed on import) still has its pipe closed, so
    the driver holds no open file for it."""
    child = WriterChild()
    child.proc.kill()
    child.proc.wait()
    child.close()
    assert child.proc.stdin.closed and not child.folder.exists()
