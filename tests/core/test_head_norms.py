"""The per-head entries (reference_impl/norms/head_norms.py) and their copyable functions
(reference_impl/standalone/head_norms.py) against the installed transformers, bit for bit: the value norm of
Gemma 3n / Gemma 4, the LayerNorm QK-norms of Persimmon, StableLM, Chameleon and Cohere, and the L2
normalization of q and k in the gated delta rule of Qwen3-Next, Qwen3.5 and Kimi Linear. Each entry is also
tied to an independent neighbour: with one gain for every head a per-head norm is the catalog's plain
LayerNorm of the same order; the value norm is OLMo 2's RMSNorm order without a gain.

The catalog's generic tests (tests/core/test_catalog.py) cover oracle, bounds, gradients and bad inputs.
"""
from __future__ import annotations

import importlib
import inspect
import warnings

import pytest
import torch

import reference_impl.standalone as sa
from reference_impl.norms import CATALOG

warnings.filterwarnings("ignore", message=".*torchvision.*")
import transformers  # noqa: E402,F401  a pinned test dependency: a missing one must fail, not skip

DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
SCALES = (1e-3, 1.0, 30.0)
HEADS, HEAD_DIM = 3, 16


def _mod(folder):
    return importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")


def _t(shape, dtype, scale, seed, around=0.0):
    g = torch.Generator().manual_seed(seed)
    return (around + scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)


def _same(a, b, label):
    assert a.dtype == b.dtype, f"{label}: dtype {a.dtype}, expected {b.dtype}"
    assert a.shape == b.shape, f"{label}: shape {tuple(a.shape)}, expected {tuple(b.shape)}"
    assert torch.equal(a, b), f"{label}: {int((a != b).sum())} of {a.numel()} elements differ"


def _cases(offset=0.0):
    for dtype in DTYPES:
        for i, scale in enumerate(SCALES):
            yield dtype, scale, _t((2, 5, HEADS, HEAD_DIM), dtype, scale, 10 + i, offset * scale)


def _src(folder, cls):
    return inspect.getsource(getattr(_mod(folder), cls)).replace(" ", "").replace("\n", "")


@pytest.mark.guards("norm.value_norm", "snippet:standalone.gemma_value_norm")
def test_value_norm_equals_the_gemma_v_norms():
    """``v_norm`` of Gemma 3n and Gemma 4 is their RMSNorm built without a scale, on the values per head."""
    for folder, cls in (("gemma4", "Gemma4RMSNorm"), ("gemma3n", "Gemma3nRMSNorm")):
        assert "self.v_norm=" + cls + "(" in _src(folder, cls.replace("RMSNorm", "TextAttention")) \
            and "with_scale=False" in _src(folder, cls.replace("RMSNorm", "TextAttention"))
        m = getattr(_mod(folder), cls)(HEAD_DIM, eps=1e-6, with_scale=False)
        for dtype, scale, x in _cases():
            with torch.no_grad():
                want = m(x)
            _same(CATALOG["value_norm"].reference(x, 1e-6), want, f"value_norm vs {cls} {dtype} {scale:g}")
            _same(sa.gemma_value_norm(x, 1e-6), want, f"gemma_value_norm vs {cls} {dtype} {scale:g}")


def test_value_norm_is_olmo2s_order_without_a_gain():
    olmo2 = CATALOG["rms_norm.olmo2"]
    for dtype, scale, x in _cases():
        _same(CATALOG["value_norm"].reference(x, 1e-6), olmo2.reference(x, None, 1e-6, "olmo2", "inside"),
              f"{dtype} {scale:g}")


@pytest.mark.guards("norm.qk_norm.layer_norm", "snippet:standalone.persimmon_qk_norm")
def test_layer_qk_norm_equals_persimmons_layer_norms():
    src = _src("persimmon", "PersimmonAttention")
    assert "self.q_layernorm=nn.LayerNorm(" in src and "self.k_layernorm=nn.LayerNorm(" in src
    spec = CATALOG["qk_norm.layer_norm"]
    for dtype, scale, q in _cases(offset=2.0):
        k = _t((2, 5, 1, HEAD_DIM), dtype, scale, 3, scale)
        mods = [torch.nn.LayerNorm(HEAD_DIM, eps=1e-5, dtype=dtype) for _ in range(2)]
        with torch.no_grad():
            for j, m in enumerate(mods):
                m.weight.copy_(_t((HEAD_DIM,), dtype, 0.5, 20 + j, 1.0))
                m.bias.copy_(_t((HEAD_DIM,), dtype, 0.3, 30 + j))
            want = (mods[0](q), mods[1](k))
            args = (q, k, mods[0].weight, mods[0].bias, mods[1].weight, mods[1].bias, 1e-5)
            for got, label in ((spec.reference(*args), "entry"), (sa.persimmon_qk_norm(*args), "standalone")):
                for a, b in zip(got, want):
                    _same(a, b, f"{label} {dtype} {scale:g}")


