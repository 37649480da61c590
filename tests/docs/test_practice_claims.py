"""Evidence for the practice claims C44, C45 and C47 of the ledger (ledger/practice.yaml)."""
from __future__ import annotations

import sympy as sp
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import pytest

import reference_impl as ri
from reference_impl import oracle
from reference_impl import symbolic as S

EPS = 1e-6


class _DtypeLog(TorchDispatchMode):
    """Records (op name, output dtype) of every ATen op, after autocast has picked the dtypes."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.ops.append((func.overloadpacket.__name__, out.dtype))
        return out


def _article_rmsnorm(x, w, eps):
    """The C44 snippet as the article writes it (statistics from x.float(), cast back with type_as)."""
    rms = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).type_as(x)
    return x * rms * w


def _ulps(a: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    spacing = torch.exp2(torch.floor(torch.log2(exact.abs().clamp(min=1e-30))) - 7)  # bfloat16: 8 significant bits
    return (a.double() - exact).abs() / spacing


@pytest.mark.guards("C44")
def test_autocast_snippet_keeps_statistics_in_fp32_but_rounds_the_scale_to_bf16():
    """Under torch.autocast (CPU, bfloat16) the snippet's mean square and rsqrt run in float32; type_as then
    rounds the reciprocal RMS to bfloat16 and both products run in bfloat16, so its outputs carry up to
    about three roundings: more error than one final cast (reference) or Llama's order."""
    torch.manual_seed(0)
    x = (torch.randn(512, 1024) * 2).bfloat16()
    w = (1 + 0.2 * torch.randn(1024)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16), _DtypeLog() as log:
        y = _article_rmsnorm(x, w, EPS)
    names = [n for n, _ in log.ops]
    stats = {n: dt for n, dt in log.ops if n in ("pow", "mean", "add", "rsqrt")}
    assert stats == {"pow": torch.float32, "mean": torch.float32, "add": torch.float32, "rsqrt": torch.float32}
    first_mul = names.index("mul")
    assert log.ops[first_mul - 1] == ("_to_copy", torch.bfloat16), "the scale is cast to bf16 before it multiplies"
    assert [dt for n, dt in log.ops if n == "mul"] == [torch.bfloat16, torch.bfloat16]
    assert y.dtype == torch.bfloat16

    exact = torch.from_numpy(oracle.rms_norm_forward(x.double().numpy(), w.double().numpy(), EPS))
    err = {"snippet": _ulps(y, exact).max().item(),
           "llama": _ulps(ri.rms_norm(x, w, EPS, convention="llama"), exact).max().item(),
           "reference": _ulps(ri.rms_norm(x, w, EPS), exact).max().item()}
    assert err["reference"] <= 0.5 + 1e-3, err          # one rounding at the end
    assert err["snippet"] > err["llama"] > err["reference"], err
    assert err["snippet"] <= 3.0, err                   # three roundings, each at most u relative: <= 3 ulps
    assert not torch.equal(y, ri.rms_norm(x, w, EPS, convention="llama")), "not Llama's order either"
    # with the float32 gain the same article recommends (C18), type promotion makes the output float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _article_rmsnorm(x, w.float(), EPS).dtype == torch.float32


@pytest.mark.guards("C45", "C46")
def test_the_installed_trainer_treats_norm_gains_specially_only_for_weight_decay():
    """transformers' Trainer leaves norm gains out of weight decay (by layer type and by name); it has no
    separate learning rate for them. What the articles' advice would change is thus not standard practice."""
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer

    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=64)
    model = LlamaForCausalLM(cfg)
    decay = set(Trainer.get_decay_parameter_names(None, model))
    norms = {n for n, _ in model.named_parameters() if "norm" in n}
    assert norms and not (norms & decay), "norm gains must be excluded from weight decay"
    assert decay == {n for n, _ in model.named_parameters()} - norms, "everything else decays (Llama has no biases)"


@pytest.mark.guards("C47")
def test_rmsnorm_arithmetic_intensity_is_about_one_flop_per_byte():
    """From the registry's counts: RMSNorm does about 4d arithmetic operations per row and moves 2bd bytes
    forward (7d and 3bd backward), i.e. 1 flop per byte in bfloat16 and 0.5 in float32. Any GPU's ridge
    point is tens of flops per byte, so the kernel is memory-bound and memory throughput, not instruction
    throughput, is the profile section that decides its speed."""
    reg = S.registry()
    d, b, rsq = sp.Symbol("d", integer=True, positive=True), sp.Symbol("b", positive=True, integer=True), sp.Symbol("rsqrt")
    for pass_ in ("forward", "backward"):
        flops = reg[f"cost.rms.{pass_}_flops"].display.subs(rsq, 1)
        bytes_ = reg[f"cost.rms.{pass_}_bytes"].display
        for elem in (2, 4):
            intensity = sp.limit(flops / bytes_.subs(b, elem), d, sp.oo)
            assert intensity <= sp.Rational(7, 3 * elem), (pass_, elem, intensity)  # 4/(2b) forward, 7/(3b) backward
            assert float((flops / bytes_.subs(b, elem)).subs(d, 4096)) < 1.2
