"""Label-free signals of an adapted trial, for choosing hyperparameters without test labels (Cygert et al. 2024 study
these for image TTA; docs/notes/2026-11-27-hp-selection.md says what each reads here):

- `prediction_entropy`: the mean entropy of each query's softmax over the gallery. The temperature is fixed
  (`ENTROPY_TEMPERATURE`, CLIP's logit scale 100), not the method's own, which a search may vary: a signal that moved
  with the searched temperature would rank temperatures, not adaptations.
- `soft_neighbourhood_density`: Saito et al. (2021)'s SND on the adapted query embeddings: each query's softmax
  over its cosine similarities to the other queries (temperature 0.05, itself left out), the mean entropy of those
  rows. Queries that sit in dense neighbourhoods spread their mass over many neighbours: higher is better.
- `source_accuracy`: R@1 (%) on clean pairs of the source train split after adaptation, scored as Source scores
  (the model's pooling and cosine, no method re-ranking): how much of the source domain the adapted weights kept.
  It uses the source domain's labels, never the test labels. The pairs are the checkpoint's own training data, so
  the figure is high; what moves it is forgetting.

Hubness (k-occurrence skewness) and TCR's uniformity / modality gap come from workloads/metrics.py.
"""
from __future__ import annotations

import numpy as np
import torch

ENTROPY_TEMPERATURE = 0.01
SND_TEMPERATURE = 0.05


def prediction_entropy(scores, temperature: float = ENTROPY_TEMPERATURE) -> float:
    """Mean over queries of the entropy (nats) of softmax(scores / temperature) over the gallery; scores [N, G]."""
    s = torch.as_tensor(np.asarray(scores, dtype=np.float32) if not torch.is_tensor(scores) else scores).float()
    logp = torch.log_softmax(s / temperature, dim=1)
    return float(-(logp.exp() * logp).sum(1).mean())


def soft_neighbourhood_density(z, temperature: float = SND_TEMPERATURE) -> float:
    """SND of embeddings z [N, D] (rows L2-normalised here): mean entropy of each row's softmax over its cosine
    similarities to the other rows, divided by `temperature`. 0 for a single row (no neighbours)."""
    z = torch.nn.functional.normalize(torch.as_tensor(z).float(), dim=-1)
    n = z.shape[0]
    if n < 2:
        return 0.0
    sim = (z @ z.t()) / temperature
    sim.fill_diagonal_(float("-inf"))
    logp = torch.log_softmax(sim, dim=1)
    p = logp.exp()
    return float(-(p * torch.nan_to_num(logp, neginf=0.0)).sum(1).mean())


@torch.no_grad()
def source_accuracy(model, direction: str, frames: torch.Tensor, captions: list[str], batch: int = 16) -> float:
    """R@1 (%) of `direction` on clean source pairs: `frames` uint8 clips [N, T, H, W, 3] at the model's resolution
    (row i shows captions[i]; normalised `batch` clips at a time), scored by the model's own pooling and cosine
    (Source's scoring). v2t: each video against every caption; t2v: each caption against every video."""
    from workloads.metrics import retrieval_metrics

    text = torch.cat([model.encode_text(model.tokenize(captions[s:s + 64])) for s in range(0, len(captions), 64)])
    videos = torch.cat([model.encode_frames(model.preprocess_frames(frames[s:s + batch]))
                        for s in range(0, len(frames), batch)])
    sim = model.similarity(text.float(), videos.float())            # [N text, N video]
    scores = sim.t() if direction == "v2t" else sim
    return float(retrieval_metrics(scores.cpu(), np.arange(len(captions)), ties="expected")["R1"])
