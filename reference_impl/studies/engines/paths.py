"""The engines' norm code paths that run here, and which model types each engine sends through them.

Each engine contributes :class:`Path` objects (a released class or function, made callable by the kit's
protocol: ``fn(x, weight, eps)``, or ``fn(x, residual, weight, eps) -> (y, new_residual)``) and
:class:`Use` objects (a model type, the path, the flags its model file passes, and where that was read).
Every function and class is taken from the released file at run time (:mod:`.loader`); this module only
names them, says which methods to call, and stubs what those methods reach but do not compute with.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import numpy as np
import torch

from . import loader, modelmap
from .sources import Archive, Unavailable, sha256

#: the model types every engine is checked for, where its model files serve them (the most-served open
#: families: Llama, Mistral, Qwen 2/3 dense and MoE, Gemma 2/3, OLMo 2, DeepSeek V3, gpt-oss)
MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "olmo2", "deepseek_v3",
               "gpt_oss")
HALF = (torch.bfloat16, torch.float16, torch.float32)


@dataclass
class Path:
    """One runnable norm path: ``factory(flags, residual)`` returns the kit-protocol function."""

    key: str
    release: str
    file: str
    sha256: str
    function: str
    line: int
    label: str
    factory: Callable
    residual: bool = False
    dtypes: tuple = HALF
    not_run: dict = field(default_factory=dict)  # dtype name -> why that dtype is not run here
    stubs: list = field(default_factory=list)
    dropped: list = field(default_factory=list)
    also: list = field(default_factory=list)  # other released files the path executes: {"file", "sha256"}


@dataclass
class Use:
    """A model type an engine serves or trains through ``path`` with ``flags``; ``evidence``: where read."""

    model_type: str
    path: str
    flags: dict
    evidence: list
    residual: bool = False
    refused: str | None = None  # the engine's own code refuses this model's setting (its words)


def _text(arch: Archive, member: str) -> tuple[str, str]:
    data = arch.read(member)
    return data.decode("utf-8"), sha256(data)


def _module_fn(cls, method: str, flags: dict, residual: bool, build=None):
    """The kit protocol around a released module class: build it for x's width, put the probe's weight in."""
    def make(d, eps, weight):
        m = build(cls, d, eps, flags) if build else cls(d, eps=eps, **flags)
        m.weight = torch.nn.Parameter(weight, requires_grad=False)
        return m

    if residual:
        def fn(x, r, weight, eps):
            x, r = x.clone(), r.clone()  # in-place kernels write into their inputs; the kit owns its probes
            return getattr(make(x.shape[-1], eps, weight), method)(x, r)
    else:
        def fn(x, weight, eps):
            return getattr(make(x.shape[-1], eps, weight), method)(x)
    fn.__qualname__ = f"{cls.__name__}.{method}"
    return fn


def _uses(arch: Archive, files: dict, classes, path_of: Callable, residual_file: str | None = None,
          residual_pattern: str = "") -> list[Use]:
    """Read each model file; one Use per (model type, class, flags). ``residual_file``: where the engine's
    layers call a decoder norm with the residual stream when the model file delegates it."""
    out = []
    extra = None
    if residual_file:
        text, _ = _text(arch, residual_file)
        extra = [loader.line_of(text, residual_pattern)]
    for model_type, member in files.items():
        try:
            text, _ = _text(arch, member)
        except Unavailable:
            continue
        for u in modelmap.norm_uses(text, classes):
            key = path_of(u.cls)
            if key is None:
                continue
            ev = [{"file": member, "line": ln, "what": f"{', '.join(sorted(set(u.attrs)))} = {u.cls}(...)"}
                  for ln in u.lines[:1]]
            res_lines = u.residual_lines
            if res_lines:
                ev.append({"file": member, "line": res_lines[0], "what": "called with the residual stream"})
            elif extra and any(a in ("input_layernorm", "post_attention_layernorm") for a in u.attrs):
                res_lines = extra
                ev.append({"file": residual_file, "line": extra[0], "what": "the engine's layer boundary calls the "
                                                                            "layer's norm with the residual stream"})
            out.append(Use(model_type, key, u.flags, ev, residual=bool(res_lines)))
    return out


def _native_paths(release, member, text, digest, classes, stubs, label, extra=None, also=lambda res: []):
    """``forward_native`` of each class, without and with the residual stream: two paths per class."""
    out = []
    for cls in classes:
        got = loader.load(member, text, classes=(cls,), methods=("__init__", "forward_native"), stubs=stubs)
        c = got.namespace[cls]
        for residual in (False, True):
            out.append(Path(f"{release}:{cls}.forward_native" + (":residual" if residual else ""), release, member,
                            digest, f"{cls}.forward_native", got.lines[f"{cls}.forward_native"], label,
                            lambda flags, res, c=c: _module_fn(c, "forward_native", flags, res), residual,
                            stubs=got.stubs + (extra.stubs if extra else []),
                            dropped=got.dropped + (extra.dropped if extra else []), also=also(residual)))
    return out


# ------------------------------------------------------------------------------------------ vLLM

VLLM_LAYERNORM = "vllm/model_executor/layers/layernorm.py"
VLLM_IR = "vllm/ir/ops/layernorm.py"
VLLM_MODELS = {m: f"vllm/model_executor/models/{f}.py" for m, f in (
    ("llama", "llama"), ("mistral", "mistral"), ("qwen2", "qwen2"), ("qwen3", "qwen3"), ("qwen3_moe", "qwen3_moe"),
    ("gemma2", "gemma2"), ("gemma3_text", "gemma3"), ("olmo2", "olmo2"), ("deepseek_v3", "deepseek_v2"),
    ("gpt_oss", "gpt_oss"))}


class _Op:
    """vLLM's IR op object: callable, with ``maybe_inplace`` (the in-place variant of the same arithmetic)."""

    def __init__(self, fn):
        self.fn = self.maybe_inplace = fn

    def __call__(self, *a, **k):
        return self.fn(*a, **k)


