"""TITAN (Li et al. 2023, ACM MM: test-time training via counterfactual generation and causal intervention for
text-video retrieval) on the shared loop, derived from the paper alone: its authors published no code, so every trial
records method_faithful: false (docs/faithfulness.md: TITAN, where each decision the paper leaves open is argued).
lr 1e-5 (the paper's) in both directions. t2v is the paper's direction; v2t is a symmetric variant of ours, flagged
on every trial.

Per step (3 per batch), with S = the batch's cosine scores [B, G] (the loop's forward), q the L2-normalised query
embeddings and g the gallery's:
1. Cross-modal re-matching (`rematch`, Eq. 3-5): the pseudo-label of query i is argmin_j R_qv(i, j) + alpha
   R_vq(i, j) (alpha 1; ties to the lower index), R_qv(i, j) = 1 + #{j' : S_ij' > S_ij} the rank of item j in
   the query's row and R_vq(i, j) = 1 + #{rows r : S_rj > S_ij} the rank of the query in item j's column among
   the rows of every past query (a memory of the raw score rows as they were scored, `memory_size` newest rows, 0 =
   the whole stream; Eq. 4 ranks among all queries) and the current batch. Switched off: argmax_j S_ij.
2. Counterfactual queries (`counterfactual`, t2v only, Eq. 6-7): at step 0, the items matched (argmax) by more than
   beta (30) queries so far are hubs; for a batch query matched to a hub, the nouns, verbs and adjectives
   (WordNet's part-of-speech index: a stand-in for a tagger) that occur in more than theta (0.5) of the hub's matched
   queries are deleted from its caption (CLIP has no mask token); each changed caption is a counterfactual query,
   pseudo-labelled by step 1 against the same memory and trained on with the batch.
3. Retrieval loss (the paper leaves it open): cross-entropy of softmax(S_i / 0.02) over the gallery against the
   pseudo-label, mean over the batch's queries and its counterfactual queries; it updates the query tower's
   LayerNorms (the loop's parameters).
4. Causal bias correction (`bias_correction`, Eq. 8-14): a head scoring a (text t, video v) pair as
   sigma(MLP((v + A(t, v)) * t)), A(t, v) = softmax((W1 t + W2 v) C^T / sqrt(D)) (W3 C) over the source confounder
   dictionary C = k-means centroids (`confounders`, 32) of the source split's video features (a stand-in for the
   paper's detector features). Trained once on `source_pairs` (1,000) pairs of the source train split
   (`source_steps` (200) AdamW steps at `head_lr` (1e-3), batches of 128 = the paper's batch size, each pair against
   7 in-batch negatives, class-balanced BCE), then at every step on the test pairs (query, each of its top eta (10)
   items), label 1 for the pseudo-label: class-balanced BCE minus `mi_weight` x (I(v'; c) + I(t; c)) (Eq. 14), with
   c = sigma((W4 v' + W5 t) C_t^T / sqrt(D)) C_t (Eq. 13, scaled as Eq. 11 is), v' = v + A(t, v), C_t the k-means
   centroids of the test domain's video features (t2v: the gallery; v2t: the query videos seen so far) and each I
   estimated by variational information distillation (a Gaussian regressor of the variable from c; Ahn et al.
   2019, the paper's [2]). The head's losses see the encoder's features detached: the head trains only itself; it
   reads its unit inputs at sqrt(D) scale (`BiasCorrectionHead`).
   Scoring: each query's top eta items by S are re-ordered by S/0.02 + log sigma(head) (the head as a likelihood
   factor on the retrieval softmax), and take the top eta scores in that order; items outside the top eta keep S.
   Without a source split (zero-shot, or a dataset without a train split) the head is off and the trial says so.
v2t (symmetric variant): queries are videos; R_vq ranks the query video among past query videos per text; no
counterfactual queries (videos have no words); the head scores (gallery text, query video).

Options: rematch, alpha (1), memory_size (0), counterfactual, beta (30), theta (0.5), bias_correction, eta (10),
confounders (32), source_pairs (1000), source_steps (200), head_lr (1e-3), mi_weight (1). The three switches are
the paper's Table 2 rows as grid variants (grids/ablation_titan.yaml).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads.methods.base import ForwardOutput, QueryBatch, SourceFeatures, TTAMethod
from workloads.methods.registry import register_method
from workloads.options import Option

# closed-class words WordNet's index also lists (the letter "a", the adjective "on", ...): never content words
CLOSED_CLASS = frozenset("""a an the and or but nor of on in at to from by with without into onto over under above
below across through about around after before behind beside between near off out up down this that these those it
its it's they them their there here where when while then than as is are was were be been being has have had do does
did who whom whose which what some any each every all both no not""".split())
HEAD_BATCH = 128      # the paper's batch size, for the head's source stage
HEAD_NEGATIVES = 7    # in-batch negatives per source pair


def rematch_labels(rows: torch.Tensor, batch_rows: torch.Tensor, memory_cols: torch.Tensor | None,
                   alpha: float) -> torch.Tensor:
    """Eq. 5's pseudo-labels of score rows [n, G]: argmin_j R_qv + alpha R_vq, where R_vq counts the rows scoring
    item j strictly higher among `batch_rows` [B, G] and the memory (`memory_cols` [G, R], each column's remembered
    scores sorted ascending; None when empty)."""
    g, rows = rows.shape[1], rows.contiguous()
    rank_qv = 1 + g - torch.searchsorted(rows.sort(dim=1).values.contiguous(), rows, right=True)
    above = (batch_rows.unsqueeze(0) > rows.unsqueeze(1)).sum(1)
    if memory_cols is not None and memory_cols.shape[1]:
        r = memory_cols.shape[1]
        above = above + r - torch.searchsorted(memory_cols, rows.t().contiguous(), right=True).t()
    return (rank_qv + alpha * (1 + above)).argmin(dim=1)


def _words(caption: str) -> list[str]:
    return caption.split()


def _bare(word: str) -> str:
    return re.sub(r"[^a-z]", "", word.lower())


def counterfactual_captions(captions: list[str], matched: list[int], hubs: set[int], history: dict[int, list[str]],
                            theta: float, is_content) -> list[tuple[int, str]]:
    """(index, counterfactual caption) for each caption matched to a hub (Eq. 6-7): the content words (`is_content`)
    occurring in more than `theta` of the hub's matched captions (`history[hub]`, the batch's included) deleted.
    Captions that would not change, or would lose every word, get none."""
    frequent: dict[int, set[str]] = {}
    out = []
    for i, (caption, item) in enumerate(zip(captions, matched)):
        if item not in hubs:
            continue
        if item not in frequent:
            seen = history[item]
            counts = Counter(w for c in seen for w in {_bare(x) for x in _words(c)} if w and is_content(w))
            frequent[item] = {w for w, n in counts.items() if n > theta * len(seen)}
        kept = [w for w in _words(caption) if _bare(w) not in frequent[item]]
        if kept and len(kept) < len(_words(caption)):
            out.append((i, " ".join(kept)))
    return out


def kmeans(x: torch.Tensor, k: int, iters: int = 20, init: torch.Tensor | None = None) -> torch.Tensor:
    """k centroids of the rows of x [N, D] by Lloyd's iterations, deterministic: initialised at `init` or at k
    evenly spaced rows; an emptied cluster keeps its centroid. k > N gives the rows themselves."""
    if x.shape[0] <= k:
        return x.clone()
    c = init.clone() if init is not None else x[torch.linspace(0, x.shape[0] - 1, k).long()].clone()
    for _ in range(iters):
        assign = torch.cdist(x, c).argmin(1)
        sums = torch.zeros_like(c).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).unsqueeze(1).to(x.dtype)
        c = torch.where(counts > 0, sums / counts.clamp(min=1), c)
    return c


def balanced_bce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy with the positives and the negatives weighted one half each (one positive per query
    against many negatives would otherwise teach "never a match"); the negatives' mean alone when there is no
    positive."""
    loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    pos = labels > 0.5
    if not bool(pos.any()):
        return loss.mean()
    if bool(pos.all()):
        return loss.mean()
    return 0.5 * loss[pos].mean() + 0.5 * loss[~pos].mean()


