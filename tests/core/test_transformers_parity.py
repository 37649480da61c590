"""Our conventions against the code people run: the installed transformers 5.24.0 modules and
torch.nn.RMSNorm, instantiated with random weights (no downloads). Forward: torch.equal in float32, float16
and bfloat16 (and float64) over odd shapes. Gradients: within the conventions' derived tolerance policy."""
from __future__ import annotations

import importlib
import inspect
import re
import warnings

import pytest
import torch
import torch.nn as nn

from reference_impl import conventions as cv
from reference_impl import families as fam
from reference_impl import oracle
from reference_impl import tolerances as tol
from reference_impl import variants as va

warnings.filterwarnings("ignore", message=".*torchvision.*")
import transformers  # noqa: E402  a pinned test dependency (requirements.txt): a missing one must fail, not skip

assert transformers.__version__ == "5.24.0", f"tests pin transformers 5.24.0, found {transformers.__version__}"

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SHAPES = [(1,), (3, 7), (2, 5, 33), (4, 127), (2, 1000), (1, 4097)]
RMS_FAMILIES = [f for f in fam.FAMILIES if f[3] in cv.RMS_CONVENTIONS]
IDS = [fam.family_key(f[0]) for f in fam.FAMILIES]
RMS_IDS = [fam.family_key(f[0]) for f in RMS_FAMILIES]


def modeling(folder):
    return importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")


def configuration(folder):
    return importlib.import_module(f"transformers.models.{folder}.configuration_{folder}")


def make_module(folder, cls_name, d, eps, dtype, seed, convention):
    cls = nn.LayerNorm if cls_name == "LayerNorm" else getattr(modeling(folder), cls_name)
    m = cls(d, eps=eps)
    g = torch.Generator().manual_seed(seed)
    centre = 0.0 if convention == "gemma" else 1.0
    with torch.no_grad():
        m.weight.copy_(centre + 0.5 * torch.randn(m.weight.shape, generator=g))
        if getattr(m, "bias", None) is not None:
            m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))
    return m.to(dtype)


