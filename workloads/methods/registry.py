"""Method registry: grid names -> TTAMethod classes. Every module of `workloads.methods` registers its method with
`@register_method(name, order=...)`; `order` is the row order of the paper's tables (Source first)."""
from workloads.registry import Registry

METHODS = Registry("method", package="workloads.methods", decorators=("register_method",))
register_method = METHODS.register
