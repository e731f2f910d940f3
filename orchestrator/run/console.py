"""What the commands print: the console (never wrapped, so a log file keeps paths and keys whole) and a plan's
description before it runs."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from orchestrator.planning.describe import sizing_lines
from orchestrator.planning.plan import Plan


def make_console() -> Console:
    """The console every command prints to. Lines are never wrapped (soft wrap): a log file or a pipe keeps paths
    and trial keys whole instead of breaking them at 80 columns."""
    return Console(highlight=False, soft_wrap=True)


def print_plan(plan: Plan, status: dict[str, str], todo: list, console: Console) -> None:
    from collections import Counter

    c = Counter(status.values())
    console.print(f"[bold]grid[/] {plan.grid.name} ({plan.grid.source}): {len(plan.trials)} trials "
                  f"({c.get('ok', 0)} done, {c.get('failed', 0)} failed, {c.get('missing', 0)} new) -> "
                  f"{len(todo)} to run")
    for scenario, n in Counter(t.scenario for t in plan.trials).items():
        console.print(f"  {scenario}: {n} trials")
    for name, ds in plan.datasets.items():
        announce_generation(name, ds.dataset, console)
        cells = plan.renders.get(name, [])
        n = "unknown" if ds.size is None else ds.size   # annotations not on disk yet (sizing: plan_for_sizing)
        role = f"{len(cells)} render cells ({n * len(cells) if ds.size is not None else n} clips at " \
            f"{plan.resolution}px)" if cells else "training data only"
        console.print(f"  dataset {name}: {n} test pairs, {role}")
    for (backbone, source), m in plan.models.items():
        if m.given_path:
            what = m.given_path
        elif m.clip_only:
            what = f"pretrain here on {m.train_dataset} (image-text)"
        else:
            what = "fine-tune here" + (f" from {m.init_from[0]}" if m.init_from else "")
        cached = not m.given_path and plan.model_path(backbone, source).is_file()
        console.print(f"  checkpoint {backbone}/{source}: {what}{' (cached)' if cached else ''}")

    for line in sizing_lines(plan):
        console.print(f"  {escape(line)}")
    if plan.text_sets:
        cached = sum(1 for j in plan.text_sets if j.key.path(plan.paths.render).is_file())
        stand_in = sum(1 for j in plan.text_sets if j.stand_in is not None)
        console.print(f"  text sets (perturbed captions): {len(plan.text_sets)} ({cached} cached"
                      + (f"; {stand_in} use the backbone's text encoder as the similarity-retry stand-in, flagged "
                         "unfaithful: give assets.sentence_encoder for the reference encoder" if stand_in else "")
                      + ")")
    for note in plan.notes:
        console.print(f"  [yellow]note[/]: {escape(note)}")


def announce_generation(name: str, dataset, console: Console) -> None:
    """Say so before a generated dataset is built on first use (it takes a few seconds and prints nothing)."""
    location = getattr(dataset, "location", None)
    config = getattr(dataset, "config", None)
    if location is None or config is None:
        return
    from workloads.datasets.synthetic import is_complete

    if not is_complete(location, config):
        sizes = f"{config.size}px"
        if getattr(config, "version", 1) == 2:  # test clips at their native size, train clips cheaper
            train_px = min(config.train_size or config.size, config.size)
            sizes = f"test {config.size}px {config.fps} fps, train {train_px}px"
        console.print(f"generating dataset {name} ({config.n_train} train / {config.n_test} test clips, "
                      f"{sizes}, H.264) into {location} (first use only) ...")


