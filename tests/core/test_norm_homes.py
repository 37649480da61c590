"""Each norm's math lives in its catalog module; the old modules keep the public names as re-exports.

A contributor reads a norm in one file (``reference_impl/norms/<name>.py``); ``reference_impl.reference``,
``reference_impl.conventions`` and ``reference_impl.variants`` re-export those same objects, so code that
imports the old names gets the catalog's functions, not copies that could drift.
"""
from __future__ import annotations

import importlib

import pytest

from tests.core.test_house import import_graph

# old module, old name -> catalog module, name there
MOVED = {
    ("reference", "rms_norm"): ("norms.rms_norm", "rms_norm"),
    ("reference", "rms_norm_backward"): ("norms.rms_norm", "rms_norm_backward"),
    ("reference", "RMSNormFunction"): ("norms.rms_norm", "RMSNormFunction"),
    ("reference", "rms_forward"): ("norms.rms_norm", "rms_forward"),
    ("reference", "rms_backward"): ("norms.rms_norm", "rms_backward"),
    ("reference", "layer_norm"): ("norms.layer_norm", "layer_norm"),
    ("reference", "layer_norm_backward"): ("norms.layer_norm", "layer_norm_backward"),
    ("reference", "LayerNormFunction"): ("norms.layer_norm", "LayerNormFunction"),
    ("reference", "ln_forward"): ("norms.layer_norm", "ln_forward"),
    ("reference", "ln_backward"): ("norms.layer_norm", "ln_backward"),
    ("reference", "row_mean"): ("shared", "row_mean"),
    ("conventions", "rms_norm"): ("norms.rms_norm", "convention_rms_norm"),
    ("conventions", "rms_norm_backward"): ("norms.rms_norm", "convention_rms_norm_backward"),
    ("conventions", "ConventionRMSNormFunction"): ("norms.rms_norm", "ConventionRMSNormFunction"),
    ("conventions", "layer_norm"): ("norms.layer_norm", "convention_layer_norm"),
    ("conventions", "ConventionLayerNormFunction"): ("norms.layer_norm", "ConventionLayerNormFunction"),
    ("conventions", "apply_gain"): ("shared", "apply_gain"),
    ("conventions", "rms_forward"): ("shared", "rms_forward"),
    ("conventions", "rms_backward"): ("shared", "rms_backward"),
    ("conventions", "row_mean"): ("shared", "family_row_mean"),
    ("variants", "partial_rms_norm"): ("norms.prms_norm", "partial_rms_norm"),
    ("variants", "grouped_rms_norm"): ("norms.grouped_rms_norm", "grouped_rms_norm"),
    ("variants", "fused_add_rms_norm"): ("norms.fused_add_rms_norm", "fused_add_rms_norm"),
    ("variants", "qk_norm"): ("norms.qk_norm", "qk_norm"),
    ("variants", "scale_norm"): ("norms.scale_norm", "scale_norm"),
}


@pytest.mark.parametrize("old,new", sorted(MOVED.items()), ids=lambda v: ".".join(v))
def test_an_old_name_is_the_catalog_modules_object(old, new):
    old_mod = importlib.import_module(f"reference_impl.{old[0]}")
    new_mod = importlib.import_module(f"reference_impl.{new[0]}")
    assert getattr(old_mod, old[1]) is getattr(new_mod, new[1])
    assert getattr(new_mod, new[1]).__module__ == f"reference_impl.{new[0]}"  # defined there, not re-exported


def test_no_norm_module_imports_the_old_entry_points():
    """The old modules import the catalog; a catalog module that imported them back would close a circle
    (and the math would again live in two places)."""
    graph = import_graph()
    old = {"reference_impl.reference", "reference_impl.conventions", "reference_impl.variants"}
    bad = {m: sorted(graph[m] & old) for m in graph if m.startswith("reference_impl.norms") and graph[m] & old}
    assert not bad, f"catalog modules importing the old entry points: {bad}"
    assert not (graph["reference_impl.shared"] & ({m for m in graph if m.startswith("reference_impl.norms")} | old))


def test_the_old_modules_define_no_norm_math():
    """The old modules ``reference``, ``conventions`` and ``variants`` (module objects without a file, made
    by reference_impl/__init__.py) define no function or class of their own: each name resolves to its home."""
    import inspect

    for name in ("reference", "conventions", "variants"):
        mod = importlib.import_module(f"reference_impl.{name}")
        assert getattr(mod, "__file__", None) is None, (name, mod.__file__)
        for attr in mod.__all__:
            getattr(mod, attr)  # every old name resolves
        own = sorted(n for n, v in vars(mod).items()
                     if (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == mod.__name__)
        assert own == [], (name, own)
