"""The configurations a grid's `search:` section (orchestrator/config/search.py) runs for each method, drawn when the
grid is planned, so the plan stays pure data and every configuration is a TrialSpec with a content key.

- grid: every combination of the listed values, in the order they are written (`grid-1`, `grid-2`, ...);
- random: `budget` draws as Ray Tune's search-space domains make them (`draw`: `tune.choice`, `tune.uniform`,
  `tune.loguniform`, `tune.randint`, from a generator seeded from `search.seed` and the method's name; Ray itself is
  not imported here: pyproject.toml's contract keeps it out of the planning layer): `random-1` ... The same
  seed draws the same configurations on every machine, so `resume` and a re-submission find them again by their
  keys; a larger budget keeps the earlier draws (each draw is sampled in turn from one generator), so extending a
  search reuses every trial it ran;
- tpe: proposed one after another by Optuna's TPE through Ray Tune's `OptunaSearch` while the grid runs, since each
  proposal depends on the results before it (orchestrator/run/search.py); the plan holds none of them and `plan`
  counts `budget` per (method, cell, seed).

The same configurations run in every cell and seed of the method, so a configuration chosen on one shift can be read
on another (the cross-shift protocol, orchestrator/report/selection.py). Sampled floats are kept to 4 significant
digits: the name, the MLflow params and the key read the same number.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.config.search import Domain, grid_combinations, method_domains
from workloads.seeding import digest, stable_seed


@dataclass(frozen=True)
class SearchedConfig:
    """One configuration of a method: its name (the TrialSpec's `config`; "" for the grid's own), the option values
    it sets over the grid's options, and its `steps` (None: runtime.steps)."""
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None


def draw(d: Domain, rng: np.random.Generator) -> Any:
    """One value of a searched option from `rng`, drawn as Ray Tune's search-space domains draw theirs (`tune.choice`:
    an index into the values; `tune.uniform`; `tune.loguniform`: uniform in log space; `tune.randint(low, high + 1)`),
    so the configurations keep the keys they had when they were drawn through Tune, without Ray in the planning layer
    (tests/test_search.py draws both ways and compares)."""
    if d.is_list:
        return d.values[int(rng.choice(np.arange(len(d.values)), size=1)[0])]
    if d.distribution == "uniform":
        return float(rng.uniform(d.low, d.high, size=1)[0])
    if d.distribution == "loguniform":
        return float(np.exp(rng.uniform(np.log(d.low), np.log(d.high), size=1))[0])
    return int(rng.integers(int(d.low), int(d.high) + 1, size=1)[0])   # the grid's upper bound is inclusive


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    return value.item() if hasattr(value, "item") else value     # numpy scalars from Tune's samplers


def split_config(name: str, values: dict[str, Any]) -> SearchedConfig:
    values = {k: _rounded(v) for k, v in values.items()}
    steps = values.pop("steps", None)
    return SearchedConfig(name, values, None if steps is None else int(steps))


def sampled_configs(grid, entry: str) -> list[SearchedConfig]:
    """The searched configurations of one `methods:` entry drawn at plan time ([] for none, and for TPE, whose
    configurations are proposed while the grid runs)."""
    domains = method_domains(grid, entry)
    if not domains or grid.search.algorithm == "tpe":
        return []
    s = grid.search
    if s.algorithm == "grid":
        return [split_config(f"grid-{i}", combo) for i, combo in enumerate(grid_combinations(domains), start=1)]

    rng = np.random.default_rng(stable_seed("search", s.seed, entry))
    return [split_config(f"random-{i}", {d.name: draw(d, rng) for d in domains}) for i in range(1, s.budget + 1)]


def configs_per_cell(grid, entry: str) -> int:
    """How many configurations of the entry run in each cell and seed: the grid's own plus the searched ones."""
    if not method_domains(grid, entry):
        return 1
    return 1 + (grid.search.budget if grid.search.algorithm == "tpe" else len(sampled_configs(grid, entry)))


def tpe_streams(plan) -> list:
    """The TPE searches of a plan: one per trial of the grid's own configuration of a method the grid searches with
    TPE (a (method, cell, backbone, seed)), each to propose `search.budget` configurations while the grid runs."""
    s = plan.grid.search
    if s is None or s.algorithm != "tpe":
        return []
    return [t for t in plan.trials if not t.config and t.method_label in s.methods]


