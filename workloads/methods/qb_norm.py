"""QB-Norm (querybank normalisation with the dynamic inverted softmax; Bogolin et al., CVPR 2022) as a training-free
re-scoring on the shared loop (docs/faithfulness.md: Hubness-suppression baselines), following its authors' public
code (ioanacroi/qb-norm, dynamic_inverted_softmax.py `qb_norm`). No update: one forward per batch of the unadapted
model, then each batch's scores S [B, G] are normalised against a querybank.

The querybank: `bank_size` queries of the checkpoint's source train split (0: one per video of the whole split, the
source-pairs path of workloads/trial.py `encode_source`: each video's first caption), encoded by the same model
(t2v: their captions; v2t: their videos), scored against the trial's gallery: Q [N, G]. From Q, once per trial:
- the activation set A = the gallery items among the top `k` (1) of some bank query (`get_retrieved_videos`);
- the normaliser Z_j = sum_n exp(beta Q_nj) of each gallery item (`normalizing_sum`; kept as log Z_j).
A query whose top-1 item (by S) is in A has its row replaced by the dynamic inverted softmax
exp(beta S_ij) / Z_j = exp(beta S_ij - log Z_j) (computed in that form, which cannot overflow); any other row keeps
S (`get_index_to_normalize`). beta is 20, the authors' inverse temperature for every model but CLIP2Video.

The bank's scores are the cosine of L2-normalised global embeddings (`SourceFeatures` against the gallery's text or
frame-mean embedding): CLIP4Clip's own score, so exact for it; for a backbone that scores otherwise (X-Pool's
text-conditioned pooling, a head with its own score) the trial records the bank's scores as a stand-in.
Without a source train split (a zero-shot checkpoint, a dataset without one) there is no querybank: the scores are
the unadapted model's (Source's), the trial's fallbacks say why and the plan gives one line (the registration's
`source_stage`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from workloads.methods.base import ForwardOutput, NoAdaptation, QueryBatch, SourceFeatures
from workloads.methods.registry import register_method
from workloads.options import Option

ALL_PAIRS = 10 ** 9   # "every video of the split" for `source_pairs` (the trial takes at most the split's videos)
BANK_CHUNK = 4096     # bank rows scored at a time


class Querybank:
    """The statistics of a querybank's scores Q [N, G] the dynamic inverted softmax reads: `log_norm` [G]
    (log sum_n exp(beta Q_nj)) and `active` [G] (bool: among the top k of some bank query)."""

    def __init__(self, bank_scores: torch.Tensor, beta: float, k: int = 1):
        if bank_scores.dim() != 2 or bank_scores.shape[0] == 0:
            raise ValueError(f"a querybank needs scores [N > 0, G], got {tuple(bank_scores.shape)}")
        self.beta, self.k, self.size = float(beta), int(k), int(bank_scores.shape[0])
        g = bank_scores.shape[1]
        log_norm = torch.full((g,), -torch.inf, device=bank_scores.device)
        active = torch.zeros(g, dtype=torch.bool, device=bank_scores.device)
        for start in range(0, self.size, BANK_CHUNK):
            chunk = bank_scores[start:start + BANK_CHUNK].float()
            log_norm = torch.logaddexp(log_norm, torch.logsumexp(self.beta * chunk, dim=0))
            active[chunk.topk(min(self.k, g), dim=1).indices.flatten()] = True
        self.log_norm, self.active = log_norm, active

    @torch.no_grad()
    def normalise(self, sims: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, rows): `sims` [B, G] with each row whose top-1 item is in the activation set replaced by
        exp(beta S - log Z), and the bool mask [B] of those rows."""
        s = sims.float()
        rows = self.active[s.argmax(1)]
        out = s.clone()
        out[rows] = torch.exp(self.beta * s[rows] - self.log_norm)
        return out, rows


def bank_scores(source: SourceFeatures, gallery_features: torch.Tensor, direction: str) -> torch.Tensor:
    """Scores [N, G] of the source queries (t2v: texts; v2t: videos) against the gallery (t2v: frames [G, T, D];
    v2t: texts [G, D]): cosines of L2-normalised global embeddings (a video's: the mean of its frames)."""
    queries = source.text if direction == "t2v" else source.video
    g = gallery_features.float()
    g = F.normalize(g.mean(1) if g.dim() == 3 else g, dim=-1)
    return F.normalize(queries.float(), dim=-1).to(g.device) @ g.t()


@register_method("qb_norm", order=9, source_stage="querybank")
class QBNorm(NoAdaptation):
    OPTIONS = {"bank_size": Option(int, 0, min=0, doc="querybank queries from the source train split, one per "
                                                      "video; 0 = every video of the split"),
               "beta": Option(float, 20.0, above=0, doc="inverse temperature of the dynamic inverted softmax"),
               "k": Option(int, 1, min=1, doc="activation set: the top k gallery items of each bank query")}
    BETA = "beta"   # the option holding the dynamic inverted softmax's beta (hsm_qb_norm names it qb_beta)

    def reset_memory(self) -> None:
        if not hasattr(self, "querybank"):   # first call (set-up): no bank until the trial attaches the source
            self.querybank: Querybank | None = None
            self._off(f"{self.name}: querybank off (no source pairs given); the scores are not normalised")
        self.normalised_rows = 0
        self.scored_rows = 0

    def _off(self, line: str) -> None:
        self.fallbacks[:] = [f for f in self.fallbacks if not f.startswith(f"{self.name}: querybank")]
        self.fallbacks.append(line)

    # -- the querybank: the source domain's train-split queries ----------------------------------------------------
    def source_pairs(self) -> int:
        return self.options["bank_size"] or ALL_PAIRS

    def attach_source(self, features: SourceFeatures | None, reason: str = "") -> None:
        if features is None or len(features) == 0:
            self.querybank = None
            self._off(f"{self.name}: querybank off ({reason or 'no source pairs'}); the scores are not normalised")
            return
        self.querybank = Querybank(bank_scores(features, self.gallery.features, self.direction),
                                   self.options[self.BETA], self.options["k"])
        self.fallbacks[:] = [f for f in self.fallbacks if not f.startswith(f"{self.name}: querybank")]
        from workloads.backbones.clip4clip import MeanPooling   # the one head whose score the bank's cosine is
        if not isinstance(getattr(self.model, "pooling", None), MeanPooling):
            self.fallbacks.append(f"{self.name}: querybank scored by the cosine of global embeddings (a stand-in for "
                                  "this backbone's own score)")

    def normalise(self, sims: torch.Tensor) -> torch.Tensor:
        self.scored_rows += sims.shape[0]
        if self.querybank is None:
            return sims
        out, rows = self.querybank.normalise(sims)
        self.normalised_rows += int(rows.sum())
        return out

    def score(self, out: ForwardOutput, batch: QueryBatch) -> torch.Tensor:
        return self.normalise(out.scores.detach())

    def stream_stats(self, gt, gallery_groups=None) -> dict[str, float]:
        """The querybank's size (0: none) and the share of queries whose row the dynamic inverted softmax replaced."""
        bank = self.querybank
        return {f"{self.name}_bank_size": float(bank.size if bank is not None else 0),
                f"{self.name}_normalised_share": self.normalised_rows / max(1, self.scored_rows)}
