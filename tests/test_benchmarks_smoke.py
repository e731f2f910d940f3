"""`python -m benchmarks.render_bench` at its smoke size (`--smoke`: (d), whole calls as a user meets them, on a
16-frame 48x48 clip, one repeat): ours, the render stage's `render_video`, for every registered type and clean; and,
where a checkout of the authors' repository is on this machine (MLVP_AUTHORS_CODE, their dependencies in
MLVP_AUTHORS_PATH), their own script's loop body beside it with a ratio per type. CI reaches no repository but PyPI,
so that part skips there with the reason."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.perturbations.video import NAMES

REPO = Path(__file__).resolve().parents[1]


def _run(*extra: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.render_bench", "--smoke", *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _rows(text: str) -> dict[str, list[str]]:
    """The (d) table's rows by type: [ours, theirs, ratio, goal, ours in one call, ratio one call, ours through the
    API, its ratio, per severity]."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 10 and cells[0] not in ("type", "---"):
            rows[cells[0]] = cells[1:]
    return rows


def test_render_bench_smoke_times_every_type_as_the_render_stage_calls_it():
    text = _run()
    assert "**16 frames 48x48**" in text
    assert "Theirs not run: no --authors-code checkout given." in text
    rows = _rows(text)
    assert list(rows) == [*NAMES, "clean"]
    for name, (ours, theirs, ratio, goal, row, row_ratio, api, api_ratio, per_sev) in rows.items():
        assert float(ours) > 0 and float(row) > 0 and float(api) > 0, name
        assert (theirs, ratio, goal, row_ratio, api_ratio) == ("-", "-", "-", "-", "-"), name
        assert len(per_sev.split(", ")) == (1 if name == "clean" else 5), name
    assert re.search(r"All 60 renderings: ours in one `render_video` \d+\.\d+ s cpu", text)


def test_render_bench_smoke_against_the_authors_own_code():
    code = os.environ.get("MLVP_AUTHORS_CODE")
    if not code or not (Path(code) / "do_video_perturbation.py").is_file():
        pytest.skip("MLVP_AUTHORS_CODE names no checkout of the authors' repository (github bingqingzhang/vtr_tta); "
                    "CI cannot fetch it")
    extra = ["--authors-code", code]
    for p in filter(None, os.environ.get("MLVP_AUTHORS_PATH", "").split(os.pathsep)):
        extra += ["--authors-path", p]
    text = _run(*extra)
    if "Theirs not run:" in text:
        pytest.skip(re.search(r"Theirs not run: (.*)", text).group(1))
    rows = _rows(text)
    compared = [n for n in NAMES if n != "style_transfer"]
    for name in compared:
        ours, theirs, ratio, goal = rows[name][:4]
        assert float(theirs) > 0 and ratio.strip("*").endswith("x"), name
        # the ratio is theirs / ours, up to the rounding of the printed figures (3 decimals)
        o, t, r = float(ours), float(theirs), float(ratio.strip("*x"))
        assert abs(r - t / o) <= (t / o) * (0.0005 / o + 0.0005 / t) + 0.005, (name, ours, theirs, ratio)
        assert goal in ("met", "MISSED")
    assert rows["style_transfer"][1] == "-" and rows["clean"][1] == "-"
    assert re.search(rf"All {5 * len(compared)} compared renderings: ours in one `render_video` \*\*\d+\.\d+ s cpu\*\* "
                     r"against their \d+ calls \*\*\d+\.\d+ s\*\*: \*\*\d+\.\dx\*\*", text)
