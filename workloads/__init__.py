"""Pure PyTorch/numpy workloads of the MLVP benchmark: perturbations, datasets, backbones, TTA methods, metrics
and one trial. Never imports Ray, MLflow or `orchestrator`: a single trial runs without them."""

CODE_VERSION = "0.1.0"  # the package version, recorded with every result

# Content versions, part of the cache and ledger keys: bump one when a change alters what that stage produces, so
# stale results are never mixed with new ones, and only that stage's caches are invalidated.
RENDER_VERSION = "5"     # perturbation outputs (render cache; and, through it, every trial); 5: defocus's disks
                         # through cv2.filter2D itself (the reference's call; the FFT path could differ by 1 grey level)
FINETUNE_VERSION = "2"   # source fine-tuning (checkpoints; and, through model_version, every trial)
TRIAL_VERSION = "3"      # online TTA, scoring and metrics (trial keys, gallery cache); 3: tie rules, grouped ranks
