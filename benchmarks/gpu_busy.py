"""How busy the GPU is while a command runs: the share of one-second samples in which it computes (issue #33).

    python benchmarks/gpu_busy.py --out busy.md -- python -m orchestrator submit grids/quickstart.yaml --no-dashboard

Runs the command, stamps each line it prints with the seconds since the start (kept in `<out>.log`), samples
`nvidia-smi --query-gpu=utilization.gpu,memory.used` once a second beside it, and writes a Markdown table to --out:
wall time, samples, the share at 0% utilisation, the mean utilisation, and the same per phase, a phase starting at
the first printed line that matches each --phase pattern (default: the start, the first fine-tuned checkpoint,
the end line), and the utilisation in 10 s bins. Needs an NVIDIA GPU and its `nvidia-smi`; prints why and exits 2
without one.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

# the first line printed; a fine-tuned checkpoint's line (orchestrator/stages/finetune.py `model_line`); the end line
PHASES = (("until the first checkpoint", r"."), ("after the first checkpoint", r"clean R@1 v2t .* -> "),
          ("outputs", r"done in \d"))


def sample(stop: threading.Event, t0: float, rows: list[tuple[float, float, float]]) -> None:
    cmd = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
    while not stop.is_set():
        t = time.time()
        out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()
        if out:
            util, mem = (float(v) for v in out[0].split(","))
            rows.append((t - t0, util, mem))
        stop.wait(max(0.0, 1.0 - (time.time() - t)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="Markdown table to write (the stamped log beside it)")
    ap.add_argument("--phase", action="append", default=None, metavar="NAME=REGEX",
                    help="a phase starting at the first output line matching REGEX (repeatable)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args()
    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command after --")
    if shutil.which("nvidia-smi") is None:
        print("gpu_busy: no nvidia-smi here (an NVIDIA GPU is needed)", file=sys.stderr)
        return 2
    phases = [tuple(p.split("=", 1)) for p in args.phase] if args.phase else list(PHASES)
    rows: list[tuple[float, float, float]] = []
    stop, t0 = threading.Event(), time.time()
    sampler = threading.Thread(target=sample, args=(stop, t0, rows), daemon=True)
    sampler.start()
    starts: dict[str, float] = {}
    log = args.out.with_suffix(".log")
    with open(log, "w") as fh:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        for line in proc.stdout:
            t = time.time() - t0
            fh.write(f"{t:7.1f} {line}")
            sys.stdout.write(line)
            for name, pattern in phases:
                if name not in starts and re.search(pattern, line):
                    starts[name] = t
        rc = proc.wait()
    wall = time.time() - t0
    stop.set()
    sampler.join()
    bounds = sorted((t, n) for n, t in starts.items()) + [(wall, "")]
    lines = [f"command: `{' '.join(command)}` (exit {rc}), wall {wall:.0f} s, {len(rows)} one-second samples", "",
             "| phase | from s | seconds | samples | at 0% | mean utilisation | peak memory MiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for (start, name), (end, _) in zip(bounds, bounds[1:]):
        part = [r for r in rows if start <= r[0] < end]
        idle = sum(r[1] == 0 for r in part)
        mean = sum(r[1] for r in part) / len(part) if part else float("nan")
        peak = max((r[2] for r in part), default=float("nan"))
        lines.append(f"| {name} | {start:.0f} | {end - start:.0f} | {len(part)} | {idle} | {mean:.0f}% | {peak:.0f} |")
    idle = sum(r[1] == 0 for r in rows)
    mean = sum(r[1] for r in rows) / len(rows) if rows else float("nan")
    lines.append(f"| all | 0 | {wall:.0f} | {len(rows)} | {idle} | {mean:.0f}% | "
                 f"{max((r[2] for r in rows), default=float('nan')):.0f} |")
    lines += ["", "utilisation by 10 s bin (mean %): " + " ".join(
        f"{sum(r[1] for r in rows if b <= r[0] < b + 10) / max(1, sum(b <= r[0] < b + 10 for r in rows)):.0f}"
        for b in range(0, int(wall) + 1, 10))]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return rc


if __name__ == "__main__":
    sys.exit(main())
