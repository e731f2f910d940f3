"""Layer 4, report: a grid's outputs from the ledger: `trials.parquet`, each scenario's tables (Parquet, Markdown) and
the HTML report with its plots. Beside the stages, independent of them."""