def vllm(arch: Archive):
    ir_text, ir_sha = _text(arch, VLLM_IR)
    ir = loader.load(VLLM_IR, ir_text, functions=("rms_norm", "fused_add_rms_norm"))
    ops = SimpleNamespace(rms_norm=_Op(ir.namespace["rms_norm"]),
                          fused_add_rms_norm=_Op(ir.namespace["fused_add_rms_norm"]))
    stubs = {"ir": (SimpleNamespace(ops=ops), f"vllm.ir with the native implementations of {VLLM_IR} "
                                              "(rms_norm, fused_add_rms_norm), read from the same release"),
             "set_weight_attrs": (lambda *a, **k: None, "a no-op (it tags the weight for the loader)")}
    text, digest = _text(arch, VLLM_LAYERNORM)
    label = ("PyTorch-native forward (the IR op's native implementation; what torch.compile traces when vLLM's "
             "custom kernels are off, and the CPU path)")
    paths = _native_paths("vllm", VLLM_LAYERNORM, text, digest, ("RMSNorm", "GemmaRMSNorm"), stubs, label, extra=ir,
                          also=lambda res: [{"file": VLLM_IR, "sha256": ir_sha,
                                             "line": ir.lines["fused_add_rms_norm" if res else "rms_norm"]}])
    uses = _uses(arch, VLLM_MODELS, ("RMSNorm", "GemmaRMSNorm"), lambda c: f"vllm:{c}.forward_native")
    return paths, uses


# ------------------------------------------------------------------------------------------ SGLang

SGL_LAYERNORM = "sglang/srt/layers/layernorm.py"
SGL_ADD_NORM = "sglang/srt/layers/layer_boundary/residual/add_norm.py"
SGL_MODELS = {m: f"sglang/srt/models/{f}.py" for m, f in (
    ("llama", "llama"), ("mistral", "mistral"), ("qwen2", "qwen2"), ("qwen3", "qwen3"), ("qwen3_moe", "qwen3_moe"),
    ("gemma2", "gemma2"), ("gemma3_text", "gemma3_causal"), ("olmo2", "olmo2"), ("deepseek_v3", "deepseek_v2"),
    ("gpt_oss", "gpt_oss"))}


def sglang(arch: Archive):
    text, digest = _text(arch, SGL_LAYERNORM)
    stubs = {"_use_aiter": (False, "False (AMD's aiter kernels are not in use)")}
    label = "PyTorch-native forward (SGLang's fallback and CPU-side path; its CUDA path calls compiled kernels)"
    paths = _native_paths("sglang", SGL_LAYERNORM, text, digest, ("RMSNorm", "GemmaRMSNorm", "Gemma3RMSNorm"), stubs,
                          label)
    uses = _uses(arch, SGL_MODELS, ("RMSNorm", "GemmaRMSNorm", "Gemma3RMSNorm"), lambda c: f"sglang:{c}.forward_native",
                 residual_file=SGL_ADD_NORM, residual_pattern="return norm(hidden_states, residual")
    return paths, uses


# ------------------------------------------------------------------------------------------ Megatron-core

MEG_TORCH_NORM = "megatron/core/transformer/torch_norm.py"


def _megatron_build(cls, d, eps, flags):
    cfg = SimpleNamespace(layernorm_zero_centered_gamma=flags.get("zero_centered_gamma", False),
                          persist_layer_norm=False, sequence_parallel=False, memory_efficient_layer_norm=False,
                          normalization="RMSNorm")
    return cls(cfg, d, eps=eps)


