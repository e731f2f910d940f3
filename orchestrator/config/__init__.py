"""Layer 1, config: a grid file (YAML) validated into typed dataclasses, its scenarios (the cells each evaluates and
the tables each lays out), the assets it names, and the table model every output renders. Imports nothing of the
layers above (docs/architecture.md, "Layers")."""
