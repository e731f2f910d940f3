"""Backbone registry: grid names -> pooling-head classes. Every module of `workloads.backbones` may register a head
with `@register_backbone(name, order=...)` (order: the row order of the paper's tables)."""
from workloads.registry import Registry

BACKBONES = Registry("backbone", attr="backbone_name", package="workloads.backbones", decorators=("register_backbone",))
register_backbone = BACKBONES.register
