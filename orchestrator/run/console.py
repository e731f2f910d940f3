"""What the commands print, and where the libraries' output goes.

Our console shows the plan, progress bars and one line per trial; it is never wrapped (a log file or a pipe keeps
paths and trial keys whole) and writes no colour codes where stdout is not a terminal. Ray, Ray Tune and MLflow
print a lot of their own (start-up banners, configuration boxes, C++ log lines of Ray's core, worker output,
database migrations): `quiet_libraries` sends all of it, at the file-descriptor level so that child processes and
C++ code follow, to a log file under the grid's results (`results/<grid>/logs/`), while our console keeps the
terminal. `--verbose` leaves everything on the terminal.

A progress display (rich's `Progress`) must not take Python's output back: by default, on a terminal, it replaces
`sys.stdout` and `sys.stderr` with proxies that print above the bars, and Ray's driver prints its workers' lines
(`(_finetune_task pid=...)`) and Ray Tune its configuration box through them, so they reached the terminal though
the file descriptors were the log's. Every progress display is made with `redirect_stdout=sys.stdout.isatty()` (and
the same for stderr): off while `quiet_libraries` holds the output (the streams are the log file), on with
`--verbose` (library lines print above the bars instead of through them). tests/test_console_terminal.py runs
`submit` on a pseudo-terminal and checks.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.markup import escape

from orchestrator.planning.describe import grouped_notes, plan_estimate, scale_warning, short_list, sizing_lines
from orchestrator.planning.plan import Plan
from orchestrator.planning.search import search_line
from workloads.datasets.synthetic import is_complete


def make_console(file=None) -> Console:
    """The console every command prints to (`file`: default stdout). Lines are never wrapped (soft wrap): a log file
    or a pipe keeps paths and trial keys whole instead of breaking them at 80 columns; rich writes colours only to a
    terminal."""
    return Console(file=file, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def quiet_libraries(log: Path | None, verbose: bool = False) -> Iterator[Console]:
    """Everything written to stdout and stderr inside the block, by this process, its threads and the processes it
    starts (Ray's raylet and workers, the MLflow tracking process), goes to `log` (appended); yields the console
    that still writes to the terminal. With `verbose` or without a log, nothing is redirected."""
    if verbose or log is None:
        if not _is_terminal(1):
            _no_library_colours()
        yield make_console()
        return
    _no_library_colours()
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    streams = sys.stdout, sys.stderr
    try:
        terminal = os.fdopen(os.dup(saved[1]), "w", buffering=1) if _is_fd(sys.stdout, 1) else sys.stdout
    except OSError:
        terminal = sys.stdout
    out = open(log, "a", buffering=1)
    out.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}\n")
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    sys.stdout = sys.stderr = out
    try:
        yield make_console(terminal)
    finally:
        # the terminal comes back even when the log's disk is full (a failed flush left it behind: our last line
        # was lost and Python exited 120 failing to flush it, issue 47)
        with contextlib.suppress(OSError):
            out.flush()
        sys.stdout, sys.stderr = streams
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        with contextlib.suppress(OSError):
            out.close()
        if terminal is not streams[0]:
            terminal.close()


def _no_library_colours() -> None:
    """Ray wraps its workers' log prefixes in ANSI colour codes whatever its output is; its own switch,
    RAY_COLOR_PREFIX=0, turns them off, for output that goes to a log file or a pipe (read by Ray's driver when it
    prints each line). A value the user set stays."""
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _is_fd(stream, fd: int) -> bool:
    """Whether `stream` writes to file descriptor `fd` (not a pytest capture or a StringIO)."""
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


def log_path(results_grid_dir: Path, command: str) -> Path:
    """Where a command's library output goes: results/<grid>/logs/<command>-<time>.log."""
    return results_grid_dir / "logs" / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}.log"


def print_plan(plan: Plan, status: dict[str, str], todo: list, console: Console, verbose: bool = False) -> None:
    c = Counter(status.values())
    damaged = f"{c['damaged']} damaged, " if c.get("damaged") else ""
    console.print(f"[bold]grid[/] {plan.grid.name} ({plan.grid.source}): {len(plan.trials)} trials "
                  f"({c.get('ok', 0)} done, {c.get('failed', 0)} failed, {damaged}{c.get('missing', 0)} new) -> "
                  f"{len(todo)} to run")
    estimated = plan_estimate(plan, todo=todo)   # once: the warning and the sizing lines share it
    if warning := scale_warning(plan, estimated):
        console.print(f"  [yellow]warning[/]: {escape(warning)}")
    for scenario, n in Counter(t.scenario for t in plan.trials).items():
        console.print(f"  {scenario}: {n} trials")
    if len(plan.seeds) > 1:
        console.print(f"  seeds: {short_list(plan.seeds)} (every trial and render set at each)")
    if plan.grid.search is not None:
        console.print(f"  {search_line(plan)}")
    for name, ds in plan.datasets.items():
        announce_generation(name, ds.dataset, console)
        cells = plan.renders.get(name, [])
        n = "unknown" if ds.size is None else ds.size   # annotations not on disk yet (sizing: plan_for_sizing)
        role = f"{len(cells)} render cells ({n * len(cells) if ds.size is not None else n} clips at " \
            f"{plan.resolution}px)" if cells else "training data only"
        console.print(f"  dataset {name}: {n} test pairs, {role}")
    for key, m in plan.models.items():
        if m.given_path:
            what = m.given_path
        elif m.clip_only:
            what = f"pretrain here on {m.train_dataset} (image-text)"
        else:
            what = "fine-tune here" + (f" from {m.init_from.backbone}" if m.init_from else "")
        cached = not m.given_path and plan.model_path(key).is_file()
        console.print(f"  checkpoint {key.backbone}/{key.source}: {what}{' (cached)' if cached else ''}")

    for line in sizing_lines(plan, todo=todo, verbose=verbose, estimated=estimated):
        console.print(f"  {escape(line)}")
    if plan.text_sets:
        cached = sum(1 for j in plan.text_sets if j.key.path(plan.paths.render).is_file())
        stand_in = sum(1 for j in plan.text_sets if j.stand_in is not None)
        console.print(f"  text sets (perturbed captions): {len(plan.text_sets)} ({cached} cached"
                      + (f"; {stand_in} use the backbone's text encoder as the similarity-retry stand-in, flagged "
                         "unfaithful: give assets.sentence_encoder for the reference encoder" if stand_in else "")
                      + ")")
    for note in grouped_notes(plan.notes, plan.datasets):   # "... on 5 datasets (...)": one line, not five
        console.print(f"  [yellow]note[/]: {escape(note)}")


def announce_generation(name: str, dataset, console: Console) -> None:
    """Say so when a generated dataset is not generated yet: `submit` builds it on first use (it takes a while and
    prints nothing); `plan` only says so."""
    location = getattr(dataset, "location", None)
    config = getattr(dataset, "config", None)
    if location is None or config is None:
        return

    if not is_complete(location, config):
        sizes = f"{config.size}px"
        if getattr(config, "version", 1) == 2:  # test clips at their native size, train clips cheaper
            train_px = min(config.train_size or config.size, config.size)
            sizes = f"test {config.size}px {config.fps} fps, train {train_px}px"
        console.print(f"  dataset {name} is generated on first use ({config.n_train} train / {config.n_test} test "
                      f"clips, {sizes}, H.264) into {location}")


