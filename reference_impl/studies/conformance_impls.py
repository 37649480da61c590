"""The RMSNorm implementations the conformance study runs, each behind one calling convention.

Every implementation is a function ``run(x, w, r, eps, convention) -> (y, h)``:

- ``x`` ``(rows, d)`` in bfloat16, float16 or float32; ``w`` the stored weight in x's dtype: the gain itself
  for the Llama casting order, the offset from one for Gemma's (its gain is ``1 + w``);
- ``r`` the residual stream or ``None``; with it the implementation returns ``h``, the new residual stream,
  and normalizes it (as a decoder layer does: ``h = x + r``, then the norm);
- ``convention`` ``"llama"`` or ``"gemma"``.

An implementation that cannot take a case raises :class:`Unavailable` with the reason, which the data file
records. Where an engine has no Gemma mode, its weight is the gain folded as ``1 + w`` and rounded to the
model's dtype, as an exported model would store it; where it has no fused residual add, the add is done
before the call in x's dtype (what the unfused model does).
"""
from __future__ import annotations

import importlib
import inspect
import os
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from .. import families as fam

HF_CONVENTIONS = ("llama", "gemma", "t5", "olmo2")  # RMSNorm families; t5 and olmo2 run in the Llama columns


class Unavailable(Exception):
    """An implementation that cannot run a case here; the message says why."""


@dataclass
class Impl:
    key: str
    label: str
    engine: str          # the group the page's plot and advice use
    where: str           # what actually ran here
    run: Callable
    conventions: tuple = ("llama", "gemma")
    source: str = ""     # the file whose code ran
    notes: list = field(default_factory=list)


def _added(x, r):
    return (x, None) if r is None else ((x + r), (x + r))


def _folded_gain(w, convention, dtype):
    """The gain as one weight tensor in ``dtype``: ``w`` (Llama) or ``1 + w`` rounded (Gemma)."""
    return w.to(dtype) if convention == "llama" else (1.0 + w.float()).to(dtype)


# ------------------------------------------------------------------------------------------ Hugging Face

def _hf_module(folder: str, cls_name: str, d: int, eps: float, w: torch.Tensor):
    mod = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    m = getattr(mod, cls_name)(d, eps=eps)
    with torch.no_grad():
        m.weight.copy_(w.float())
    return m.to(w.dtype).eval()


def hf_run(folder: str, cls_name: str):
    def run(x, w, r, eps, convention):
        h, res = _added(x, r)
        with torch.no_grad():
            return _hf_module(folder, cls_name, x.shape[-1], eps, w)(h), res
    return run


def reference_run(convention: str) -> Callable:
    """The checkpoint's own code: LlamaRMSNorm for the Llama columns, GemmaRMSNorm for Gemma's."""
    return hf_run("llama", "LlamaRMSNorm") if convention == "llama" else hf_run("gemma", "GemmaRMSNorm")


# ------------------------------------------------------------------------------------------ PyTorch

def torch_module_run(x, w, r, eps, convention):
    h, res = _added(x, r)
    m = torch.nn.RMSNorm(x.shape[-1], eps=eps, dtype=x.dtype)
    with torch.no_grad():
        m.weight.copy_(_folded_gain(w, convention, x.dtype))
        return m(h), res


def functional_f32_run(x, w, r, eps, convention):
    """``F.rms_norm`` with the gain kept in float32 (``w.float()`` or ``1 + w.float()``)."""
    h, res = _added(x, r)
    gain = w.float() if convention == "llama" else 1.0 + w.float()
    with torch.no_grad():
        return F.rms_norm(h, (x.shape[-1],), gain, eps), res


# --8<-- [start:formulas]
def llama_formula(h, w, eps):
    """LlamaRMSNorm's forward as transformers writes it (a test holds it bit-identical to the module)."""
    hf = h.to(torch.float32)
    hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return w * hf.to(h.dtype)


def gemma_formula(h, w, eps):
    """GemmaRMSNorm's forward: normalize in float32, gain 1 + w in float32, one cast."""
    out = h.float()
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + w.float())).type_as(h)
# --8<-- [end:formulas]


_COMPILED: dict = {}


