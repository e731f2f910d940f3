"""Layer 4, stages: the producers of trial inputs on Ray: fine-tuning tasks, the render stream (Ray Data), the text
sets, per-video assets, and the clean check of every checkpoint."""
