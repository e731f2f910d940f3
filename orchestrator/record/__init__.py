"""Layer 3, record: the trial ledger (the record of what ran) and the MLflow store as its view: per-trial child runs
logged in the background, the submission's parent run, and `sync` of what a store lacks."""
