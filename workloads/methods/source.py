"""Source: no adaptation (the reference's `Mock`, s1.3): one forward pass per batch, cosine scores."""
from workloads.methods.base import NoAdaptation
from workloads.methods.registry import register_method


@register_method("source", order=0)
class Source(NoAdaptation):
    pass
