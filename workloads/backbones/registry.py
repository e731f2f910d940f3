"""Backbone registry: grid names -> pooling-head classes."""
from workloads.registry import Registry

BACKBONES = Registry("backbone", attr="backbone_name")
register_backbone = BACKBONES.register
