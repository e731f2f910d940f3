"""Method registry: grid names -> TTAMethod classes."""
from workloads.registry import Registry

METHODS = Registry("method")
register_method = METHODS.register
