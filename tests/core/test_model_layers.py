"""The catalog's model layers (NormSpec.layer) and the tiny decoder that builds its norms from them.

A catalog entry that declares a ``Layer`` is a norm the tiny decoder of the training studies can name; the
layer must compute what its entry's reference computes, and the studies list the files behind the layers
they use (not every catalog module)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from reference_impl import norms
from reference_impl import provenance as pv
from reference_impl.norms import CATALOG, Layer, layer_sources, model_layers
from reference_impl.tiny_lm import TinyLM, TinyLMConfig, norm_names, qk_norm_names
from reference_impl.tiny_lm import sources as tiny_lm_sources

LAYERED = sorted(n for n, s in CATALOG.items() if s.layer is not None)


def test_the_tiny_decoders_norms_are_the_catalogs_layers():
    assert set(model_layers()) == {"rms", "ln", "dyt", "derf"}
    assert set(norm_names()) == set(model_layers()) | {"identity"}
    assert qk_norm_names() == ("none", "rms", "ln")
    assert {model_layers()[s].name for s in ("rms", "ln")} == {"rms_norm.torch", "layer_norm.neox"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", LAYERED)
def test_a_declared_layer_computes_its_catalog_entry(name, dtype):
    """The module ``build`` returns, with random parameters, equals the entry's reference bit for bit."""
    spec = CATALOG[name]
    g = torch.Generator().manual_seed(3)
    module = spec.layer.build(33, 1e-5).to(dtype)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype) * 0.5 + 1.0)
    x = torch.randn(5, 33, generator=g, dtype=torch.float64).to(dtype)
    inputs = {"x": x, **{k: v.detach() for k, v in module.named_parameters()}}
    override = {"eps": 1e-5} if "eps" in spec.params else {}
    with torch.no_grad():
        got, want = module(x), spec.run_reference(inputs, **override)
    assert got.dtype == want.dtype == dtype
    assert torch.equal(got, want), f"{name}: layer and reference differ by {(got - want).abs().max()}"


def _patched(monkeypatch, extra):
    specs = {**norms._catalog(), **{s.name: s for s in extra}}
    monkeypatch.setattr(norms, "_catalog", lambda: specs)


def test_an_entry_with_a_layer_is_available_to_the_tiny_decoder_with_no_edit(monkeypatch):
    base = CATALOG["rms_norm.torch"]
    new = dataclasses.replace(base, name="rms_norm.mine", layer=Layer("mine", lambda d, eps: torch.nn.RMSNorm(d, eps=eps)))
    _patched(monkeypatch, [new])
    assert "mine" in norm_names()
    model = TinyLM(TinyLMConfig(vocab=16, d=8, layers=1, heads=2, ffn=8, context=4, norm="mine"))
    assert model(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, 16)
    assert any(isinstance(m, torch.nn.RMSNorm) for m in model.modules())


def test_two_entries_claiming_one_short_name_is_an_error_naming_both(monkeypatch):
    base = CATALOG["rms_norm.torch"]
    _patched(monkeypatch, [dataclasses.replace(base, name="rms_norm.again")])
    with pytest.raises(ValueError, match=r"'rms'.*'rms_norm.again'|'rms'.*'rms_norm.torch'"):
        model_layers()


def test_an_unknown_norm_names_the_catalogs_layers():
    with pytest.raises(ValueError, match=r"norm must be one of .*'rms'.*catalog"):
        TinyLMConfig(norm="batch")
    with pytest.raises(ValueError, match="qk_norm must be one of"):
        TinyLMConfig(qk_norm="dyt")
    with pytest.raises(KeyError, match="no catalog layer 'batch'"):
        layer_sources(["batch"])


@pytest.mark.parametrize("short", ["RMS", "rms norm", "", "1x"])
def test_a_layer_short_name_is_a_lower_case_identifier(short):
    with pytest.raises(ValueError, match="short name"):
        Layer(short, torch.nn.RMSNorm)
    with pytest.raises(TypeError, match="callable"):
        Layer("ok", 3)


def test_the_studies_list_the_layers_modules_and_not_the_rest_of_the_catalog():
    """An edit to another catalog module cannot change the tiny decoder's numbers, so it does not stale them;
    an edit to a layer's declaring module or to the class it builds does."""
    srcs = tiny_lm_sources("reference_impl/studies/placements.py")
    for f in ("rms_norm.py", "layer_norm.py", "dyt_spec.py", "dyt.py", "derf_spec.py", "derf.py"):
        assert f"reference_impl/norms/{f}" in srcs, f
    assert "reference_impl/norms/gated_rms_norm.py" not in srcs
    assert "reference_impl/tiny_lm.py" in srcs and "reference_impl/studies/placements.py" in srcs
    # the plain closure expands the whole catalog (tiny_lm imports the package): the studies must not use it
    assert "reference_impl/norms/gated_rms_norm.py" in pv.python_closure("reference_impl/tiny_lm.py")
    assert "reference_impl/norms/gated_rms_norm.py" not in pv.python_closure("reference_impl/tiny_lm.py",
                                                                              discover=False)