def megatron(arch: Archive):
    text, digest = _text(arch, MEG_TORCH_NORM)
    stubs = {"is_torch_min_version": (lambda v: tuple(map(int, torch.__version__.split(".")[:2])) >= (2, 4),
                                      "the installed torch's version against the one asked")}
    got = loader.load(MEG_TORCH_NORM, text, classes=("WrappedTorchNorm",), methods=("__new__",), stubs=stubs)
    c = got.namespace["WrappedTorchNorm"]
    path = Path("megatron:WrappedTorchNorm", "megatron", MEG_TORCH_NORM, digest, "WrappedTorchNorm.__new__",
                got.lines["WrappedTorchNorm.__new__"],
                "the local (non-Transformer-Engine) norm: torch.nn.RMSNorm, built by the released wrapper",
                lambda flags, res: _module_fn(c, "forward", flags, res, build=_megatron_build),
                stubs=got.stubs, dropped=got.dropped)
    line = loader.line_of(text, "zero_centered_gamma not supported")
    uses = []
    for m in MODEL_TYPES:
        gemma = m.startswith("gemma")
        ev = [{"file": MEG_TORCH_NORM, "line": path.line, "what": "normalization='RMSNorm' returns torch.nn.RMSNorm"}]
        refused = None
        if gemma:  # Megatron stores Gemma's offset weight as a zero-centred gamma
            ev.append({"file": MEG_TORCH_NORM, "line": line, "what": "layernorm_zero_centered_gamma is refused"})
            refused = "the torch norm asserts that layernorm_zero_centered_gamma is off: Gemma needs Transformer Engine"
        uses.append(Use(m, path.key, {"zero_centered_gamma": gemma} if gemma else {}, ev, refused=refused))
    return [path], uses


# ------------------------------------------------------------------------------------------ Transformer Engine

TE_RMSNORM = "transformer_engine/pytorch/ops/basic/rmsnorm.py"


def _te_build(cls, d, eps, flags):
    m = cls()
    m.eps, m.zero_centered_gamma = eps, bool(flags.get("zero_centered_gamma", False))
    return m


def te(arch: Archive):
    text, digest = _text(arch, TE_RMSNORM)
    got = loader.load(TE_RMSNORM, text, classes=("RMSNorm",), methods=("op_onnx_forward",))
    c = got.namespace["RMSNorm"]
    path = Path("te:RMSNorm.op_onnx_forward", "te", TE_RMSNORM, digest, "RMSNorm.op_onnx_forward",
                got.lines["RMSNorm.op_onnx_forward"],
                "the PyTorch forward TE exports to ONNX (its training forward is a compiled kernel whose source "
                "is not in the wheel)",
                lambda flags, res: _module_fn(c, "op_onnx_forward", flags, res, build=_te_build),
                stubs=got.stubs, dropped=got.dropped)
    uses = [Use(m, path.key, {"zero_centered_gamma": m.startswith("gemma")},
                [{"file": TE_RMSNORM, "line": loader.line_of(text, "weight = self.weight + 1 if self.zero_centered_gamma"),
                  "what": "zero_centered_gamma adds 1 to the stored weight (Gemma's offset)"}])
            for m in MODEL_TYPES]
    return [path], uses


# ------------------------------------------------------------------------------------------ Liger-Kernel

LIGER_PATCH = "liger_kernel/transformers/monkey_patch.py"
LIGER_RMS = "liger_kernel/transformers/rms_norm.py"


def _liger_build(cls, d, eps, flags):
    from .. import conformance_liger as cl

    m = cls(d, eps=eps)
    m.variance_epsilon, m.offset = cl._f32(eps), cl._f32(float(m.offset))
    m.in_place = False  # the kit owns its probes; in_place only changes where the backward writes
    return m