def compiled_run(x, w, r, eps, convention):
    """``torch.compile`` (Inductor, CPU) of the residual add and the family's formula, shapes dynamic."""
    key = (convention, x.dtype, r is None)
    if key not in _COMPILED:
        formula = llama_formula if convention == "llama" else gemma_formula

        def f(x, r, w, eps):
            h = x if r is None else x + r
            return formula(h, w, eps), h
        _COMPILED[key] = torch.compile(f, dynamic=True, fullgraph=True)
    # the compiled functions share one code object, whose recompile limit (8) the 12 variants would pass;
    # fullgraph=True makes hitting it an error, never a silent fall-back to eager
    with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=64):
        y, h = _COMPILED[key](x, r, w, eps)
    return y, (None if r is None else h)


def reference_module(d, eps, w, convention):
    folder, cls = ("llama", "LlamaRMSNorm") if convention == "llama" else ("gemma", "GemmaRMSNorm")
    return _hf_module(folder, cls, d, eps, w)


# ------------------------------------------------------------------------------------------ ONNX Runtime

ORT_OPS = {  # key -> (op type, domain, takes the residual)
    "ort_rms_normalization": ("RMSNormalization", "", False),
    "ort_simplified": ("SimplifiedLayerNormalization", "", False),
    "ort_skip_simplified": ("SkipSimplifiedLayerNormalization", "com.microsoft", True),
}
_SESSIONS: dict = {}