def vid_loss(target: torch.Tensor, predicted: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """Variational information distillation (Ahn et al. 2019): -I(target; source) up to a constant, with the
    target modelled as Gaussian around a regression `predicted` from the source, per-dimension variance
    softplus(log_scale) + 1e-4; averaged over dimensions."""
    var = F.softplus(log_scale) + 1e-4
    return (0.5 * torch.log(var) + 0.5 * (target - predicted) ** 2 / var).mean()


class BiasCorrectionHead(nn.Module):
    """TITAN's causal bias-correction head (Eq. 9-13) over a fixed source confounder dictionary [K, D]. Its inputs
    are unit vectors; the head multiplies them by sqrt(D) first, so their entries (and those of the product
    v' * t the MLP reads) are of order 1 rather than 1/sqrt(D) (at unit scale the head barely learned in 200 steps)."""

    def __init__(self, dim: int, confounders: torch.Tensor):
        super().__init__()
        self.scale = math.sqrt(dim)
        self.w1, self.w2, self.w3 = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.w4, self.w5 = (nn.Linear(dim, dim, bias=False) for _ in range(2))
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        self.mi_video, self.mi_text = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.mi_video_scale, self.mi_text_scale = nn.Parameter(torch.zeros(dim)), nn.Parameter(torch.zeros(dim))
        self.register_buffer("confounders", confounders.clone())

    def _debiased(self, text: torch.Tensor, video: torch.Tensor) -> torch.Tensor:
        c = self.confounders * self.scale
        attention = torch.softmax((self.w1(text) + self.w2(video)) @ c.t() / self.scale, dim=-1)
        return video + attention @ self.w3(c)

    def debiased_video(self, text: torch.Tensor, video: torch.Tensor) -> torch.Tensor:
        """v + softmax((W1 t + W2 v) C^T / sqrt(D)) (W3 C) (Eq. 10-11) for rows of paired unit [P, D] inputs (at the
        head's sqrt(D) scale)."""
        return self._debiased(text * self.scale, video * self.scale)

    def logit(self, text: torch.Tensor, video: torch.Tensor) -> torch.Tensor:
        """The pair's matching logit MLP((v + A(t, v)) * t) [P] (sigmoid of it: the match probability)."""
        t = text * self.scale
        return self.mlp(self._debiased(t, video * self.scale) * t).squeeze(-1)

    def mutual_information_loss(self, text: torch.Tensor, video: torch.Tensor, test_confounders: torch.Tensor
                                ) -> torch.Tensor:
        """-(I(v'; c) + I(t; c)) by VID, c = sigma((W4 v' + W5 t) C_t^T / sqrt(D)) C_t (Eq. 13-14)."""
        t = text * self.scale
        v = self._debiased(t, video * self.scale)
        ct = test_confounders * self.scale
        c = torch.sigmoid((self.w4(v) + self.w5(t)) @ ct.t() / self.scale) @ ct
        return vid_loss(v, self.mi_video(c), self.mi_video_scale) + vid_loss(t, self.mi_text(c), self.mi_text_scale)


@register_method("titan", order=7, source_stage="bias-correction head")
class TITAN(TTAMethod):
    passes = (2, 2)  # + the counterfactual captions' forward, in the loss's graph (upper bound: t2v, when made)
    lr = {"v2t": 1e-5, "t2v": 1e-5}
    paper_derived = ("TITAN (Li et al. 2023), no authors' code: re-matching (Eq. 5), counterfactual word deletion "
                     "(Eq. 6-7), bias-correction head (Eq. 8-14); retrieval loss, updated parameters and score "
                     "combination are ours (docs/faithfulness.md: TITAN)")
    OPTIONS = {"rematch": Option(bool, True, doc="cross-modal re-matching of pseudo-labels (Eq. 5)"),
               "alpha": Option(float, 1.0, min=0, doc="weight of the query's rank among the item's queries"),
               "memory_size": Option(int, 0, min=0, doc="past score rows kept for re-matching; 0 = all"),
               "counterfactual": Option(bool, True, doc="counterfactual queries (t2v)"),
               "beta": Option(int, 30, min=0, doc="an item matched by more queries is a hub"),
               "theta": Option(float, 0.5, min=0, max=1, doc="share of a hub's queries a masked word occurs in"),
               "bias_correction": Option(bool, True, doc="the causal bias-correction head"),
               "eta": Option(int, 10, min=1, doc="items per query the head re-scores"),
               "confounders": Option(int, 32, min=1, doc="k-means centroids of source video features"),
               "source_pairs": Option(int, 1000, min=1, doc="source train pairs for the head"),
               "source_steps": Option(int, 200, min=0, doc="head training steps on the source pairs"),
               "head_lr": Option(float, 1e-3, above=0, doc="the head's learning rate (source and test stages)"),
               "mi_weight": Option(float, 1.0, min=0, doc="weight of the two mutual-information terms (Eq. 14)")}

    def resolve_options(self, o: dict[str, Any]) -> dict[str, Any]:
        dim = self.gallery.features.shape[-1]
        self.head: BiasCorrectionHead | None = None
        self.head_state: dict[str, torch.Tensor] | None = None
        if self.direction == "v2t":
            self.fallbacks.append("titan v2t: the symmetric variant of the paper's t2v method (ours)")
        if o["counterfactual"]:
            reason = ("v2t queries are videos (no words)" if self.direction == "v2t" else self._wordnet_missing())
            if reason:
                o["counterfactual"] = False
                self.fallbacks.append(f"titan: counterfactual queries off ({reason})")
            else:
                self.fallbacks.append("titan: nouns/verbs/adjectives from WordNet's index (stand-in for a tagger)")
        if o["bias_correction"]:
            # built now so that its parameters join the optimizer; initialised and active once source pairs come
            with torch.random.fork_rng(devices=[]):
                self.head = BiasCorrectionHead(dim, torch.zeros(1, dim)).to(self.gallery.features.device)
            self.fallbacks.append("titan: bias-correction head off (no source pairs given)")
        return o

    @staticmethod
    def _wordnet_missing() -> str | None:
        from workloads.perturbations.text import _wordnet

        return _wordnet.missing_reason()

    def make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        groups: list[dict[str, Any]] = [{"params": params}]
        if self.head is not None:
            groups.append({"params": list(self.head.parameters()), "lr": self.options["head_lr"]})
        return torch.optim.AdamW(groups, lr=self.learning_rate, weight_decay=self.weight_decay)

    # -- the source stage ---------------------------------------------------------------------------------------
    def source_pairs(self) -> int:
        return self.options["source_pairs"] if self.head is not None else 0

    def attach_source(self, features: SourceFeatures | None, reason: str = "") -> None:
        if self.head is None:
            return
        off = [f for f in self.fallbacks if f.startswith("titan: bias-correction head off")]
        for line in off:
            self.fallbacks.remove(line)
        if features is None or len(features) < 2:
            self.fallbacks.append(f"titan: bias-correction head off ({reason or 'fewer than 2 source pairs'})")
            return
        self.fallbacks.append("titan: confounders = k-means of source video features (stand-in for detectors)")
        text = F.normalize(features.text.float(), dim=-1).to(self.device)
        video = F.normalize(features.video.float(), dim=-1).to(self.device)
        with torch.no_grad():
            self.head.confounders = kmeans(video, min(self.options["confounders"], len(features)))
            with torch.random.fork_rng(devices=[]):  # the same initial head for every trial, the global RNG untouched
                torch.manual_seed(0)
                fresh = BiasCorrectionHead(text.shape[1], self.head.confounders)
            self.head.load_state_dict(fresh.state_dict())
        generator = torch.Generator().manual_seed(0)
        self.source_loss = self._train_on_source(text, video, generator)
        self.head_state = {k: v.detach().clone() for k, v in self.head.state_dict().items()}
        self.reset_memory()

    def _train_on_source(self, text: torch.Tensor, video: torch.Tensor, generator: torch.Generator) -> float:
        """The source stage (Eq. 8-11): class-balanced BCE of each pair against HEAD_NEGATIVES in-batch negatives."""
        opt = torch.optim.AdamW(self.head.parameters(), lr=self.options["head_lr"], weight_decay=self.weight_decay)
        n, loss = text.shape[0], torch.zeros(())
        b = min(HEAD_BATCH, n)
        neg = min(HEAD_NEGATIVES, b - 1)
        for _ in range(self.options["source_steps"]):
            rows = torch.randperm(n, generator=generator)[:b].to(text.device)
            offsets = 1 + torch.randperm(b - 1, generator=generator)[:neg].to(text.device)
            partner = torch.cat([torch.arange(b, device=text.device),
                                 ((torch.arange(b, device=text.device)[:, None] + offsets) % b).flatten()])
            mine = torch.cat([torch.arange(b, device=text.device), torch.arange(b, device=text.device)
                              .repeat_interleave(neg)])
            labels = (partner == mine).float()
            loss = balanced_bce(self.head.logit(text[rows][mine], video[rows][partner]), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return float(loss.detach())

    # -- memory -------------------------------------------------------------------------------------------------
    def reset_memory(self) -> None:
        self.rows: list[torch.Tensor] = []        # raw score rows of past queries, oldest first
        self.matched: list[int] = []              # their argmax items
        self.captions: list[str] = []             # their captions (t2v)
        self.seen_videos: list[torch.Tensor] = []  # v2t: query video embeddings seen so far
        self.test_confounders: torch.Tensor | None = None
        self.pseudo_labels: list[torch.Tensor] = []   # step-0 pseudo-labels of each batch (diagnostics)
        self.argmax_labels: list[torch.Tensor] = []
        self.counterfactual_count = 0
        self._cf: tuple[torch.Tensor, list[int]] | None = None
        self._memory_cols: torch.Tensor | None = None
        if self.head is not None and self.head_state is not None:
            self.head.load_state_dict(self.head_state)
            if self.direction == "t2v":
                g = F.normalize(self.gallery.features.float().mean(1), dim=-1)
                self.test_confounders = kmeans(g, min(self.options["confounders"], g.shape[0]))

    @property
    def head_active(self) -> bool:
        return self.head is not None and self.head_state is not None

    def _is_content(self, word: str) -> bool:
        if word in CLOSED_CLASS or len(word) < 2:
            return False
        from workloads.perturbations.text import _wordnet

        return bool(_wordnet.load().parts_of_speech(word) & {"n", "v", "a"})

    # -- a step -------------------------------------------------------------------------------------------------
    def _start_batch(self, out: ForwardOutput, batch: QueryBatch) -> None:
        """Step 0: sort the memory's columns, make the batch's counterfactual queries, refresh v2t's confounders."""
        o = self.options
        self._memory_cols = (torch.cat(self.rows).t().sort(dim=1).values.contiguous() if (o["rematch"] and self.rows)
                             else None)
        self._cf = None
        matched = out.scores.detach().argmax(1)
        if o["counterfactual"] and batch.texts is not None:
            counts = torch.bincount(torch.tensor(self.matched + matched.tolist(), dtype=torch.long),
                                    minlength=out.scores.shape[1])
            hubs = set(torch.nonzero(counts > o["beta"]).flatten().tolist())
            history: dict[int, list[str]] = {}
            for caption, item in zip(self.captions + list(batch.texts), self.matched + matched.tolist()):
                if item in hubs:
                    history.setdefault(item, []).append(caption)
            made = counterfactual_captions(list(batch.texts), matched.tolist(), hubs, history, o["theta"],
                                           self._is_content)
            if made:
                self._cf = (self.model.tokenize([c for _, c in made]), [i for i, _ in made])
                self.counterfactual_count += len(made)
        if self.head_active and self.direction == "v2t":
            self.seen_videos.append(F.normalize(out.query_feat.detach().float(), dim=-1))
            seen = torch.cat(self.seen_videos)
            k = min(o["confounders"], seen.shape[0])
            init = self.test_confounders if self.test_confounders is not None and len(self.test_confounders) == k \
                else None
            self.test_confounders = kmeans(seen, k, iters=10, init=init)

    def labels(self, rows: torch.Tensor, batch_rows: torch.Tensor) -> torch.Tensor:
        if not self.options["rematch"]:
            return rows.argmax(1)
        return rematch_labels(rows, batch_rows, self._memory_cols, self.options["alpha"])

    def pair_features(self, out: ForwardOutput, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(text, video) features [B, k, D] of each query with the gallery items `items` [B, k], detached and
        normalised: t2v pairs the query text with item videos, v2t the item texts with the query video."""
        q = F.normalize(out.query_feat.detach().float(), dim=-1)
        g = F.normalize(out.gallery_feat.detach().float(), dim=-1)[items]
        q = q.unsqueeze(1).expand_as(g)
        return (q, g) if self.direction == "t2v" else (g, q)

    def head_loss(self, out: ForwardOutput, labels: torch.Tensor) -> torch.Tensor:
        top = out.scores.detach().topk(min(self.options["eta"], out.scores.shape[1]), dim=1).indices
        text, video = self.pair_features(out, top)
        text, video = text.reshape(-1, text.shape[-1]), video.reshape(-1, video.shape[-1])
        y = (top == labels.unsqueeze(1)).float().flatten()
        loss = balanced_bce(self.head.logit(text, video), y)
        if self.options["mi_weight"] > 0 and self.test_confounders is not None:
            loss = loss + self.options["mi_weight"] * self.head.mutual_information_loss(text, video,
                                                                                         self.test_confounders)
        return loss

    def loss(self, out: ForwardOutput, batch: QueryBatch, step: int) -> torch.Tensor:
        if step == 0:
            self._start_batch(out, batch)
        sims = out.scores.detach()
        labels = self.labels(sims, sims)
        if step == 0:
            self.pseudo_labels.append(labels.cpu())
            self.argmax_labels.append(sims.argmax(1).cpu())
        logits, targets = [self.logits(out)], [labels]
        if self._cf is not None:
            cf = self.forward_output(QueryBatch(batch.index, self._cf[0]))
            logits.append(self.logits(cf))
            targets.append(self.labels(cf.scores.detach(), sims))
        loss = F.cross_entropy(torch.cat(logits), torch.cat(targets))
        if self.head_active:
            loss = loss + self.head_loss(out, labels)
        return loss

    def stream_stats(self, gt, gallery_groups=None) -> dict[str, float]:
        """The share of queries whose step-0 pseudo-label was a positive, re-matched and by plain argmax; how many
        counterfactual queries were made."""
        out = {"titan_counterfactual_queries": float(self.counterfactual_count)}
        if self.pseudo_labels:
            gt = torch.as_tensor(gt)
            groups = None if gallery_groups is None else torch.as_tensor(gallery_groups)
            for name, labels in (("pseudo_label", self.pseudo_labels), ("argmax_label", self.argmax_labels)):
                got = torch.cat(labels)
                got = got if groups is None else groups[got]
                out[f"titan_{name}_acc"] = float((got == gt[:len(got)]).float().mean())
        return out

    # -- scoring ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def score(self, out: ForwardOutput, batch: QueryBatch) -> torch.Tensor:
        sims = out.scores.detach()
        self.rows.append(sims.float())
        size = self.options["memory_size"]
        if size and sum(r.shape[0] for r in self.rows) > size:
            self.rows = [torch.cat(self.rows)[-size:]]
        self.matched += sims.argmax(1).tolist()
        if batch.texts is not None:
            self.captions += list(batch.texts)
        if not self.head_active:
            return sims
        return self.rescore(out)

    def rescore(self, out: ForwardOutput) -> torch.Tensor:
        """The top eta items of each row re-ordered by S/0.02 + log sigma(head); they take the row's top eta scores
        in that order, so the items outside keep their scores and ranks."""
        sims = out.scores.detach()
        values, top = sims.topk(min(self.options["eta"], sims.shape[1]), dim=1)
        text, video = self.pair_features(out, top)
        head = self.head.logit(text.reshape(-1, text.shape[-1]), video.reshape(-1, video.shape[-1]))
        combined = values / self.temperature + F.logsigmoid(head.view_as(values))
        order = combined.argsort(dim=1, descending=True, stable=True)
        return sims.scatter(1, top.gather(1, order), values)
