"""benchmarks/dress_rehearsal.py end to end at a tiny size (issue #33 item 5): the real MSRVTT annotation files with
two stand-in videos, two perturbation types on the render stage's Ray tasks, one ViT-B/32 trial (random init) on the
CPU; every row of its tables holds a measured figure, the cost model's prediction and their ratio, and with
`--alone` each type's CPU s per clip in the Ray tasks beside its CPU s per rendering alone."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]


def test_the_dress_rehearsal_runs_and_sets_every_figure_beside_its_prediction(tmp_path):
    out = tmp_path / "dress.md"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "dress_rehearsal.py"), "--videos", "2",
                           "--types", "gaussian_noise,fog", "--severities", "1", "--trials", "1", "--frames", "4",
                           "--seconds", "10-11", "--actors", "2", "--alone", "1", "--device", "cpu",
                           "--methods", "source",
                           "--annotations", str(REPO / "tests" / "data" / "annotations" / "MSRVTT"),
                           "--dir", str(tmp_path / "work"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    # the stand-ins are named as the first rows of the real test file and read by the msrvtt loader
    videos = sorted(p.name for p in (tmp_path / "work" / "MSRVTT" / "videos").glob("*.mp4"))
    assert videos == ["video9770.mp4", "video9771.mp4"], videos
    tables = _tables(text)
    assert set(tables) == {"types", "stream", "actors", "alone", "trials"}, list(tables)
    types = tables["types"]
    assert [r[0] for r in types] == ["gaussian_noise", "fog"]
    for row in types:       # clips, failed, wall, CPU, clips/s measured, predicted, ratio, per CPU s, ratio
        assert int(row[1]) == 2 and int(row[2]) == 0
        _check_ratio(row[5], row[6], row[7])
        _check_ratio(row[8], row[6], row[9])
    (stream,) = tables["stream"]
    _check_ratio(stream[3], stream[4], stream[5])
    assert tables["actors"] and all(_number(r[3]) > 100 for r in tables["actors"])     # peak RSS MiB
    for row in tables["actors"]:
        _check_ratio(row[3], row[4], row[5])
    assert [r[0] for r in tables["alone"]] == ["gaussian_noise", "fog"]
    for row in tables["alone"]:   # clips of the first video, Ray tasks' CPU s per clip, alone, Ray / alone
        assert int(row[1]) == 1
        _check_ratio(row[2], row[3], row[4])
    (trial,) = tables["trials"]
    assert trial[0] == "source gaussian_noise-1" and int(trial[1]) == 2
    _check_ratio(trial[3], trial[4], trial[5])
    # the stream's wait for its clips, and the rest of it as a share: 1 - wait / stream
    wait, stream_s, share = _number(trial[6]), _number(trial[3]), _number(trial[7]) / 100
    assert 0 <= wait < stream_s and trial[7].endswith("%")
    assert abs(share - (1 - wait / stream_s)) <= (_half_unit(trial[6]) + _half_unit(trial[3])) / stream_s + 0.001
    _check_ratio(trial[8], trial[9], trial[10])


def _number(cell: str) -> float:
    return float(re.match(r"[\d,.]+", cell.strip()).group(0).replace(",", ""))


def _half_unit(cell: str) -> float:
    """Half the last shown digit of a number as the table prints it: the rounding it may carry."""
    digits = re.match(r"[\d,]*\.?(\d*)", cell.strip()).group(1)
    return 0.5 * 10 ** -len(digits)


def _check_ratio(measured: str, predicted: str, ratio: str) -> None:
    """The ratio column is measured / predicted, computed before either was rounded for the table: it must lie
    within what the shown (rounded) figures allow, e.g. 0.04 / 0.006 is anything from 0.035 / 0.0065 to 0.045 /
    0.0055."""
    m, p, r = _number(measured), _number(predicted), _number(ratio)
    assert m > 0 and p > 0, (measured, predicted)
    dm, dp, dr = _half_unit(measured), _half_unit(predicted), _half_unit(ratio)
    low, high = max(m - dm, 0.0) / (p + dp), (m + dm) / max(p - dp, 1e-12)
    assert low * 0.99 - dr <= r <= high * 1.01 + dr, (measured, predicted, ratio)


def _tables(text: str) -> dict[str, list[list[str]]]:
    """The markdown tables under each '### ' heading, by a short name, without their header rows."""
    names = {"Rendering: clips per second": "types", "Rendering: the whole stream": "stream",
             "Rendering: peak RSS": "actors", "Rendering: CPU s per clip": "alone", "Trials:": "trials"}
    out, current = {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            current = next((v for k, v in names.items() if line[4:].startswith(k)), None)
        elif current and line.startswith("|") and not line.startswith("|---"):
            out.setdefault(current, []).append([c.strip() for c in line.strip("|").split("|")])
    return {k: rows[1:] for k, rows in out.items()}