def liger(arch: Archive):
    import os

    if os.environ.get("TRITON_INTERPRET") != "1" and "triton" in sys.modules:
        raise Unavailable("Liger's Triton kernels run here only under TRITON_INTERPRET=1 set before triton is "
                          "imported")
    os.environ["TRITON_INTERPRET"] = "1"
    from liger_kernel.transformers import rms_norm as lrn

    from .. import conformance_liger as cl

    text, digest = _text(arch, LIGER_PATCH)
    rtext, rdigest = _text(arch, LIGER_RMS)
    from ...check.models import load_index

    index = (load_index() or {}).get("models", {})
    tree = ast.parse(text)
    paths, uses, seen = {}, [], set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute) and isinstance(node.targets[0].value, ast.Name)):
            continue
        mod, hf_cls, liger_cls = node.targets[0].value.id, node.targets[0].attr, node.value.id
        cls = getattr(lrn, liger_cls, None)
        if cls is None or not mod.startswith("modeling_"):
            continue
        for m, row in index.items():
            if m not in MODEL_TYPES or row.get("norm_class") != hf_cls or not row.get("module", "").endswith(mod):
                continue
            key = f"liger:{liger_cls}"
            if key not in paths:
                line = next(n.lineno for n in ast.parse(rtext).body if isinstance(n, ast.ClassDef) and n.name == liger_cls)
                paths[key] = Path(key, "liger", LIGER_RMS, rdigest, f"{liger_cls}.forward", line,
                                  "Triton kernel (rms_norm_forward), run by Triton's interpreter on CPU",
                                  lambda flags, res, c=cls: _module_fn(c, "forward", flags, res, build=_liger_build),
                                  dtypes=(torch.float16, torch.float32), not_run={"bf16": cl.BF16_REASON})
            if (m, key) not in seen:
                seen.add((m, key))
                uses.append(Use(m, key, {}, [{"file": LIGER_PATCH, "line": node.lineno,
                                              "what": f"{mod}.{hf_cls} = {liger_cls}"}]))
    return list(paths.values()), uses


# ------------------------------------------------------------------------------------------ MLX (mlx-lm)

MLX_MODELS = {m: f"mlx_lm/models/{f}.py" for m, f in (
    ("llama", "llama"), ("mistral", "mistral"), ("qwen2", "qwen2"), ("qwen3", "qwen3"), ("qwen3_moe", "qwen3_moe"),
    ("gemma2", "gemma2"), ("gemma3_text", "gemma3_text"), ("olmo2", "olmo2"), ("deepseek_v3", "deepseek_v3"),
    ("gpt_oss", "gpt_oss"))}
_MLX_DT = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def _to_mx(mx, t: torch.Tensor):
    a = mx.array(t.detach().to(torch.float32).numpy())
    return a.astype(getattr(mx, _MLX_DT[t.dtype]))


def _from_mx(mx, a, dtype) -> torch.Tensor:
    return torch.from_numpy(np.array(a.astype(mx.float32))).to(dtype)


def mlx(arch: Archive, runtime):
    """mlx-lm's model files run with MLX's own CPU build (the ``mlx`` and ``mlx-cpu`` wheels, unpacked)."""
    sys.path.insert(0, str(runtime))
    import mlx.core as mx
    import mlx.nn as mnn

    paths, uses = {}, []
    for m, member in MLX_MODELS.items():
        try:
            text, digest = _text(arch, member)
        except Unavailable:
            continue
        for u in modelmap.norm_uses(text, ("RMSNorm",)):
            local = any(isinstance(n, ast.ClassDef) and n.name == "RMSNorm" for n in ast.parse(text).body)
            if local:
                key = f"mlx:{member.split('/')[-1][:-3]}.RMSNorm"
                if key not in paths:
                    got = loader.load(member, text, classes=("RMSNorm",), methods=("__init__", "__call__"),
                                      stubs={"mx": (mx, "mlx.core from the unpacked mlx wheel")})
                    paths[key] = _mlx_path(key, member, digest, got.lines["RMSNorm.__call__"], got.namespace["RMSNorm"],
                                           mx, got.stubs + ["torch.nn.Module base: its weight is an mlx array"])
            else:
                key = "mlx:nn.RMSNorm"
                if key not in paths:
                    import inspect

                    f = inspect.getsourcefile(mnn.RMSNorm)
                    data = open(f, "rb").read()
                    rel = "mlx/" + f.split("/mlx/", 1)[1]
                    line = inspect.getsourcelines(mnn.RMSNorm.__call__)[1]
                    paths[key] = _mlx_path(key, rel, sha256(data), line, mnn.RMSNorm, mx, [], release="mlx_core")
            uses.append(Use(m, key, {}, [{"file": member, "line": u.lines[0],
                                          "what": f"{', '.join(sorted(set(u.attrs)))} = {u.cls}(...)"}]))
    return list(paths.values()), uses


def _mlx_path(key, member, digest, line, cls, mx, stubs, release="mlx"):
    def factory(flags, residual):
        def fn(x, weight, eps):
            m = cls(x.shape[-1], eps=eps)
            if isinstance(m, torch.nn.Module):
                object.__setattr__(m, "weight", _to_mx(mx, weight))
            else:
                m.weight = _to_mx(mx, weight)
            y = m(_to_mx(mx, x))
            return _from_mx(mx, y, x.dtype) if y.dtype != mx.float32 else _from_mx(mx, y, torch.float32)
        fn.__qualname__ = key.split(":", 1)[1]
        return fn

    return Path(key, release, member, digest, key.split(":", 1)[1] + ".__call__", line,
                "mx.fast.rms_norm on MLX's CPU back end", factory, stubs=stubs)
