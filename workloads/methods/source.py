"""Source: no adaptation (the authors' `Mock`; docs/faithfulness.md: Source): one forward pass per batch, cosine
scores."""
from workloads.methods.base import NoAdaptation
from workloads.methods.registry import register_method


@register_method("source", order=0)
class Source(NoAdaptation):
    pass
