"""Protocol registry: grid names -> Protocol classes. Every module of `workloads.protocols` registers its protocol
with `@register_protocol(name, order=...)`; `order` is the column order of the tables (the default first)."""
from workloads.registry import Registry

PROTOCOLS = Registry("protocol", package="workloads.protocols", decorators=("register_protocol",))
register_protocol = PROTOCOLS.register
