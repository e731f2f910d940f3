"""Scenarios of the MLVP benchmark: query shift, cross-dataset and zero-shot query-gallery shift. Each module
registers one `Scenario` subclass with `@register_scenario(name, order=...)`; `SCENARIOS` is the only list."""
from workloads.registry import Registry

SCENARIOS = Registry("scenario", package="orchestrator.config.scenarios", decorators=("register_scenario",))
register_scenario = SCENARIOS.register
