"""A model whose norm has no parameters (OLMo's LayerNorm: no gain, no bias, eps fixed inside the class)
is checked like any other: its module is built without the ``eps`` its constructor does not take, the
probes carry neither gain nor bias, the eps is the class's own, and a right function passes while one that
adds a bias, or uses another eps, fails."""
from __future__ import annotations

import torch

from reference_impl.check import check_norm, models as M


def _olmo_right(x, weight=None, bias=None, eps=1e-5):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), None, None, eps).to(x.dtype)


def test_olmo_target_has_neither_gain_nor_bias_and_the_class_eps():
    t = M.resolve("olmo")
    assert t.norm_class == "OlmoLayerNorm" and t.gain == "none" and t.bias is False
    from transformers.models.olmo import modeling_olmo
    import inspect
    src = inspect.getsource(modeling_olmo.OlmoLayerNorm.forward)
    assert "eps=1e-5" in src.replace(" ", "").replace("eps=1e-05", "eps=1e-5")  # the class's own eps
    assert t.eps == 1e-5


def test_a_right_parameter_free_layer_norm_passes_olmo():
    r = check_norm(_olmo_right, "olmo", widths=(33, 4096), dtypes=("bf16", "fp32"))
    assert r.ok and r.results, str(r)


def test_another_eps_fails_olmo():
    def wrong_eps(x, weight=None, bias=None, eps=1e-5):
        return _olmo_right(x, eps=1e-2)
    r = check_norm(wrong_eps, "olmo", widths=(33,), dtypes=("fp32",), raise_on_failure=False)
    assert not r.ok and r.failures