def _ort_session(key: str, dtype: torch.dtype, d: int, eps: float):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    cache = (key, dtype, d, eps)
    if cache in _SESSIONS:
        return _SESSIONS[cache]
    op, domain, skip = ORT_OPS[key]
    tp = {torch.float32: TensorProto.FLOAT, torch.float16: TensorProto.FLOAT16, torch.bfloat16: TensorProto.BFLOAT16}[dtype]
    names = ["x", "r", "w"] if skip else ["x", "w"]
    ins = [helper.make_tensor_value_info(n, tp, [d] if n == "w" else ["n", d]) for n in names]
    outs = [helper.make_tensor_value_info("y", tp, ["n", d])]
    out_names = ["y"]
    attrs = {"epsilon": eps}
    if skip:  # outputs: y, mean (unused), inverse std (unused), the sum x + r
        out_names = ["y", "", "", "s"]
        outs.append(helper.make_tensor_value_info("s", tp, ["n", d]))
    else:
        attrs["axis"] = -1
        if op == "SimplifiedLayerNormalization":
            attrs["stash_type"] = 1
    node = helper.make_node(op, names, out_names, domain=domain or None, **attrs)
    graph = helper.make_graph([node], key, ins, outs)
    opsets = [helper.make_opsetid("", 23)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own error types; the reason is recorded
        raise Unavailable(f"onnxruntime {ort.__version__} CPU: {str(exc).splitlines()[0][:160]}") from None
    _SESSIONS[cache] = (sess, tp)
    return _SESSIONS[cache]


def ort_run(key: str):
    def run(x, w, r, eps, convention):
        skip = ORT_OPS[key][2]
        if skip and r is None:
            raise Unavailable("a skip (residual) norm: measured with a residual only")
        sess, tp = _ort_session(key, x.dtype, x.shape[-1], eps)
        gain = _folded_gain(w, convention, x.dtype).contiguous()
        h, res = (x, None) if skip else _added(x, r)
        y = torch.empty_like(x)
        s = torch.empty_like(x) if skip else None
        io = sess.io_binding()
        feeds = {"x": h.contiguous(), "w": gain} | ({"r": r.contiguous()} if skip else {})
        for name, t in feeds.items():
            io.bind_input(name, "cpu", 0, tp, list(t.shape), t.data_ptr())
        io.bind_output("y", "cpu", 0, tp, list(y.shape), y.data_ptr())
        if skip:
            io.bind_output("s", "cpu", 0, tp, list(s.shape), s.data_ptr())
        try:
            sess.run_with_iobinding(io)
        except Exception as exc:  # noqa: BLE001
            raise Unavailable(f"onnxruntime CPU: {str(exc).splitlines()[0][:160]}") from None
        return y, (s if skip else res)
    return run


# ------------------------------------------------------------------------------------------ this project

def _contract_kwargs(fn, contract: str) -> dict:
    if contract == "hf":
        return {}
    if "residual_contract" not in inspect.signature(fn).parameters:
        raise Unavailable(f"{fn.__name__} has no residual_contract argument in this version")
    return {"residual_contract": contract}


def fused_run(contract: str):
    def run(x, w, r, eps, convention):
        from ..ops import library as fused

        kwargs = _contract_kwargs(fused.fused_rms_norm, contract)
        with torch.no_grad():
            out = fused.fused_rms_norm(x, w, eps, residual=r, convention=convention, **kwargs)
        return (out, None) if r is None else out
    return run


def conventions_run(x, w, r, eps, convention):
    from ..norms.rms_norm import convention_rms_norm

    h, res = _added(x, r)
    with torch.no_grad():
        return convention_rms_norm(h, w, eps, convention=convention), res


def _interpreter_on() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise Unavailable("needs TRITON_INTERPRET=1 before triton is imported (the study sets it at start)")


def triton_run(contract: str):
    def run(x, w, r, eps, convention):
        _interpreter_on()
        from ..ops import triton_norm as tn

        kwargs = _contract_kwargs(tn.triton_rms_norm, contract)
        with torch.no_grad():
            out = tn.triton_rms_norm(x, w, eps, residual=r, convention=convention, **kwargs)
        return (out, None) if r is None else out
    return run


def liger_run(x, w, r, eps, convention):
    _interpreter_on()
    from . import conformance_liger

    return conformance_liger.run(x, w, r, eps, convention, Unavailable)


# ------------------------------------------------------------------------------------------ the list

def implementations() -> list[Impl]:
    site = "transformers/models/{0}/modeling_{0}.py"
    out = []
    for family, folder, cls, conv, *_ in fam.FAMILIES:
        if conv not in HF_CONVENTIONS:
            continue
        out.append(Impl(f"hf_{fam.family_key(family)}", f"{cls} ({family})", "Hugging Face transformers",
                        "eager PyTorch, CPU", hf_run(folder, cls),
                        ("gemma",) if conv == "gemma" else ("llama",), site.format(folder)))
    out += [
        Impl("conventions", "reference_impl.conventions.rms_norm", "this project", "eager PyTorch, CPU",
             conventions_run, source="reference_impl/norms/rms_norm.py"),
        Impl("torch_module", "torch.nn.RMSNorm (weight in x's dtype)", "PyTorch", "eager, CPU composite",
             torch_module_run, source="torch/nn/modules/normalization.py"),
        Impl("torch_functional_f32", "F.rms_norm (float32 weight)", "PyTorch", "eager, CPU composite",
             functional_f32_run, source="torch/nn/functional.py"),
        Impl("torch_compile", "torch.compile of the family's module", "PyTorch", "Inductor, CPU (C++ codegen)",
             compiled_run, source="torch/_inductor"),
        Impl("ort_rms_normalization", "ONNX Runtime RMSNormalization (opset 23)", "ONNX Runtime", "CPU",
             ort_run("ort_rms_normalization"), source="onnxruntime CPU execution provider"),
        Impl("ort_simplified", "ONNX Runtime SimplifiedLayerNormalization", "ONNX Runtime", "CPU",
             ort_run("ort_simplified"), source="onnxruntime CPU execution provider"),
        Impl("ort_skip_simplified", "ONNX Runtime SkipSimplifiedLayerNormalization", "ONNX Runtime", "CPU",
             ort_run("ort_skip_simplified"), source="onnxruntime contrib ops (com.microsoft)"),
        Impl("fused_hf", "normlab fused_rms_norm (residual_contract='hf')", "this project", "C++ kernel, CPU",
             fused_run("hf"), source="cuda/cpu/rms_norm_kernels.h"),
        Impl("fused_fp32", "normlab fused_rms_norm (residual_contract='fp32')", "this project",
             "C++ kernel, CPU", fused_run("fp32"), source="cuda/cpu/rms_norm_kernels.h"),
        Impl("triton_hf", "normlab Triton kernel (residual_contract='hf')", "this project",
             "Triton interpreter, CPU", triton_run("hf"), source="reference_impl/ops/triton_norm.py"),
        Impl("triton_fp32", "normlab Triton kernel (residual_contract='fp32')", "this project",
             "Triton interpreter, CPU", triton_run("fp32"), source="reference_impl/ops/triton_norm.py"),
        Impl("liger", "Liger-Kernel RMSNorm / fused add + RMSNorm", "Liger-Kernel",
             "Triton interpreter, CPU (rsqrt from tl.math)", liger_run,
             source="liger_kernel/ops/rms_norm.py, liger_kernel/ops/fused_add_rms_norm.py"),
    ]
    return out