def _per_head_modules(order, dtype, wd):
    w = _t((HEADS, HEAD_DIM), wd, 0.5, 4, 1.0)
    b = _t((HEADS, HEAD_DIM), wd, 0.3, 5)
    if order == "stablelm":
        m = _mod("stablelm").StableLmLayerNormPerHead(HEAD_DIM, HEADS, eps=1e-5, bias=True).to(wd)
        with torch.no_grad():
            for h, norm in enumerate(m.norms):
                norm.weight.copy_(w[h])
                norm.bias.copy_(b[h])
        # the model's layout is [batch, heads, seq, head_dim]; the entry's (..., heads, head_dim)
        return (lambda x: m(x.transpose(-3, -2)).transpose(-3, -2)), w, b
    if order == "chameleon":
        m = _mod("chameleon").ChameleonLayerNorm((HEADS, HEAD_DIM)).to(wd)
        with torch.no_grad():
            m.weight.copy_(w)
            m.bias.copy_(b)
        return m, w, b
    m = _mod("cohere").CohereLayerNorm(hidden_size=(HEADS, HEAD_DIM), eps=1e-5)
    with torch.no_grad():
        m.weight = torch.nn.Parameter(w.clone())
    return m, w, None


@pytest.mark.guards("norm.qk_norm.layer_per_head_gain.stablelm", "norm.qk_norm.layer_per_head_gain.chameleon",
                    "norm.qk_norm.layer_per_head_gain.cohere", "snippet:standalone.stablelm_qk_norm",
                    "snippet:standalone.chameleon_qk_norm", "snippet:standalone.cohere_qk_norm")
@pytest.mark.parametrize("order", ["stablelm", "chameleon", "cohere"])
def test_per_head_gain_qk_norms_equal_the_model_classes(order):
    spec = CATALOG[f"qk_norm.layer_per_head_gain.{order}"]
    fn = getattr(sa, sa.BY_CATALOG[spec.name])
    n = 0
    for dtype, scale, x in _cases(offset=2.0):
        # nn.LayerNorm-based modules keep gain and bias in the model's dtype; Cohere's gain may be float32
        for wd in sorted({dtype, torch.float32}, key=str) if order == "cohere" else (dtype,):
            m, w, b = _per_head_modules(order, dtype, wd)
            kw = {} if order == "chameleon" else {"eps": 1e-5}
            extra = () if b is None else (b,)
            with torch.no_grad():
                want = m(x)
                _same(spec.reference(x, w, b, 1e-5, order=order), want, f"{order} entry {dtype} w {wd} {scale:g}")
                _same(fn(x, w, *extra, **kw), want, f"{order} standalone {dtype} w {wd} {scale:g}")
            n += 1
    assert n >= len(DTYPES) * len(SCALES)


def test_chameleon_fixes_eps_and_the_entry_refuses_another():
    assert "eps=1e-5)" in _src("chameleon", "ChameleonLayerNorm")
    spec = CATALOG["qk_norm.layer_per_head_gain.chameleon"]
    inputs = spec.sample((3, 2, 7), torch.float32)
    with pytest.raises(ValueError, match="eps must be 1e-05"):
        spec.run_reference(inputs, eps=1e-6)


