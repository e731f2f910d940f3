"""A trial as pure data: one cell of the MLVP matrix.

`TrialSpec` holds every input that determines a trial's result (axes, seeds, runtime knobs, data and model
versions) and nothing about where files live, so its `key` can index a ledger across machines and re-submissions.
`TrialResult` is what a trial returns (workloads/trial.py `run`); both import nothing heavy, so the driver and a
no-op trial handle them without torch.
"""
from __future__ import annotations

import json
import functools
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from workloads import RENDER_VERSION, TRIAL_VERSION
from workloads.seeding import digest

CLEAN = "clean"
DIRECTIONS = ("v2t", "t2v")


def cell_label(perturbation: str, severity: int) -> str:
    """The one name of a (perturbation, severity) cell: "clean", "gaussian_noise-3". Safe in file and run names."""
    return perturbation if not severity else f"{perturbation}-{severity}"


# field -> default of the fields added to TrialSpec after keys were first recorded (see TrialSpec.key)
_ADDED_FIELDS = {"mix": "", "config": "", "stream_order": "", "source_pairs": 0, "backbone_options": "",
                 "backbone_variant": "", "protocol": "", "protocol_options": "", "segments": ""}


@dataclass(frozen=True)
class TrialSpec:
    dataset: str                 # target dataset (queries and gallery)
    direction: str               # "v2t" (video queries) or "t2v" (text queries)
    scenario: str                # a registered scenario (orchestrator/config/scenarios/): query_shift, ...
    perturbation: str            # "clean" or a perturbation name of the query modality
    severity: int                # 0 for clean
    method: str                  # a registered method
    backbone: str
    seed: int = 0
    faithful: bool = True
    source_dataset: str = ""     # the dataset the checkpoint was fine-tuned on, or "pretrained" (zero-shot)
    clip_model: str = "mlvp-tiny"
    model_version: str = ""      # content key of the weights (fine-tune key or file digest)
    data_version: str = ""       # content key of the dataset's annotations / generator config
    batch_size: int = 16
    steps: int = 3
    num_frames: int = 12
    resolution: int = 64
    precision: str = "fp32"
    hub_k: int = 10
    options: str = "{}"          # method options (lr override, ablation switches) as canonical JSON
    render_assets: str = ""      # version of the perturbation's assets (weights, boxes, distractors); "" = none;
                                 # for a mix: canonical JSON {perturbation: version}
    variant: str = ""            # the grid's name for a method variant (ablation row); "" = the plain method
    mix: str = ""                # a mixed shift (workloads/mixing.py, canonical JSON); "" = one perturbation
    config: str = ""             # a searched configuration's name ("random-3"; orchestrator/planning/search.py);
                                 # "" = the grid's own configuration of the method
    stream_order: str = ""       # "" = the authors' order (annotation order); "shuffled" = permuted by `seed`
    source_pairs: int = 0        # clean source train pairs retrieved after adapting ("source accuracy"); 0 = none
    backbone_options: str = ""   # the backbone's options that differ from its defaults (workloads/backbones
                                 # `backbone_options`: TCD's ocr, engine, ...) as canonical JSON; "" = none
    backbone_variant: str = ""   # the grid's name for a backbone variant (a table row); "" = the plain backbone
    protocol: str = ""           # the stream protocol (workloads/protocols, docs/protocols.md); "" = the default,
                                 # reset_each_shift, which is never spelled out (earlier keys stay valid)
    protocol_options: str = ""   # its options as canonical JSON; "" = its defaults
    segments: str = ""           # a multi-segment protocol's (perturbation, severity) segments in stream order, as
                                 # canonical JSON [[p, s], ...]; then `perturbation` names the column at severity 0

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if not self.scenario:
            raise ValueError("scenario must name a registered scenario")
        if self.mix:
            if self.severity != 0 or self.perturbation == CLEAN:
                raise ValueError(f"a mixed cell names its column (a type, or 'mixed') at severity 0; got "
                                 f"{self.perturbation!r} at severity {self.severity}")
            from workloads.mixing import Mix

            object.__setattr__(self, "mix", Mix.from_json(self.mix).to_json())
        if self.stream_order not in ("", "shuffled"):
            raise ValueError(f"stream_order must be '' (the authors' order) or 'shuffled', got {self.stream_order!r}")
        self._check_protocol()
        if (not self.mix) and (not self.segments) and (self.perturbation == CLEAN) != (self.severity == 0):
            raise ValueError(f"clean trials have severity 0 and perturbed ones 1..; got {self.perturbation!r} "
                             f"at severity {self.severity}")
        # canonicalise options so equal dicts give equal keys
        object.__setattr__(self, "options", json.dumps(json.loads(self.options), sort_keys=True))
        backbone_options = json.loads(self.backbone_options or "{}")
        object.__setattr__(self, "backbone_options", json.dumps(backbone_options, sort_keys=True)
                           if backbone_options else "")

    def _check_protocol(self) -> None:
        """Canonicalise the protocol fields: the default protocol with its default options is "" (the key of a trial
        before protocols); options and segments as canonical JSON."""
        options = json.loads(self.protocol_options or "{}")
        segments = [[str(p), int(v)] for p, v in json.loads(self.segments or "[]")]
        if self.protocol in ("", "reset_each_shift") and not options and not segments:
            object.__setattr__(self, "protocol", "")
        elif self.protocol:
            from workloads.protocols import PROTOCOLS

            cls = PROTOCOLS.lookup(self.protocol)
            cls.validate_options(options)
            if cls.multi_segment != bool(segments):
                raise ValueError(f"protocol {self.protocol!r} " + ("needs its segments" if cls.multi_segment else
                                                                    "runs one cell: give no segments"))
            if segments and (self.severity != 0 or self.perturbation == CLEAN or self.mix):
                raise ValueError(f"a multi-segment trial names its column at severity 0; got {self.perturbation!r} "
                                 f"at severity {self.severity}")
        object.__setattr__(self, "protocol_options", json.dumps(options, sort_keys=True) if options else "")
        object.__setattr__(self, "segments", json.dumps(segments) if segments else "")

    @property
    def protocol_name(self) -> str:
        """The protocol's name, the default spelled out."""
        return self.protocol or "reset_each_shift"

    @property
    def protocol_kwargs(self) -> dict[str, Any]:
        return json.loads(self.protocol_options or "{}")

    @property
    def segment_cells(self) -> list[tuple[str, int]]:
        """The (perturbation, severity) of each segment in stream order: the trial's own cell when it has one."""
        if not self.segments:
            return [(self.perturbation, self.severity)]
        return [(p, int(v)) for p, v in json.loads(self.segments)]

    @property
    def method_options(self) -> dict[str, Any]:
        return json.loads(self.options)

    @property
    def backbone_kwargs(self) -> dict[str, Any]:
        """The backbone's options (the head's constructor keywords), {} for the backbone as registered."""
        return json.loads(self.backbone_options or "{}")

    @property
    def backbone_label(self) -> str:
        """The backbone's name in tables, runs and checkpoints: the variant's name, else the backbone's."""
        return self.backbone_variant or self.backbone

    @functools.cached_property   # a frozen spec's key never changes; the tables and the driver ask for it often
    def key(self) -> str:
        """Content hash of the spec and the code versions it depends on: the trial ledger's index. Fields added
        after the first release are left out while at their default, so every earlier key stays valid."""
        spec = {k: v for k, v in self.to_dict().items() if not (k in _ADDED_FIELDS and v == _ADDED_FIELDS[k])}
        return digest({"spec": spec, "trial": TRIAL_VERSION, "render": RENDER_VERSION}, length=20)

    @property
    def cell(self) -> str:
        if self.segments:   # a multi-segment trial's column, named by the grid (orchestrator/planning/plan.py)
            return self.perturbation
        if self.mix:
            from workloads.mixing import Mix

            mix = Mix.from_json(self.mix)
            return (f"mixed-{round(100 * mix.fraction)}" if self.perturbation == "mixed"
                    else f"{self.perturbation}-mixed")
        return cell_label(self.perturbation, self.severity)

    def assets_for(self, perturbation: str) -> str:
        """The asset version a query clip at `perturbation` renders with in this trial."""
        if self.mix or self.segments:
            return json.loads(self.render_assets or "{}").get(perturbation, "")
        return self.render_assets if perturbation == self.perturbation else ""

    @property
    def label(self) -> str:
        """Human name of the trial: "synthetic v2t clip4clip tent gaussian_noise-3" (plus "from <source>" when the
        model was fine-tuned elsewhere)."""
        src = f" from {self.source_dataset}" if self.source_dataset not in ("", self.dataset) else ""
        return (f"{self.dataset}{src} {self.direction} {self.backbone_label} {self.method_label} {self.cell}"
                f"{self.run_suffix}")

    @property
    def run_suffix(self) -> str:
        """What tells a protocol other than the default, a searched configuration or another seed apart in a trial's
        name: " episodic random-3 seed 1"; "" for the grid's own configuration at seed 0 under the default."""
        return ((f" {self.protocol}" if self.protocol else "") + (f" {self.config}" if self.config else "")
                + (f" seed {self.seed}" if self.seed else ""))

    @property
    def method_label(self) -> str:
        """The row name in tables: the variant's name, else the method's."""
        return self.variant or self.method

    def to_dict(self) -> dict[str, Any]:
        # every field is a str, int or bool: no deep copy needed (dataclasses.asdict's took ~0.1 ms a spec)
        return {name: getattr(self, name) for name in SPEC_FIELDS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrialSpec":
        unknown = set(d) - set(SPEC_FIELDS)
        if unknown:
            raise ValueError(f"unknown TrialSpec fields {sorted(unknown)}")
        return cls(**d)


SPEC_FIELDS = tuple(f.name for f in fields(TrialSpec))   # in declaration order


@dataclass
class TrialResult:
    key: str
    spec: dict[str, Any]
    status: str                             # "ok" | "failed"
    metrics: dict[str, float] = field(default_factory=dict)
    k_occurrence: list[int] = field(default_factory=list)
    batch_R1: list[float] = field(default_factory=list)   # R@1 (%) of each stream batch, in stream order
    # each query's share of R@1 (0..1: a hit, or its probability under expected ties), in test-split order
    query_R1: list[float] = field(default_factory=list)
    n_queries: int = 0
    n_gallery: int = 0
    dropped: list[dict[str, str]] = field(default_factory=list)
    faithful_renders: float | None = None   # share of queries rendered faithfully (clips in v2t, captions in t2v)
    fallbacks: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    failed_batch: int | None = None
    environment: dict[str, str] = field(default_factory=dict)
    scores_path: str | None = None
    # whether the method ran as its authors' code does: the grid's `faithful`, false for a method derived from its
    # paper alone (TITAN); None in entries recorded before the field existed
    method_faithful: bool | None = None
    # the stream protocol as run (docs/protocols.md): name, options, k (budgeted), batches adapted on and scored;
    # per segment of a multi-segment protocol its cell and metrics (R@1/5/10, MdR, hubness); [queries scored, R@1
    # so far] along the stream, in scoring order. Empty in entries recorded before protocols
    protocol: dict[str, Any] = field(default_factory=dict)
    segments: list[dict[str, Any]] = field(default_factory=list)
    running_R1: list[list[float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # what the trial says of itself that is neither an error nor a
                                                      # fallback: what a method derived from its paper, a skipped
                                                      # diagnostic

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
