"""Query-side perturbations: `video` (the 12 MLVP types, v2t) and `text` (t2v)."""
