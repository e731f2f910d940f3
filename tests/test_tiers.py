"""The tiers of docs/testing.md, as tests/conftest.py assigns them: run on planted test files beside a copy of the
conftest, with pytest's own collection."""
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

PLANTED = '''
import pytest

def test_plain():
    pass

@pytest.mark.slow
def test_old_slow():
    pass

@pytest.mark.e2e
def test_e2e():
    pass
'''


def collect(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "--rootdir", str(folder), str(folder), *args],
                          capture_output=True, text=True, timeout=300, cwd=folder)


def selected(out: subprocess.CompletedProcess) -> set[str]:
    return {line.split("::")[-1] for line in out.stdout.splitlines() if "::" in line}


def test_every_test_lands_in_one_tier_and_slow_means_not_unit(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(PLANTED)
    assert selected(collect(tmp_path, "-m", "unit")) == {"test_plain"}
    assert selected(collect(tmp_path, "-m", "integration")) == {"test_old_slow"}
    assert selected(collect(tmp_path, "-m", "e2e")) == {"test_e2e"}
    assert selected(collect(tmp_path, "-m", "slow")) == {"test_old_slow", "test_e2e"}
    assert selected(collect(tmp_path, "-m", "not slow")) == {"test_plain"}


def test_a_test_in_two_tiers_is_refused(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_two.py").write_text("import pytest\n\n@pytest.mark.e2e\n@pytest.mark.faults\n"
                                          "def test_both():\n    pass\n")
    out = collect(tmp_path)
    assert out.returncode != 0
    assert "test_both: in tiers ['e2e', 'faults']; a test is in one tier" in out.stdout + out.stderr
