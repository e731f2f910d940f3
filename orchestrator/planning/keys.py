"""The keys a plan's units are found by, each a small frozen dataclass with one constructor, and the names the
`ReadyGate` (orchestrator/run/gate.py) knows them by:

- `CheckpointKey(backbone, source)`: one checkpoint of the plan (`Plan.models`), the backbone as the grid names it (a
  backbone variant's label) and the dataset it was fine-tuned on (or PRETRAINED); `CheckpointKey.of(spec)` is the one
  way to get a trial's. Its one string form, `name` ("<backbone>|<source>"), keys the checkpoints of the JSON-able
  trial environment (orchestrator/planning/environment.py); its gate need is "check:<name>" (checkpoint made,
  galleries encoded, clean check passed).
- `RenderSet(dataset, perturbation, severity)`: every test clip of a dataset at one cell (orchestrator/planning/
  render_sets.py); its gate need is "render:<dataset>/<perturbation>/<severity>".
- `TEXT_SETS`: the one gate need of the text sets (a perturbed t2v cell waits for them all).

Nothing else builds these strings: the gate, the submission's timeline (orchestrator/run/submit.py) and the workers
read them from here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workloads.spec import TrialSpec

TEXT_SETS = "text:all"   # the gate need every perturbed t2v trial waits for: the plan's text sets, all written


@dataclass(frozen=True, order=True)
class CheckpointKey:
    """One checkpoint of a plan: the backbone as the grid names it (a variant's label) and its source (the dataset it
    is fine-tuned on, or PRETRAINED for the zero-shot CLIP)."""

    backbone: str
    source: str

    @classmethod
    def of(cls, spec: TrialSpec) -> CheckpointKey:
        """The checkpoint a trial runs with: its backbone's grid name, fine-tuned on its source (its own dataset when
        the cell names none)."""
        return cls(spec.backbone_label, spec.source_dataset or spec.dataset)

    @property
    def name(self) -> str:
        """The key's one string form ("<backbone>|<source>"): what keys the trial environment's checkpoints, which
        travel to the workers as JSON."""
        return f"{self.backbone}|{self.source}"

    @property
    def need(self) -> str:
        """The ReadyGate need its clean check satisfies."""
        return f"check:{self.name}"


@dataclass(frozen=True, order=True)
class RenderSet:
    """Every test clip of `dataset` at one cell (at every seed of the grid): the unit a trial reads from the render
    cache and the render stream announces. `severity` is held as an int (0 for clean)."""

    dataset: str
    perturbation: str
    severity: int

    def __post_init__(self):
        # Ray Data rows and YAML may hand a severity as another number type; the key compares and hashes as an int
        object.__setattr__(self, "severity", int(self.severity))

    @property
    def need(self) -> str:
        """The ReadyGate need the set satisfies once its last clip is in the cache."""
        return f"render:{self.dataset}/{self.perturbation}/{self.severity}"
