"""Pure PyTorch/numpy workloads of the MLVP benchmark: perturbations, datasets, backbones, TTA methods, metrics
and one trial. Never imports Ray, MLflow or `orchestrator`: a single trial runs without them."""

# Bump when a change alters what a trial computes (scores, renders, training): it is part of every cache key and
# trial key, so stale results are never mixed with new ones.
CODE_VERSION = "0.1.0"
