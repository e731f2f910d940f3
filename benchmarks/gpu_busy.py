"""How busy the GPU is while a command runs: the share of one-second samples in which it computes (issue #33).

    python -m benchmarks.gpu_busy --out busy.md --limit-s 420 -- \\
        python -m orchestrator submit grids/quickstart.yaml --no-dashboard

Runs the command, stamps each line it prints with the seconds since the start (`<out>.log`), samples
`nvidia-smi --query-gpu=utilization.gpu,memory.used` once a second beside it (`<out>.samples.tsv`), and writes a
Markdown table to --out: wall time, samples, the share at 0% utilisation, the mean utilisation, and the same per
phase, a phase starting at the first printed line that matches each --phase pattern (default: the start, the first
fine-tuned checkpoint, the end line), and the utilisation in 10 s bins. Needs an NVIDIA GPU and its `nvidia-smi`;
prints why and exits 2 without one.

Nothing measured is lost to a time limit: the log and the samples are written line by line as they come;
`--limit-s` interrupts the command (Ctrl-C to its process group, then a kill 20 s later) and still writes the table,
saying it was cut; a SIGTERM to this script does the same. A run cut harder than that (the machine taken back) leaves
the two files, from which `--from-files` writes the table afterwards, anywhere:

    python -m benchmarks.gpu_busy --out busy.md --from-files

`--smoke` (seconds) runs a 2 s Python command that prints two phase lines, into a temporary folder; without
`nvidia-smi` it says so and writes the table with no samples.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# the first line printed; a fine-tuned checkpoint's line (orchestrator/stages/finetune.py `model_line`); the end line
PHASES = (("until the first checkpoint", r"."), ("after the first checkpoint", r"clean R@1 v2t .* -> "),
          ("outputs", r"done in \d"))
GRACE_S = 20.0   # after the Ctrl-C of --limit-s, how long the command has to end before it is killed


def sample(stop: threading.Event, t0: float, out: Path) -> None:
    """One `nvidia-smi` reading a second, appended to `out` as "seconds<TAB>utilisation %<TAB>memory MiB"."""
    cmd = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
    with open(out, "w") as fh:
        while not stop.is_set():
            t = time.time()
            lines = subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()
            if lines:
                util, mem = (float(v) for v in lines[0].split(","))
                fh.write(f"{t - t0:.2f}\t{util:g}\t{mem:g}\n")
                fh.flush()
            stop.wait(max(0.0, 1.0 - (time.time() - t)))


def read_files(out: Path) -> tuple[list[tuple[float, float, float]], list[tuple[float, str]]]:
    """The samples and the stamped log lines written beside `out`."""
    rows = [tuple(float(v) for v in ln.split("\t")) for ln in samples_path(out).read_text().splitlines()
            if ln.count("\t") == 2]
    stamped = []
    log = out.with_suffix(".log")
    for ln in (log.read_text().splitlines() if log.is_file() else []):   # no log: the phases are not told apart
        head, _, text = ln.strip().partition(" ")
        try:
            stamped.append((float(head), text))
        except ValueError:
            continue
    return rows, stamped


def samples_path(out: Path) -> Path:
    return out.with_suffix(".samples.tsv")


def table(rows: list[tuple[float, float, float]], stamped: list[tuple[float, str]], phases: list[tuple[str, str]],
          wall: float, head: str) -> str:
    """The Markdown table: per phase and over the whole run, then the 10 s bins."""
    starts: dict[str, float] = {}
    for t, text in stamped:
        for name, pattern in phases:
            if name not in starts and re.search(pattern, text):
                starts[name] = t
    bounds = sorted((t, n) for n, t in starts.items()) + [(wall, "")]
    lines = [head, "", "| phase | from s | seconds | samples | at 0% | mean utilisation | peak memory MiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for (start, name), (end, _) in zip(bounds, bounds[1:]):
        lines.append(_row(name, start, end, [r for r in rows if start <= r[0] < end]))
    lines.append(_row("all", 0.0, wall, rows))
    missing = [name for name, _ in phases if name not in starts]
    if missing:   # a phase that never began (the command cut, or it printed otherwise): said, not left out silently
        lines += ["", "phases that did not begin: " + ", ".join(missing)]
    bins = []
    for b in range(0, int(wall) + 1, 10):
        part = [r[1] for r in rows if b <= r[0] < b + 10]
        bins.append(f"{sum(part) / len(part):.0f}" if part else "-")
    lines += ["", "utilisation by 10 s bin (mean %; - no sample): " + " ".join(bins)]
    return "\n".join(lines) + "\n"


def _row(name: str, start: float, end: float, part: list[tuple[float, float, float]]) -> str:
    idle = sum(r[1] == 0 for r in part)
    mean = f"{sum(r[1] for r in part) / len(part):.0f}%" if part else "-"
    peak = f"{max(r[2] for r in part):.0f}" if part else "-"
    return f"| {name} | {start:.0f} | {end - start:.0f} | {len(part)} | {idle} | {mean} | {peak} |"


def run(command: list[str], out: Path, limit_s: float | None, sampling: bool = True) -> tuple[int, float, str]:
    """Run `command`, stamping its output into `<out>.log` while the sampler writes beside it (with `sampling`;
    else the samples file stays empty); returns its exit code, the wall time and how it ended."""
    stop, t0 = threading.Event(), time.time()
    samples_path(out).write_text("")
    sampler = threading.Thread(target=sample, args=(stop, t0, samples_path(out)), daemon=True)
    if sampling:
        sampler.start()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True)   # its own process group: a Ctrl-C reaches all of it
    ended = {"how": "ended"}

    def signal_group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:   # the whole group has ended
            pass

    def interrupt(why: str) -> None:
        if ended["how"] == "ended":
            ended["how"] = why
            signal_group(signal.SIGINT)
            # the whole group, not only the command: a child it left behind would hold the output pipe open
            killer = threading.Timer(GRACE_S, signal_group, args=(signal.SIGKILL,))
            killer.daemon = True
            killer.start()

    signal.signal(signal.SIGTERM, lambda *_: interrupt("stopped by SIGTERM"))
    timer = None
    if limit_s is not None:
        timer = threading.Timer(limit_s, interrupt, args=(f"cut at the {limit_s:g} s limit",))
        timer.daemon = True
        timer.start()
    read_all = threading.Event()

    def reap() -> None:   # the command ended but a process it left holds the output pipe open: ended too, after 5 s
        proc.wait()
        if not read_all.wait(5.0):
            signal_group(signal.SIGKILL)

    threading.Thread(target=reap, daemon=True).start()
    with open(out.with_suffix(".log"), "w") as fh:
        for line in proc.stdout:
            fh.write(f"{time.time() - t0:7.1f} {line}")
            fh.flush()
            sys.stdout.write(line)
        read_all.set()
        rc = proc.wait()
    if timer is not None:   # a command that ended in time is not reported cut by a limit that falls after it
        timer.cancel()
    wall = time.time() - t0
    stop.set()
    if sampling:
        sampler.join()
    return rc, wall, ended["how"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None,
                    help="Markdown table to write (the stamped log and the samples beside it)")
    ap.add_argument("--phase", action="append", default=None, metavar="NAME=REGEX",
                    help="a phase starting at the first output line matching REGEX (repeatable)")
    ap.add_argument("--limit-s", type=float, default=None,
                    help="interrupt the command after this many seconds and write the table of what ran")
    ap.add_argument("--from-files", action="store_true",
                    help="run nothing: write the table from the log and samples an earlier run left beside --out")
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: a 2 s Python command, into a temporary folder (no GPU needed)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args(argv)
    sampling = shutil.which("nvidia-smi") is not None
    if args.smoke:
        import tempfile

        from benchmarks.provenance import smoke_skips

        args.out = args.out or Path(tempfile.mkdtemp(prefix="mlvp-gpu-busy-smoke-")) / "busy.md"
        args.command = args.command or [sys.executable, "-c", "import time; print('smoke started', flush=True); "
                                        "time.sleep(1); print('clean R@1 v2t 1 -> 2', flush=True); time.sleep(1); "
                                        "print('done in 2 s')"]
        args.limit_s = args.limit_s or 60.0
        if not sampling:
            smoke_skips("the GPU samples", "no nvidia-smi here: an NVIDIA GPU is needed")
    if args.out is None:
        ap.error("--out is required (or --smoke)")
    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    phases = [tuple(p.split("=", 1)) for p in args.phase] if args.phase else list(PHASES)
    if args.from_files:
        if not samples_path(args.out).exists():
            ap.error(f"--from-files: no {samples_path(args.out)} (the samples of an earlier run with --out "
                     f"{args.out})")
        rows, stamped = read_files(args.out)
        wall = max([r[0] for r in rows] + [t for t, _ in stamped] + [0.0])
        head = (f"from the files of an earlier run (its command's end not recorded: the run was cut); "
                f"{wall:.0f} s recorded, {len(rows)} one-second samples")
    else:
        if not command:
            ap.error("give the command after --, or --from-files")
        if not sampling and not args.smoke:
            print("gpu_busy: no nvidia-smi here (an NVIDIA GPU is needed)", file=sys.stderr)
            return 2
        rc, wall, how = run(command, args.out, args.limit_s, sampling)
        rows, stamped = read_files(args.out)
        head = (f"command: `{' '.join(command)}` ({how}, exit {rc}), wall {wall:.0f} s, {len(rows)} one-second "
                "samples")
    text = table(rows, stamped, phases, wall, head)
    args.out.write_text(text)
    print(text)
    return 0 if args.from_files else rc


if __name__ == "__main__":
    sys.exit(main())
