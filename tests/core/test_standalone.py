"""The copyable functions of reference_impl/standalone/: each file imports only torch, and each function is
bit-identical (``torch.equal``, same dtype) to the catalog reference of its entry and to the model family's
own module in the installed transformers, in every dtype, with the gain in the activations' dtype and in
float32, at scales where eps matters and where it does not."""
from __future__ import annotations

import ast
import importlib
import inspect
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import reference_impl.standalone as sa
from reference_impl.norms import CATALOG

warnings.filterwarnings("ignore", message=".*torchvision.*")
import transformers  # noqa: E402  a pinned test dependency: a missing one must fail, not skip

STANDALONE = Path(sa.__file__).resolve().parent
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
SHAPES = [(1, 1), (3, 6), (2, 5, 33), (4, 128)]
QK_SHAPES = [(1, 6), (3, 6), (2, 5, 12), (4, 96)]  # the catalog's QK-norm entries use head_dim 3
SCALES = [1e-3, 1.0, 30.0]  # 1e-3: mean square ~1e-6, where eps = 1e-6 changes the bits


def _modeling(folder):
    return importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")


def _call(fn, inputs, params):
    """Calls a standalone function with the catalog's inputs and parameters its signature names."""
    names = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in {**inputs, **params}.items() if k in names})


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def _assert_bits(ours, expected, label):
    ours, expected = _as_tuple(ours), _as_tuple(expected)
    assert len(ours) == len(expected), label
    for a, b in zip(ours, expected):
        assert a.dtype == b.dtype, f"{label}: dtype {a.dtype}, expected {b.dtype}"
        assert a.shape == b.shape, f"{label}: shape {tuple(a.shape)}, expected {tuple(b.shape)}"
        assert torch.equal(a, b), f"{label}: {int((a != b).sum())} of {a.numel()} elements differ"


def _variants(spec, shape, dtype, seed):
    """The catalog's sample inputs, scaled, with each gain as sampled and in the activations' dtype."""
    base = spec.sample(shape, dtype, seed)
    first = next(iter(base))
    for scale in SCALES:
        scaled = {k: (v * scale if k in ("x", "q", "k", "residual") else v) for k, v in base.items()}
        yield f"scale {scale:g}", scaled
        gains = [k for k, v in scaled.items() if "weight" in k and v is not None and v.dtype != scaled[first].dtype]
        if gains:
            yield f"scale {scale:g}, gain in x's dtype", {k: (v.to(dtype) if k in gains else v)
                                                          for k, v in scaled.items()}


