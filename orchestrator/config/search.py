"""The grid's `seeds:` and `search:` sections, checked when the grid loads (orchestrator/config/grid.py `validate`).

`search.methods.<method>` maps an option of that method (any of its OPTIONS, the options every method takes, or the
runtime knob `steps`) to a *domain*: a list of values (a choice; grid search takes every combination of the lists)
or a one-key mapping `{uniform | loguniform | randint: [low, high]}` (random and TPE search only; randint includes
`high`). Both ends of a range and every listed value must pass the option's own rule, so a configuration the sampler
draws is one the method accepts. What a search runs, how its configurations are keyed and resumed:
docs/notes/2026-11-27-hp-selection.md and orchestrator/planning/search.py.

The label-free signals the selection tables pick by (`SURROGATES` in orchestrator/config/schema.py, computed per
trial by workloads/selection.py and workloads/trial.py):
- pred_entropy: mean entropy of each query's softmax over the gallery at a fixed temperature (lower: more confident);
- hub_skewness: k-occurrence skewness of the adapted scores (lower: less hubness);
- snd: soft neighbourhood density of the adapted query embeddings (Saito et al. 2021; higher: denser neighbourhoods);
- uniformity_adapted, modality_gap_adapted: TCR's diagnostics of the adapted queries (higher uniformity, smaller gap);
- source_R1: R@1 on clean pairs of the source train split after adapting on the shifted stream ("source accuracy":
  it uses the source domain's labels, never the test labels).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from orchestrator.config.errors import GridError, check_choice, short_repr
from workloads.methods import METHODS
from workloads.options import Option, OptionError

DISTRIBUTIONS = ("uniform", "loguniform", "randint")
STEPS = Option(int, 3, min=1, doc="adaptation steps per batch (runtime.steps)")   # searchable beside the options


@dataclass(frozen=True)
class Domain:
    """One searched option: `values` (a choice) or a distribution over [low, high]."""
    name: str
    values: tuple | None = None
    distribution: str = ""
    low: float = 0.0
    high: float = 0.0

    @property
    def is_list(self) -> bool:
        return self.values is not None


def check_seeds(grid) -> None:
    """`seeds:` a non-empty list of distinct seeds >= 0 when given, and not beside a `seed:` it would contradict."""
    if not grid.seeds:
        return
    for i, s in enumerate(grid.seeds):
        if s < 0:
            raise GridError(f"seeds[{i}]: must be an integer >= 0, got {s}")
    seen: set[int] = set()   # one pass: a long list is not counted once per seed
    dup = next((s for s in grid.seeds if s in seen or seen.add(s)), None)
    if dup is not None:
        raise GridError(f"seeds: {dup} is listed twice; list each seed once")


def method_domains(grid, entry: str) -> list[Domain]:
    """The parsed domains of one method entry's search space ([] when the grid searches nothing for it)."""
    if grid.search is None or entry not in grid.search.methods:
        return []
    return [_domain(f"search.methods.{entry}.{name}", name, raw) for name, raw in grid.search.methods[entry].items()]


def _domain(where: str, name: str, raw: Any) -> Domain:
    if isinstance(raw, list):
        if not raw:
            raise GridError(f"{where}: list at least one value")
        return Domain(name, values=tuple(raw))
    if isinstance(raw, dict) and len(raw) == 1:
        (dist, bounds), = raw.items()
        check_choice(where, dist, list(DISTRIBUTIONS))
        if (not isinstance(bounds, list) or len(bounds) != 2
                or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)):
            raise GridError(f"{where}.{dist}: give [low, high], two numbers, got {short_repr(bounds)}")
        low, high = float(bounds[0]), float(bounds[1])
        if not low < high:
            raise GridError(f"{where}.{dist}: low must be below high, got [{bounds[0]}, {bounds[1]}]")
        if dist == "loguniform" and low <= 0:
            raise GridError(f"{where}.loguniform: low must be > 0 (a log scale), got {bounds[0]}")
        if dist == "randint" and not (low.is_integer() and high.is_integer()):
            raise GridError(f"{where}.randint: give integer bounds, got [{bounds[0]}, {bounds[1]}]")
        return Domain(name, distribution=dist, low=low, high=high)
    raise GridError(f"{where}: give a list of values or one of {{{', '.join(DISTRIBUTIONS)}: [low, high]}}, "
                    f"got {short_repr(raw)}")


def searchable(method: str) -> dict[str, Option]:
    """The options a search may vary for a registered method: its own, the common ones, and `steps`."""
    cls = METHODS.lookup(method)
    return {**cls.COMMON_OPTIONS, **cls.OPTIONS, "steps": STEPS}


def check_search(grid) -> None:
    """Every searched method is one of the grid's (not Source: it has nothing to tune), every option one it takes,
    every value and range end within the option's rule; grid search takes lists only and at most `budget`
    combinations; a TPE search on source_R1 needs `source_pairs` > 0 (without them no trial reports it)."""
    s = grid.search
    if s is None:
        return
    if s.algorithm == "tpe" and s.objective == "source_R1" and not s.source_pairs:
        raise GridError("search.objective: source_R1 needs source pairs to retrieve: set search.source_pairs (e.g. "
                        "128) or choose another objective")
    if not s.methods:
        raise GridError("search.methods: name at least one method to search, e.g. tent: {lr: {loguniform: [1e-5, "
                        "1e-3]}}")
    for entry, space in s.methods.items():
        where = f"search.methods.{entry}"
        if entry not in grid.methods:
            raise GridError(f"{where}: not a method of this grid; grid methods: {', '.join(grid.methods)}")
        method = grid.variants[entry].method if entry in grid.variants else entry
        if method == "source":
            raise GridError(f"{where}: Source does not adapt, so it has nothing to search; leave it out")
        if not space:
            raise GridError(f"{where}: name at least one option to search")
        allowed = searchable(method)
        for domain in method_domains(grid, entry):
            key = f"{where}.{domain.name}"
            check_choice(key, domain.name, list(allowed))
            rule = allowed[domain.name]
            ends = domain.values if domain.is_list else (domain.low, domain.high)
            for v in ends:
                try:
                    rule.check(key, v)
                except OptionError as err:
                    raise GridError(str(err)) from None
            if not domain.is_list and rule.kind is int and domain.distribution != "randint":
                raise GridError(f"{key}: {domain.name} takes integers: use a list or randint: [low, high]")
            if s.algorithm == "grid" and not domain.is_list:
                raise GridError(f"{key}: grid search takes lists of values; write the values, or set "
                                "search.algorithm: random or tpe")
        if s.algorithm == "grid":
            n = math.prod(len(d.values) for d in method_domains(grid, entry))
            if n > s.budget:
                raise GridError(f"{where}: grid search has {n} combinations, more than search.budget ({s.budget}); "
                                "raise the budget or list fewer values")


def grid_combinations(domains: list[Domain]) -> list[dict[str, Any]]:
    """Every combination of the listed values, in the order the lists are written (grid search)."""
    names = [d.name for d in domains]
    return [dict(zip(names, combo)) for combo in itertools.product(*(d.values for d in domains))]
