"""Mixed shifts (the paper's appendix D.2): each query of a trial draws its own perturbation.

- mixed severities (Table 17): every query corrupted by one type, each at a severity drawn from a list;
- mixed types (Table 18): a fraction of the queries corrupted, each by a type and a severity drawn from lists, the
  rest clean.

A mix is part of the trial's key (`TrialSpec.mix`, canonical JSON). The draws depend only on (dataset, the mix, the
query's position, grid seed): every method and backbone of a cell sees the same corrupted queries, as they see the
same clips in a plain cell.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from workloads.seeding import stable_seed

CLEAN = "clean"


@dataclass(frozen=True)
class Mix:
    perturbations: tuple[str, ...]    # the pool of types a corrupted query draws from
    severities: tuple[int, ...]       # the pool of severities
    fraction: float = 1.0             # share of the queries corrupted (rounded to a whole number of queries)

    def __post_init__(self):
        if not self.perturbations or not self.severities:
            raise ValueError("a mix needs at least one perturbation and one severity")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"a mix's fraction of corrupted queries must be in (0, 1], got {self.fraction}")

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "perturbations": list(self.perturbations),
                           "severities": list(self.severities)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Mix":
        d = json.loads(text)
        return cls(tuple(d["perturbations"]), tuple(int(s) for s in d["severities"]), float(d["fraction"]))

    def draws(self, dataset: str, n_queries: int, seed: int) -> list[tuple[str, int]]:
        """(perturbation, severity) of each of `n_queries` queries in stream order; ("clean", 0) when spared."""
        rng = np.random.default_rng(stable_seed("mix", dataset, self.to_json(), seed))
        corrupted = np.zeros(n_queries, bool)
        corrupted[rng.choice(n_queries, int(round(self.fraction * n_queries)), replace=False)] = True
        out = []
        for hit in corrupted:
            if hit:
                out.append((self.perturbations[int(rng.integers(len(self.perturbations)))],
                            self.severities[int(rng.integers(len(self.severities)))]))
            else:
                out.append((CLEAN, 0))
        return out

    def cells(self) -> list[tuple[str, int]]:
        """Every (perturbation, severity) a query of this mix can draw."""
        return [(p, s) for p in self.perturbations for s in self.severities]