def data(shape, dtype, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# ------------------------------------------------------------------------------------------ forward

@pytest.mark.guards("parity.transformers_forward", "C35")
@pytest.mark.parametrize("w_dtype", ["same", "float32"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", RMS_FAMILIES, ids=RMS_IDS)
def test_rmsnorm_family_forward_is_bit_identical(family, dtype, w_dtype):
    """Every odd shape, weights in the activations' dtype or kept in float32 (as some code does)."""
    _, folder, cls_name, convention, *_ = family
    wd = dtype if w_dtype == "same" else torch.float32
    for i, shape in enumerate(SHAPES):
        m = make_module(folder, cls_name, shape[-1], 1e-6, wd, 100 + i, convention)
        x = data(shape, dtype, 200 + i)
        with torch.no_grad():
            expected = m(x)
        ours = cv.rms_norm(x, m.weight.detach(), 1e-6, convention=convention)
        assert ours.dtype == expected.dtype == cv.output_dtype(dtype, wd, convention)
        assert torch.equal(ours, expected), f"{cls_name} {dtype} {shape}: not bit-identical"


@pytest.mark.guards("parity.transformers_forward", "C34")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layernorm_families_forward_is_bit_identical(dtype):
    for i, shape in enumerate(SHAPES):
        x = data(shape, dtype, 300 + i) + 2.0
        neox = make_module("gpt_neox", "LayerNorm", shape[-1], 1e-5, dtype, 310 + i, "neox")
        with torch.no_grad():
            assert torch.equal(cv.layer_norm(x, neox.weight, neox.bias, 1e-5, convention="neox"), neox(x))
        cohere = make_module("cohere", "CohereLayerNorm", shape[-1], 1e-5, dtype, 320 + i, "cohere")
        with torch.no_grad():
            assert torch.equal(cv.layer_norm(x, cohere.weight, None, 1e-5, convention="cohere"), cohere(x))


@pytest.mark.guards("parity.transformers_forward", "parity.torch_rmsnorm", "conventions.torch_eps_none")
@pytest.mark.parametrize("eps", [None, 1e-6, 1e-5, 0.0])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_nn_rmsnorm_forward_is_bit_identical(dtype, eps):
    for i, shape in enumerate(SHAPES):
        m = nn.RMSNorm(shape[-1], eps=eps, dtype=dtype)
        with torch.no_grad():
            m.weight.copy_(1 + 0.5 * torch.randn(shape[-1], generator=torch.Generator().manual_seed(i)))
        for scale in (3.0, 1e-3):  # 1e-3: small RMS, where the eps (and eps=None's choice) matters
            x = data(shape, dtype, 400 + i, scale)
            with torch.no_grad():
                assert torch.equal(cv.rms_norm(x, m.weight, eps, convention="torch"), m(x))
            assert torch.equal(cv.rms_norm(x, None, eps, convention="torch"),
                               torch.nn.functional.rms_norm(x, (shape[-1],), None, eps))


# ------------------------------------------------------------------------------------------ gradients

def _hf_extra_roundings(convention, x_dtype, w_dtype):
    """Roundings in the activations' dtype that the module's autograd graph performs beyond ours.

    llama (and t5 with a half weight): y = w * q with q the normalized value rounded to x's dtype, so
    autograd forms dq = dy * w in that dtype (one rounding on g) and dw = sum(dy * q) from the rounded q
    and a rounded product (two more), reduced over the rows in the weight's dtype."""
    if convention in ("llama", "t5") and x_dtype in cv.HALF and w_dtype in cv.HALF:
        return 2, True
    return 0, False


@pytest.mark.guards("parity.transformers_backward", "conventions.backward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", RMS_FAMILIES, ids=RMS_IDS)
def test_rmsnorm_family_gradients_within_policy(family, dtype):
    _, folder, cls_name, convention, *_ = family
    for i, shape in enumerate([(3, 7), (2, 5, 33), (4, 1000)]):
        m = make_module(folder, cls_name, shape[-1], 1e-6, dtype, 500 + i, convention)
        x = data(shape, dtype, 600 + i)
        dy = data(shape, dtype, 700 + i, 1.0)
        xh = x.clone().requires_grad_(True)
        m(xh).backward(dy)
        w = m.weight.detach().clone().requires_grad_(True)
        xo = x.clone().requires_grad_(True)
        cv.rms_norm(xo, w, 1e-6, convention=convention).backward(dy)
        gain = cv.effective_gain(m.weight.detach(), convention)
        edx, edw = oracle.rms_norm_backward_placed(dy.double().numpy(), x.double().numpy(), gain.double().numpy(), 1e-6)
        # ours: the conventions' policy
        bdx, bdw = tol.convention_backward_bounds(dy, x, m.weight.detach(), 1e-6, convention)
        tol.assert_within(xo.grad, edx, bdx, f"ours {cls_name} dx")
        tol.assert_within(w.grad, edw, bdw, f"ours {cls_name} dweight")
        # theirs: the same policy plus the roundings their autograd graph performs in low precision
        k, low_rows = _hf_extra_roundings(convention, dtype, m.weight.dtype)
        bdx, bdw = tol.convention_backward_bounds(dy, x, m.weight.detach(), 1e-6, convention, extra_low=k, w_low_rows=low_rows)
        tol.assert_within(xh.grad, edx, bdx, f"{cls_name} dx")
        tol.assert_within(m.weight.grad, edw, bdw, f"{cls_name} dweight")


@pytest.mark.guards("parity.transformers_backward", "conventions.layernorm")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layernorm_family_gradients_within_policy(dtype):
    """nn.LayerNorm (GPT-NeoX) and CohereLayerNorm autograd, and our explicit backward, vs the oracle."""

    for i, shape in enumerate([(3, 7), (2, 5, 33), (4, 1000)]):
        x, dy = data(shape, dtype, 1800 + i) + 2.0, data(shape, dtype, 1810 + i, 1.0)
        for folder, cls_name, conv in (("gpt_neox", "LayerNorm", "neox"), ("cohere", "CohereLayerNorm", "cohere")):
            if conv == "cohere" and dtype == torch.float64:
                continue  # CohereLayerNorm computes float64 input in float32; its forward test covers it
            m = make_module(folder, cls_name, shape[-1], 1e-5, dtype, 1820 + i, conv)
            b = getattr(m, "bias", None)
            xm = x.clone().requires_grad_(True)
            m(xm).backward(dy)
            xo = x.clone().requires_grad_(True)
            wo = m.weight.detach().clone().requires_grad_(True)
            cv.layer_norm(xo, wo, None if b is None else b.detach(), 1e-5, convention=conv).backward(dy)
            bd = None if b is None else b.detach()
            edx, edw, _ = oracle.layer_norm_backward(dy.double().numpy(), x.double().numpy(),
                                                     m.weight.detach().double().numpy(), None if bd is None else bd.double().numpy(), 1e-5)
            bdx, bdw, _ = tol.ln_backward_bounds(dy, x, m.weight.detach(), bd, 1e-5, dtype)
            tol.assert_within(xo.grad, edx, bdx, "ours dx")
            tol.assert_within(wo.grad, edw, bdw, "ours dweight")
            if conv == "neox" and dtype in cv.HALF:
                # torch's CPU LayerNorm backward rounds in the half dtype: charge two roundings and the row sums
                bdx, bdw, _ = tol.ln_family_backward_bounds(dy, x, m.weight.detach(), bd, 1e-5, extra_low=2, w_low_rows=True)
            tol.assert_within(xm.grad, edx, bdx, f"{cls_name} dx")
            tol.assert_within(m.weight.grad, edw, bdw, f"{cls_name} dweight")


@pytest.mark.guards("parity.transformers_backward", "conventions.layernorm")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_torch_layernorm_half_backward_exceeds_the_float32_bound(dtype):
    """Why the neox bound above charges extra roundings: torch's CPU LayerNorm backward in half precision
    is less accurate than a float32 computation rounded once (our explicit backward is not)."""

    x, dy = data((2, 5, 33), dtype, 1801) + 2.0, data((2, 5, 33), dtype, 1811, 1.0)
    m = make_module("gpt_neox", "LayerNorm", 33, 1e-5, dtype, 1821, "neox")
    xm = x.clone().requires_grad_(True)
    m(xm).backward(dy)
    args = (dy.double().numpy(), x.double().numpy(), m.weight.detach().double().numpy(), m.bias.detach().double().numpy(), 1e-5)
    edx = oracle.layer_norm_backward(*args)[0]
    bdx = tol.ln_backward_bounds(dy, x, m.weight.detach(), m.bias.detach(), 1e-5, dtype)[0]
    with pytest.raises(AssertionError, match="outside the policy bound"):
        tol.assert_within(xm.grad, edx, bdx, "torch LayerNorm dx")
    xo = x.clone().requires_grad_(True)
    cv.layer_norm(xo, m.weight.detach(), m.bias.detach(), 1e-5, convention="neox").backward(dy)
    tol.assert_within(xo.grad, edx, bdx, "ours dx")


@pytest.mark.guards("parity.torch_rmsnorm", "parity.transformers_backward")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_nn_rmsnorm_gradients_within_policy(dtype):
    for i, shape in enumerate([(3, 7), (2, 5, 33), (4, 1000)]):
        m = nn.RMSNorm(shape[-1], eps=1e-6, dtype=dtype)
        with torch.no_grad():
            m.weight.copy_(1 + 0.5 * torch.randn(shape[-1], generator=torch.Generator().manual_seed(i)))
        x, dy = data(shape, dtype, 800 + i), data(shape, dtype, 900 + i, 1.0)
        xt = x.clone().requires_grad_(True)
        m(xt).backward(dy)
        xo, w = x.clone().requires_grad_(True), m.weight.detach().clone().requires_grad_(True)
        cv.rms_norm(xo, w, 1e-6, convention="torch").backward(dy)
        edx, edw = oracle.rms_norm_backward_placed(dy.double().numpy(), x.double().numpy(), m.weight.detach().double().numpy(), 1e-6)
        bdx, bdw = tol.convention_backward_bounds(dy, x, m.weight.detach(), 1e-6, "torch")
        for name, gx, gw in (("torch", xt.grad, m.weight.grad), ("ours", xo.grad, w.grad)):
            tol.assert_within(gx, edx, bdx, f"{name} dx")
            tol.assert_within(gw, edw, bdw, f"{name} dweight")


# ------------------------------------------------------------------------------------------ variants

@pytest.mark.guards("parity.transformers_forward", "variants.grouped")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grouped_rmsnorm_matches_mamba2_gated_norm(dtype):
    cls = modeling("mamba2").MambaRMSNormGated
    for i, (shape, groups) in enumerate([((2, 5, 64), 8), ((3, 96), 4), ((1, 7, 48), 1)]):
        m = cls(shape[-1], group_size=shape[-1] // groups, eps=1e-5)
        with torch.no_grad():
            m.weight.copy_(1 + 0.5 * torch.randn(shape[-1], generator=torch.Generator().manual_seed(i)))
        m = m.to(dtype)
        x, z = data(shape, dtype, 1000 + i), data(shape, dtype, 1100 + i, 1.5)
        with torch.no_grad():
            assert torch.equal(va.grouped_rms_norm(x, m.weight, groups, 1e-5), m(x))
            assert torch.equal(va.grouped_rms_norm(x, m.weight, groups, 1e-5, gate=z), m(x, z))


@pytest.mark.guards("parity.adoption", "variants.grouped")
def test_mamba2_mixer_builds_its_grouped_norm_from_n_groups():
    src = inspect.getsource(modeling("mamba2").Mamba2Mixer.__init__)
    assert re.search(r"MambaRMSNormGated\(\s*self\.intermediate_size,\s*group_size=self\.intermediate_size // self\.n_groups", src)
    assert configuration("mamba2").Mamba2Config().n_groups == 8


@pytest.mark.guards("variants.qk_norm", "parity.transformers_forward")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_qk_norm_placements_match_qwen3_and_olmo2(dtype):
    hd, hq, hk = 16, 4, 2
    q, k = data((2, 5, hq * hd), dtype, 1200), data((2, 5, hk * hd), dtype, 1201)
    # Qwen3: one (head_dim,) norm applied to q viewed as (..., heads, head_dim)
    qn = make_module("qwen3", "Qwen3RMSNorm", hd, 1e-6, dtype, 1202, "llama")
    kn = make_module("qwen3", "Qwen3RMSNorm", hd, 1e-6, dtype, 1203, "llama")
    with torch.no_grad():
        eq = qn(q.view(2, 5, hq, hd)).reshape(q.shape), kn(k.view(2, 5, hk, hd)).reshape(k.shape)
    ours = va.qk_norm(q, k, qn.weight.detach(), kn.weight.detach(), hd, 1e-6, placement="per_head", convention="llama")
    assert torch.equal(ours[0], eq[0]) and torch.equal(ours[1], eq[1])
    # OLMo 2: a norm as wide as the whole projection
    qo = make_module("olmo2", "Olmo2RMSNorm", hq * hd, 1e-6, dtype, 1204, "olmo2")
    ko = make_module("olmo2", "Olmo2RMSNorm", hk * hd, 1e-6, dtype, 1205, "olmo2")
    with torch.no_grad():
        eo = qo(q), ko(k)
    ours = va.qk_norm(q, k, qo.weight.detach(), ko.weight.detach(), hd, 1e-6, placement="full", convention="olmo2")
    assert torch.equal(ours[0], eo[0]) and torch.equal(ours[1], eo[1])


@pytest.mark.guards("variants.qk_norm", "parity.adoption")
def test_qk_norm_placement_in_the_installed_sources():
    q3 = inspect.getsource(modeling("qwen3").Qwen3Attention)
    assert "self.q_norm = Qwen3RMSNorm(self.head_dim" in q3
    assert re.search(r"self\.q_norm\(self\.q_proj\(hidden_states\)\.view\(hidden_shape\)\)", q3)
    g3 = inspect.getsource(modeling("gemma3").Gemma3Attention)
    assert "self.q_norm = Gemma3RMSNorm(dim=config.head_dim" in g3
    o2 = inspect.getsource(modeling("olmo2").Olmo2Attention)
    assert "self.q_norm = Olmo2RMSNorm(config.num_attention_heads * self.head_dim" in o2
    assert "self.q_norm(self.q_proj(hidden_states))" in o2


@pytest.mark.guards("variants.fused_add", "parity.transformers_forward")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_fused_add_matches_the_llama_layer_boundary(dtype):
    src = inspect.getsource(modeling("llama").LlamaDecoderLayer.forward)
    # the decoder layer adds the residual in the activations' dtype, then the next norm reads the sum
    assert src.index("hidden_states = residual + hidden_states") < src.index("hidden_states = self.post_attention_layernorm(hidden_states)")
    m = make_module("llama", "LlamaRMSNorm", 129, 1e-6, dtype, 1300, "llama")
    h, res = data((2, 3, 129), dtype, 1301), data((2, 3, 129), dtype, 1302)
    with torch.no_grad():
        s = res + h
        expected = m(s)
        y, new_res = va.fused_add_rms_norm(h, res, m.weight, 1e-6, convention="llama")
    assert torch.equal(new_res, s) and torch.equal(y, expected)


# ------------------------------------------------------------------------------------------ adoption

def classify_norm_source(src: str) -> str:
    """Names the convention of a norm's forward from its source text (the casting order's signature)."""
    if "(1.0 + self.weight" in src:
        return "gemma"
    if "self.weight.dtype in [torch.float16, torch.bfloat16]" in src:
        return "t5"
    if re.search(r"mean = hidden_states\.mean\(-1", src):
        return "cohere"
    if "(self.weight * hidden_states).to(input_dtype)" in src:
        return "olmo2"
    if "self.weight * hidden_states.to(input_dtype)" in src:
        return "llama"
    return "unknown"


@pytest.mark.guards("parity.adoption", "C34", "C35", "snippet:conventions.families")
@pytest.mark.parametrize("family", fam.FAMILIES, ids=IDS)
def test_adoption_row(family):
    """One row of the History page's table: the family's layer builds this norm class with the config's
    eps, the class's forward has this convention's casting order, and the config default is as listed."""
    name, folder, cls_name, convention, cfg_name, eps_attr, layer_name = family
    mod = modeling(folder)
    layer_src = inspect.getsource(getattr(mod, layer_name).__init__)
    ctor = "nn.LayerNorm" if cls_name == "LayerNorm" else cls_name
    assert re.search(rf"{re.escape(ctor)}\((?:[^()]|\([^()]*\))*config\.{eps_attr}", layer_src), f"{layer_name} does not build {ctor}"
    if cls_name == "LayerNorm":
        assert convention == "neox"
    else:
        assert classify_norm_source(inspect.getsource(getattr(mod, cls_name).forward)) == convention
    eps = getattr(getattr(configuration(folder), cfg_name)(), eps_attr)
    assert isinstance(eps, float) and 0 < eps < 1e-3
    # the number the page shows comes from the data file; it must be this config default
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "docs" / "data" / "numerics.json"
    row = json.loads(path.read_text())["adoption"][fam.family_key(name)]
    assert row["eps"] == eps and row["norm_class"] == cls_name and row["convention"] == convention


@pytest.mark.guards("parity.adoption", "C35")
def test_t5_layernorm_is_an_rmsnorm():
    """T5's class is named LayerNorm but does not centre: a shifted input changes its output."""
    m = make_module("t5", "T5LayerNorm", 64, 1e-6, torch.float64, 1400, "t5")
    x = data((3, 64), torch.float64, 1401)
    with torch.no_grad():
        y, y_shift = m(x), m(x + 5.0)
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True).float() + 1e-6) * m.weight
    assert not torch.allclose(y, y_shift, atol=1e-2)
    assert torch.allclose(y, rms, rtol=1e-6, atol=0)
    assert ".mean(" in inspect.getsource(m.forward) and "- mean" not in inspect.getsource(m.forward)


@pytest.mark.guards("C25")
def test_pre_norm_placement_in_llama_and_post_sublayer_norm_in_olmo2():
    """Pre-LN (arXiv:2002.04745) normalizes the sublayer's *input*: x + F(Norm(x)), as Llama does.
    The form x + Norm(F(x)) normalizes the sublayer's *output*; among the installed models OLMo 2 does that."""
    llama = inspect.getsource(modeling("llama").LlamaDecoderLayer.forward)
    i_norm = llama.index("hidden_states = self.input_layernorm(hidden_states)")
    i_attn = llama.index("self.self_attn(")
    i_add = llama.index("hidden_states = residual + hidden_states")
    assert i_norm < i_attn < i_add
    olmo = inspect.getsource(modeling("olmo2").Olmo2DecoderLayer.forward)
    j_attn = olmo.index("self.self_attn(")
    j_norm = olmo.index("hidden_states = self.post_attention_layernorm(hidden_states)")
    j_add = olmo.index("hidden_states = residual + hidden_states")
    assert j_attn < j_norm < j_add
    assert "input_layernorm" not in inspect.getsource(modeling("olmo2").Olmo2DecoderLayer.__init__)
    # Gemma 2 does both: a norm on the sublayer's input and one on its output, before the residual add
    gemma2 = inspect.getsource(modeling("gemma2").Gemma2DecoderLayer.forward)
    k = [gemma2.index(t) for t in ("hidden_states = self.input_layernorm(hidden_states)", "self.self_attn(",
                                   "hidden_states = self.post_attention_layernorm(hidden_states)",
                                   "hidden_states = residual + hidden_states")]
    assert k == sorted(k)


@pytest.mark.guards("C03")
def test_installed_sources_cite_the_rmsnorm_paper():
    """torch.nn.RMSNorm and transformers' T5LayerNorm cite arXiv:1910.07467 (Zhang and Sennrich)."""
    assert "1910.07467" in nn.RMSNorm.__doc__
    assert "1910.07467" in inspect.getsource(modeling("t5").T5LayerNorm.forward)


class _ArticleRMSNorm(nn.Module):
    """C40: the article's module reconstructed from its description: gain of ones, ``x.float()``,
    ``x * rsqrt(mean(x**2) + eps)``, ``.type_as(x)``, then ``* weight``."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


@pytest.mark.guards("C40")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_article_module_is_the_llama_convention(dtype):
    for i, shape in enumerate(SHAPES):
        art = _ArticleRMSNorm(shape[-1])
        hf = make_module("llama", "LlamaRMSNorm", shape[-1], 1e-6, dtype, 1500 + i, "llama")
        art = art.to(dtype)
        with torch.no_grad():
            art.weight.copy_(hf.weight)
            x = data(shape, dtype, 1600 + i)
            y = art(x)
            assert torch.equal(y, hf(x))
            assert torch.equal(y, cv.rms_norm(x, hf.weight, 1e-6, convention="llama"))
        expected = oracle.rms_norm_forward_placed(x.double().numpy(), hf.weight.detach().double().numpy(), 1e-6)
        tol.assert_within(y, expected, tol.convention_forward_bound(x, hf.weight.detach(), 1e-6, "llama"), "article module")
    # with a float32 gain and half activations, its output is float32 (type promotion), as Llama's
    x = data((2, 8), torch.bfloat16, 1700)
    assert _ArticleRMSNorm(8)(x).dtype == torch.float32


@pytest.mark.guards("parity.transformers_forward")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("family", RMS_FAMILIES, ids=RMS_IDS)
def test_non_finite_rows_match_the_modules(family, dtype):
    """A NaN, an Inf, a huge value and an all-zero row: same bits (and the same NaN positions) as the module."""
    _, folder, cls_name, convention, *_ = family
    m = make_module(folder, cls_name, 16, 1e-6, dtype, 1900, convention)
    x = data((5, 16), dtype, 1901)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    x[2, 7] = torch.finfo(dtype).max
    x[3] = 0
    with torch.no_grad():
        theirs = m(x)
    ours = cv.rms_norm(x, m.weight.detach(), 1e-6, convention=convention)
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    assert torch.equal(torch.nan_to_num(ours), torch.nan_to_num(theirs))
    assert torch.isnan(ours[0]).all() and torch.equal(ours[4], theirs[4]) and (ours[3] == 0).all()
