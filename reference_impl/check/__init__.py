"""Check your own norm against a model by name: bits against the model's module, ulps against the float64
oracle, gradients, and a diagnosis naming the convention the function does compute.

Importing this package imports torch only; ``transformers`` (the ``reference_impl[hf]`` extra) is imported
when a check needs a model's own module.
"""
from __future__ import annotations

from .matching import Match, Probe, candidates, make_probes, match, ulp_distance

__all__ = ["Match", "Probe", "candidates", "make_probes", "match", "ulp_distance"]
