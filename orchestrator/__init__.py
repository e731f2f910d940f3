"""The MLVP orchestrator: grid -> plan -> Ray Data render cache -> Ray Tune trials -> ledger + MLflow -> tables.
`mlvp --help` (or `python -m orchestrator --help`) lists the commands; docs/architecture.md walks through the data flow.
"""
