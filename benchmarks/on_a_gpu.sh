#!/usr/bin/env bash
# Issue #33 item 6 on a lent GPU machine, in one call of under 600 s: how busy the GPU is
#   1. during ViT-B/32 trials of 1,000 queries (the dress rehearsal's trial part: real MSRVTT annotations, stand-in
#      videos rendered through the render stage, four methods at one perturbation cell), goal >= 90% of the samples;
#   2. during a whole `submit` of the embedded default (fine-tuning, trials, outputs).
# Each runs under benchmarks/gpu_busy.py with a limit well inside the call's, so its table is written even when the
# run is cut; the tables, the stamped logs and the samples go to $OUT (or the folder given), flat, for the call to
# bring back (eight files: what a call brings back at most). The project's dependencies must be importable
# (docs/notes/2026-11-27-gpu.md: carried wheels put on PYTHONPATH); the repository root is put first on it here.
#
#   bash benchmarks/on_a_gpu.sh "$OUT"
#
# VIDEOS, DEVICE, TRIALS_LIMIT_S and SUBMIT_LIMIT_S change its sizes (a dry run elsewhere: VIDEOS=6 DEVICE=cpu, with an
# `nvidia-smi` stand-in on PATH).
set -u
out=${1:-${OUT:-gpu-results}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ date -u; nvidia-smi -L; python3 --version; git rev-parse HEAD 2>/dev/null; } >"$out/machine.txt" 2>&1

python3 -m benchmarks.gpu_busy --out "$out/busy_trials.md" --limit-s "${TRIALS_LIMIT_S:-300}" \
    --phase "stand-ins and plan=." --phase "Ray and rendering=plan done" --phase "trials=rendering done" \
    --phase "tables=trials done" -- \
    python3 -m benchmarks.dress_rehearsal --device "${DEVICE:-cuda}" --videos "${VIDEOS:-1000}" --seconds 10-10 \
    --types gaussian_noise --severities 5 --methods source,tent,sar,tcr --trials 4 --dir /tmp/mlvp-dress-rehearsal \
    --out "$out/dress_rehearsal_gpu.md"

python3 -m benchmarks.gpu_busy --out "$out/busy_submit.md" --limit-s "${SUBMIT_LIMIT_S:-180}" -- \
    python3 -m orchestrator submit quickstart --no-dashboard --results-dir /tmp/mlvp-results --cache-dir /tmp/mlvp-cache
ls -l "$out"