@pytest.mark.parametrize("order,plain", [("stablelm", "layer_norm.neox"), ("cohere", "layer_norm.cohere")])
def test_one_gain_for_every_head_is_the_plain_layer_norm_of_the_same_order(order, plain):
    spec, base = CATALOG[f"qk_norm.layer_per_head_gain.{order}"], CATALOG[plain]
    for dtype, scale, x in _cases(offset=2.0):
        w = _t((HEAD_DIM,), dtype, 0.5, 6, 1.0)
        b = None if order == "cohere" else _t((HEAD_DIM,), dtype, 0.3, 7)
        got = spec.reference(x, w.expand(HEADS, HEAD_DIM), None if b is None else b.expand(HEADS, HEAD_DIM), 1e-5,
                             order=order)
        _same(got, base.reference(x, w, b, 1e-5, plain.split(".")[1]), f"{order} {dtype} {scale:g}")
    # and a gain per head is not one gain: a different gain on head 0 changes head 0 only
    x = _t((4, HEADS, HEAD_DIM), torch.float32, 1.0, 8, 2.0)
    w = torch.ones(HEADS, HEAD_DIM)
    w2 = w.clone()
    w2[0] = 2.0
    a, c = spec.reference(x, w, None, 1e-5, order=order), spec.reference(x, w2, None, 1e-5, order=order)
    assert torch.equal(a[:, 1:], c[:, 1:]) and torch.equal(2 * a[:, 0], c[:, 0])


@pytest.mark.guards("norm.gated_delta_l2_norm.qwen3_next", "norm.gated_delta_l2_norm.kimi_linear",
                    "snippet:standalone.qwen3_next_l2norm", "snippet:standalone.kimi_linear_l2norm")
@pytest.mark.parametrize("order,folders,rules", [
    ("qwen3_next", ("qwen3_next", "qwen3_5", "qwen3_5_moe"), ("torch_chunk_gated_delta_rule",)),
    ("kimi_linear", ("kimi_linear",), ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention"))])
def test_delta_rule_l2_equals_the_models_l2norm_on_float32_q_and_k(order, folders, rules):
    spec, fn = CATALOG[f"gated_delta_l2_norm.{order}"], getattr(sa, sa.BY_CATALOG[f"gated_delta_l2_norm.{order}"])
    for folder in folders:
        mod = _mod(folder)
        # the models call it with eps 1e-6 on float32 tensors, inside the gated delta rule
        for name in rules:
            rule = inspect.getsource(getattr(mod, name)).replace(" ", "")
            assert "query=l2norm(query,dim=-1,eps=1e-6)" in rule, f"{folder}.{name}"
            assert rule.index("torch.float32") < rule.index("query=l2norm("), f"{folder}.{name}"
        for dtype, scale, x in _cases():
            want = mod.l2norm(x.to(torch.float32), dim=-1, eps=1e-6)
            _same(spec.reference(x, 1e-6, order=order), want, f"{order} vs {folder} {dtype} {scale:g}")
            _same(fn(x, 1e-6), want, f"{order} standalone vs {folder} {dtype} {scale:g}")
    # the two orders round differently, and neither is nGPT's max(||x||, eps)
    x = _t((64, HEAD_DIM), torch.float32, 1.0, 9)
    q3, kimi = (CATALOG[f"gated_delta_l2_norm.{o}"].run_reference({"x": x}) for o in ("qwen3_next", "kimi_linear"))
    assert not torch.equal(q3, kimi)
    tiny = torch.full((1, HEAD_DIM), 1e-5)
    assert not torch.allclose(spec.run_reference({"x": tiny}), CATALOG["l2_norm"].reference(tiny, 1e-6))


@pytest.mark.parametrize("order", ["stablelm", "chameleon", "cohere"])
def test_per_head_entries_are_matching_candidates_of_their_own_kind(order):
    """The census compares per-head classes with these entries (kind ``layer_per_head``): the candidate runs
    the entry's reference on a ``(rows, heads, head_dim)`` probe and refuses a plain ``(rows, width)`` one."""
    from reference_impl.check import matching
    from reference_impl.norms.spec import NotApplicable

    name = f"qk_norm.layer_per_head_gain.{order}"
    assert name in [c.entry for c in matching.candidate_list("layer_per_head")]
    run = CATALOG[name].match_run
    x = _t((4, HEADS, HEAD_DIM), torch.float32, 1.0, 1)
    w = _t((HEADS, HEAD_DIM), torch.float32, 0.1, 2, 1.0)
    b = None if order == "cohere" else _t((HEADS, HEAD_DIM), torch.float32, 0.3, 3)
    p = matching.Probe(x, w, b, 1e-5, "per head")
    assert torch.equal(run(p), CATALOG[name].reference(x, w, b, 1e-5, order=order))
    with pytest.raises(NotApplicable):
        run(matching.Probe(x.reshape(4, -1), w.reshape(-1), None, 1e-5, "rows"))