def test_every_file_imports_only_torch():
    for path in sorted(STANDALONE.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert [a.name for a in node.names] == ["torch"], f"{path.name}: imports {[a.name for a in node.names]}"
            assert not isinstance(node, ast.ImportFrom), f"{path.name}: 'from ... import' in a copyable file"


def test_every_region_is_one_function_with_its_import():
    """Each snippet region holds ``import torch`` and the one function named by the region, so a page that
    embeds the region shows code that runs when copied."""
    assert set(sa.SNIPPETS) == set(sa.BY_CATALOG.values())
    for name, ref in sa.SNIPPETS.items():
        path, region = ref.split(":")
        text = (STANDALONE.parents[1] / path).read_text()
        start, end = f"# --8<-- [start:{region}]\n", f"# --8<-- [end:{region}]"
        assert text.count(start) == 1 and text.count(end) == 1, f"{path}: region {region} missing or repeated"
        body = text.split(start)[1].split(end)[0]
        tree = ast.parse(body)
        kinds = [type(n).__name__ for n in tree.body]
        assert kinds == ["Import", "FunctionDef"] and tree.body[1].name == name, f"{ref}: {kinds}"
        scope: dict = {}
        exec(compile(body, ref, "exec"), scope)  # runs alone
        assert callable(scope[name])


@pytest.mark.guards("snippet:standalone.reference_rms_norm", "snippet:standalone.llama_rms_norm",
                    "snippet:standalone.gemma_rms_norm", "snippet:standalone.t5_rms_norm",
                    "snippet:standalone.olmo2_rms_norm", "snippet:standalone.torch_rms_norm",
                    "snippet:standalone.rms_norm_eps_outside", "snippet:standalone.reference_layer_norm",
                    "snippet:standalone.neox_layer_norm", "snippet:standalone.cohere_layer_norm",
                    "snippet:standalone.qwen3_qk_norm", "snippet:standalone.gemma3_qk_norm",
                    "snippet:standalone.olmo2_qk_norm", "snippet:standalone.llama4_l2_norm",
                    "snippet:standalone.l2_norm", "snippet:standalone.llama_add_rms_norm")
@pytest.mark.parametrize("entry", sorted(sa.BY_CATALOG))
def test_equals_the_catalog_reference_bit_for_bit(entry):
    spec = CATALOG[entry]
    fn = getattr(sa, sa.BY_CATALOG[entry])
    checked = 0
    for dtype in DTYPES:
        for i, shape in enumerate(QK_SHAPES if entry.startswith("qk_norm") else SHAPES):
            for label, inputs in _variants(spec, shape, dtype, 10 + i):
                if "bias" in inputs and "bias" not in inspect.signature(fn).parameters:
                    inputs = {**inputs, "bias": None}  # a module without a bias (CohereLayerNorm)
                try:
                    expected = spec.run_reference(inputs)
                except (TypeError, ValueError):
                    continue  # an input the catalog entry refuses (e.g. a float32 gain for neox)
                with torch.no_grad():
                    _assert_bits(_call(fn, inputs, spec.params), expected, f"{entry} {dtype} {shape} {label}")
                checked += 1
    assert checked >= len(DTYPES) * len(SHAPES) * len(SCALES), f"{entry}: only {checked} cases ran"


# ------------------------------------------------------------------ against the installed modules

def _gain(d, dtype, around, seed):
    g = torch.Generator().manual_seed(seed)
    return (around + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)


def _x(shape, dtype, scale, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _module(cls, weight, **kw):
    m = cls(weight.shape[0], **kw)
    with torch.no_grad():
        m.weight = nn.Parameter(weight.clone())
    return m


# function -> (transformers folder, class) for one-tensor RMSNorms, gain centred at 1 (0 for gemma)
RMS_MODULES = {
    "llama_rms_norm": [("llama", "LlamaRMSNorm"), ("qwen3", "Qwen3RMSNorm"), ("mistral", "MistralRMSNorm")],
    "gemma_rms_norm": [("gemma", "GemmaRMSNorm"), ("gemma3", "Gemma3RMSNorm"), ("qwen3_next", "Qwen3NextRMSNorm")],
    "t5_rms_norm": [("t5", "T5LayerNorm")],
    "olmo2_rms_norm": [("olmo2", "Olmo2RMSNorm")],
}


def _cases():
    for dtype in DTYPES:
        for wd in (dtype, torch.float32):
            for i, shape in enumerate(SHAPES):
                for scale in SCALES:
                    yield dtype, wd, shape, scale, 100 * i + int(scale * 7)


@pytest.mark.guards("parity.standalone", "snippet:standalone.llama_rms_norm", "snippet:standalone.gemma_rms_norm",
                    "snippet:standalone.t5_rms_norm", "snippet:standalone.olmo2_rms_norm")
@pytest.mark.parametrize("name", sorted(RMS_MODULES))
def test_rms_functions_equal_the_transformers_modules(name):
    fn = getattr(sa, name)
    for folder, cls_name in RMS_MODULES[name]:
        cls = getattr(_modeling(folder), cls_name)
        for dtype, wd, shape, scale, seed in _cases():
            w = _gain(shape[-1], wd, 0.0 if name == "gemma_rms_norm" else 1.0, seed)
            m = _module(cls, w, eps=1e-6)
            x = _x(shape, dtype, scale, seed + 1)
            with torch.no_grad():
                _assert_bits(fn(x, w, 1e-6), m(x), f"{name} vs {cls_name} x {dtype} w {wd} {shape} scale {scale}")


@pytest.mark.guards("parity.standalone", "snippet:standalone.torch_rms_norm")
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_torch_rms_norm_equals_torch_nn_rmsnorm(eps):
    for dtype, wd, shape, scale, seed in _cases():
        if wd != dtype:
            continue  # nn.RMSNorm keeps its weight in its own dtype
        w = _gain(shape[-1], wd, 1.0, seed)
        m = _module(nn.RMSNorm, w, eps=eps, dtype=dtype)
        x = _x(shape, dtype, scale, seed + 1)
        with torch.no_grad():
            _assert_bits(sa.torch_rms_norm(x, w, eps), m(x), f"torch_rms_norm {dtype} {shape} eps {eps} scale {scale}")


@pytest.mark.guards("parity.standalone", "snippet:standalone.neox_layer_norm", "snippet:standalone.cohere_layer_norm")
def test_layer_norms_equal_gpt_neox_and_cohere():
    cohere = _modeling("cohere").CohereLayerNorm
    for dtype, wd, shape, scale, seed in _cases():
        x = _x(shape, dtype, scale, seed + 1) + 2.0
        w = _gain(shape[-1], wd, 1.0, seed)
        m = _module(cohere, w, eps=1e-5)
        with torch.no_grad():
            _assert_bits(sa.cohere_layer_norm(x, w, 1e-5), m(x), f"cohere {dtype} w {wd} {shape} scale {scale}")
        if wd == dtype:  # GPT-NeoX builds nn.LayerNorm, whose weight and bias are in its own dtype
            neox = nn.LayerNorm(shape[-1], eps=1e-5, dtype=dtype)
            with torch.no_grad():
                neox.weight.copy_(w)
                neox.bias.copy_(_gain(shape[-1], wd, 0.0, seed + 2))
                _assert_bits(sa.neox_layer_norm(x, neox.weight, neox.bias, 1e-5), neox(x), f"neox {dtype} {shape}")


@pytest.mark.guards("parity.standalone", "snippet:standalone.qwen3_qk_norm", "snippet:standalone.gemma3_qk_norm",
                    "snippet:standalone.olmo2_qk_norm")
def test_qk_norms_equal_the_attention_modules_norms():
    """Applied as the attention modules apply them: Qwen3 and Gemma 3 view the projection as
    ``(..., heads, head_dim)`` and norm each head (modeling_qwen3.py, modeling_gemma3.py); OLMo 2 norms
    the whole projection (modeling_olmo2.py)."""
    qwen3, gemma3, olmo2 = _modeling("qwen3").Qwen3RMSNorm, _modeling("gemma3").Gemma3RMSNorm, _modeling("olmo2").Olmo2RMSNorm
    head_dim, hq, hk = 8, 4, 2
    for dtype in DTYPES:
        for wd in (dtype, torch.float32):
            for scale in SCALES:
                q, k = _x((2, 3, hq * head_dim), dtype, scale, 1), _x((2, 3, hk * head_dim), dtype, scale, 2)
                label = f"{dtype} w {wd} scale {scale}"
                for fn, cls, around in ((sa.qwen3_qk_norm, qwen3, 1.0), (sa.gemma3_qk_norm, gemma3, 0.0)):
                    wq, wk = _gain(head_dim, wd, around, 3), _gain(head_dim, wd, around, 4)
                    mq, mk = _module(cls, wq, eps=1e-6), _module(cls, wk, eps=1e-6)
                    with torch.no_grad():
                        expected = (mq(q.view(2, 3, hq, head_dim)).reshape(2, 3, -1),
                                    mk(k.view(2, 3, hk, head_dim)).reshape(2, 3, -1))
                        _assert_bits(fn(q, k, wq, wk, head_dim, 1e-6), expected, f"{fn.__name__} {label}")
                wq, wk = _gain(hq * head_dim, wd, 1.0, 5), _gain(hk * head_dim, wd, 1.0, 6)
                mq, mk = _module(olmo2, wq, eps=1e-6), _module(olmo2, wk, eps=1e-6)
                with torch.no_grad():
                    _assert_bits(sa.olmo2_qk_norm(q, k, wq, wk, 1e-6), (mq(q), mk(k)), f"olmo2_qk_norm {label}")


@pytest.mark.guards("parity.standalone", "snippet:standalone.llama4_l2_norm")
def test_llama4_l2_norm_equals_llama4_text_l2_norm():
    m = _modeling("llama4").Llama4TextL2Norm(eps=1e-5)
    for dtype, wd, shape, scale, seed in _cases():
        if wd == dtype:
            x = _x(shape, dtype, scale, seed)
            _assert_bits(sa.llama4_l2_norm(x, 1e-5), m(x), f"llama4_l2_norm {dtype} {shape} scale {scale}")


@pytest.mark.guards("parity.standalone", "snippet:standalone.llama_add_rms_norm")
def test_llama_add_rms_norm_equals_the_llama_layer_boundary():
    """``hidden = residual + hidden`` then the next ``LlamaRMSNorm`` (modeling_llama.py's decoder layer)."""
    cls = _modeling("llama").LlamaRMSNorm
    for dtype, wd, shape, scale, seed in _cases():
        x, r = _x(shape, dtype, scale, seed), _x(shape, dtype, scale, seed + 1)
        w = _gain(shape[-1], wd, 1.0, seed + 2)
        m = _module(cls, w, eps=1e-6)
        with torch.no_grad():
            s = r + x
            _assert_bits(sa.llama_add_rms_norm(x, r, w, 1e-6), (m(s), s), f"llama_add_rms_norm {dtype} w {wd} {shape}")