def searched_count(plan) -> int:
    """Searched trials of the plan: the configurations drawn at plan time plus the ones TPE will propose."""
    drawn = sum(1 for t in plan.trials if t.config and not t.config.startswith("tpe-"))
    return drawn + len(tpe_streams(plan)) * plan.grid.search.budget


# -- TPE: configurations proposed while the grid runs, recorded beside its results ------------------------------------
def tpe_record_path(plan, stream):
    """Where the configurations TPE proposed for one stream (its grid-configuration trial `stream`) are recorded, in
    proposal order: results/<grid>/search/tpe-<digest>.json. The digest covers the stream's trial key and what shapes
    the proposals (the space, the objective, the sampler's seed), not the budget: a larger budget goes on from it."""
    s = plan.grid.search
    ident = digest({"trial": stream.key, "space": s.methods.get(stream.method_label), "objective": s.objective,
                    "seed": s.seed})
    return plan.paths.grid_dir(plan.grid.name) / "search" / f"tpe-{ident}.json"


def tpe_spec(stream, config: SearchedConfig):
    """The trial of one proposed configuration: the stream's trial with the configuration's options and steps."""
    options = {**json.loads(stream.options), **config.options}
    return dataclasses.replace(stream, config=config.name, options=json.dumps(options),
                               steps=config.steps or stream.steps)


def read_tpe_record(path) -> list[SearchedConfig]:
    """The configurations recorded for a stream ([] when none: nothing proposed yet, or an unreadable record)."""
    try:
        raw = json.loads(path.read_text())
        return [SearchedConfig(c["name"], dict(c["options"]), c.get("steps")) for c in raw["configs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def recorded_tpe_trials(plan) -> list:
    """Every trial TPE has proposed so far for the plan's streams (from their records), in proposal order: the
    tables, `status` and `resume` find them as they find the plan's own."""
    return [tpe_spec(stream, c) for stream in tpe_streams(plan)
            for c in read_tpe_record(tpe_record_path(plan, stream))[:plan.grid.search.budget]]


def searched_options(grid) -> dict[str, tuple[str, ...]]:
    """Method entry -> the names of the options its search varies, in the order the grid writes them ({} without a
    `search:` section)."""
    s = getattr(grid, "search", None)
    return {} if s is None else {entry: tuple(space) for entry, space in s.methods.items()}


def config_text(spec, names: dict[str, tuple[str, ...]]) -> str:
    """What tells a searched trial's configuration apart on the console: the values of the options its method's search
    varies (`lr=3.2e-05 temperature=0.0012 steps=3`, floats to 3 significant digits); "" for the grid's own
    configuration. A method whose searched options are not known here reads as the configuration's name."""
    if not spec.config:
        return ""
    varied = names.get(spec.method_label)
    if not varied:
        return spec.config
    options = spec.method_options
    return " ".join(f"{name}={_value_text(spec.steps if name == 'steps' else options.get(name))}" for name in varied)


def _value_text(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def config_text_width(grid, entry: str) -> int:
    """The widest `config_text` any configuration of a method entry can have (0 when the grid searches nothing for
    it): known before the first trial, so a submission's console columns fit the configurations TPE proposes while
    it runs as well as the ones drawn at plan time."""
    widths = []
    for d in method_domains(grid, entry):
        if d.is_list:
            value = max(len(_value_text(_rounded(v))) for v in d.values)   # as split_config keeps them
        elif d.distribution == "randint":
            value = max(len(str(int(d.low))), len(str(int(d.high))))
        else:
            # `.3g` writes a float as at most "1.23e-05" or "0.000123", sign included where the range is negative:
            # no wider than the range's ends written as "%.2e"
            value = max(len(f"{d.low:.2e}"), len(f"{d.high:.2e}"))
        widths.append(len(d.name) + 1 + value)
    return sum(widths) + max(len(widths) - 1, 0)


def search_line(plan) -> str:
    """One line for `plan` and `submit`: how many searched trials the grid runs, and how."""
    s = plan.grid.search
    n = searched_count(plan)
    drawn = sum(1 for t in plan.trials if t.config and not t.config.startswith("tpe-"))
    how = (f"{len(tpe_streams(plan))} TPE searches x {s.budget} proposals, made while the grid runs "
           f"(objective {s.objective}; {n - drawn} counted, {len(recorded_tpe_trials(plan))} proposed so far)"
           if s.algorithm == "tpe" else f"{s.algorithm} search, drawn when planned (search.seed {s.seed})")
    return (f"searched: {n} trials of {len(s.methods)} methods' configurations ({how}); each configuration runs in "
            f"every cell and seed beside the grid's own")
