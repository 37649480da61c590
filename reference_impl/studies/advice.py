"""Measurements behind the claims ledger's verdicts on practical advice (``ledger/advice.yaml``).

Each function computes one fact on the CPU, deterministically (float64 or exact format arithmetic, fixed
seeds), so the tests recompute it and compare with the committed data file.
``python -m reference_impl.studies.advice`` writes ``docs/data/advice.json`` with its ``provenance`` block
(machine, versions, date, a hash of this file; :mod:`reference_impl.provenance`).

- :func:`fp16_loss_scale_window`: which gradient magnitudes survive a cast to float16, with and without a
  fixed loss scale (claim C19).
- :func:`prenorm_gradient_norms`: per-layer gradient norms at initialisation of a deep pre-norm residual
  stack, for a gain of 1 and of 0.1 (C23).
- :func:`fp16_sum_of_squares_limit` and :func:`fp16_naive_rmsnorm`: where float16 statistics break (C27, C28).
- :func:`jacobian_ranks`: degrees of freedom RMSNorm and LayerNorm keep at small widths (C30).
- :func:`norm_flop_share`: the normalization's share of a decoder layer's FLOPs (C33, C37).
"""
from __future__ import annotations

import math
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ..provenance import finish, python_closure, record, write_json

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "data" / "advice.json"
FP16 = torch.finfo(torch.float16)
COMMAND = "python -m reference_impl.studies.advice"
SOURCES = python_closure("reference_impl/studies/advice.py")


def _fp16(values: np.ndarray) -> np.ndarray:
    """Round float64 values to float16 (round to nearest even, with subnormals) and back."""
    return torch.from_numpy(np.asarray(values, dtype=np.float64)).to(torch.float16).double().numpy()


# --8<-- [start:loss_scale]
def fp16_loss_scale_window(scale: float = 2.0**8) -> dict:
    """Gradient magnitudes g (powers of two) that stay non-zero and finite when stored in float16.

    Without scaling, g is stored as fp16(g); with a fixed loss scale S the backward pass carries S*g, so
    fp16(S*g) must be non-zero and finite. Returns the smallest and largest surviving exponents k (g = 2**k)
    in both cases, and the largest gradient that does not overflow when scaled.
    """
    ks = np.arange(-60, 20)
    g = np.ldexp(1.0, ks)
    plain = _fp16(g)
    scaled = _fp16(g * scale)
    ok_plain = (plain != 0) & np.isfinite(plain)
    ok_scaled = (scaled != 0) & np.isfinite(scaled)
    # recovered gradient after unscaling in float32: exact for powers of two inside the window
    recovered = scaled[ok_scaled] / scale
    return {
        "scale_log2": int(round(math.log2(scale))),
        "plain_min_log2": int(ks[ok_plain].min()),
        "plain_max_log2": int(ks[ok_plain].max()),
        "scaled_min_log2": int(ks[ok_scaled].min()),
        "scaled_max_log2": int(ks[ok_scaled].max()),
        "scaled_recovered_exactly": bool(np.array_equal(recovered, g[ok_scaled])),
        "fp16_max": float(FP16.max),
        "largest_unscaled_gradient_without_overflow": float(FP16.max) / scale,
        "bf16_smallest_normal_log2": int(round(math.log2(float(torch.finfo(torch.bfloat16).tiny)))),
    }
# --8<-- [end:loss_scale]


@lru_cache(maxsize=None)
def prenorm_gradient_norms(depth: int, width: int = 32, gamma: float = 1.0, seed: int = 0, rows: int = 32) -> tuple:
    """Frobenius norms of dL/dW1 per layer, at initialisation, of a pre-norm residual MLP stack.

    Layer l: ``h = h + silu(RMSNorm(h) * gamma @ W1_l) @ W2_l`` (widths d -> 4d -> d, weights drawn with
    variance 1/fan_in), a final RMSNorm, and the loss ``sum(h * P) / rows`` for a fixed random P.
    Everything runs in float64 with fixed seeds; results are cached (the function is pure).
    """
    g = torch.Generator().manual_seed(seed)
    w1 = [torch.randn(width, 4 * width, generator=g, dtype=torch.float64) / width**0.5 for _ in range(depth)]
    w2 = [torch.randn(4 * width, width, generator=g, dtype=torch.float64) / (4 * width) ** 0.5 for _ in range(depth)]
    for w in w1 + w2:
        w.requires_grad_(True)
    h = torch.randn(rows, width, generator=g, dtype=torch.float64)
    proj = torch.randn(rows, width, generator=g, dtype=torch.float64)
    for a, b in zip(w1, w2):
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma
        h = h + torch.nn.functional.silu(n @ a) @ b
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    ((h * proj).sum() / rows).backward()
    return tuple(float(w.grad.norm()) for w in w1)


def fp16_sum_of_squares_limit(d: int) -> float:
    """The RMS above which a float16 accumulator of sum(x**2) over d elements overflows: sqrt(max / d)."""
    return math.sqrt(float(FP16.max) / d)


def fp16_accumulate_squares(x: np.ndarray) -> float:
    """sum(x**2) with every square and every partial sum rounded to float16, left to right."""
    acc = np.float16(0)
    with np.errstate(over="ignore"):
        for v in np.asarray(x, dtype=np.float16):
            acc = np.float16(acc + np.float16(v * v))
    return float(acc)


def fp16_naive_rmsnorm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm with the statistic computed in float16 too (what the advice warns about); no gain."""
    x = x.to(torch.float16)
    ms = (x * x).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(ms + torch.tensor(eps, dtype=torch.float16))


def jacobian_ranks(d: int, seed: int = 0) -> dict:
    """Numerical ranks of the Jacobians dy/dx of RMSNorm and LayerNorm (eps=0, no gain) at a random x."""
    x = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)

    def rms(v):
        return v / v.pow(2).mean().sqrt()

    def ln(v):
        c = v - v.mean()
        return c / c.pow(2).mean().sqrt()

    out = {}
    for name, f in (("rmsnorm", rms), ("layernorm", ln)):
        j = torch.autograd.functional.jacobian(f, x)
        s = torch.linalg.svdvals(j)
        # the non-zero singular values are of order 1/rms(x); rounding leaves the others near 1e-16
        out[name] = int((s > 1e-9 / float(x.pow(2).mean().sqrt())).sum())
    return out


def norm_flop_share(hidden: int, intermediate: int, heads: int, kv_heads: int, experts_per_token: int = 1,
                    n_experts: int = 1) -> dict:
    """Per-token FLOPs of one decoder layer's two RMSNorms against the layer's matrix products.

    Norm: 4 FLOPs per element (square, add, scale by rstd, scale by gain) times 2 norms; the rsqrt per row is
    negligible. Matrix products (2 FLOPs per multiply-add): q, k, v, o projections, the router, and
    ``experts_per_token`` SwiGLU experts of three d x d_ff matrices. Attention scores are left out, which
    only makes the share an upper bound.
    """
    head_dim = hidden // heads
    attn = 2 * hidden * (hidden + 2 * kv_heads * head_dim + hidden)
    mlp = 2 * 3 * hidden * intermediate * experts_per_token
    router = 2 * hidden * n_experts if n_experts > 1 else 0
    norm = 2 * 4 * hidden
    matmul = attn + mlp + router
    return {"norm_flops": norm, "matmul_flops": matmul, "share": norm / (norm + matmul)}


def model_configs() -> dict:
    """Shapes of Llama-2-7B and Mixtral-8x7B, read from the defaults of the installed transformers configs."""
    from transformers import LlamaConfig, MixtralConfig

    ll, mx = LlamaConfig(), MixtralConfig()
    return {
        "llama": dict(hidden=ll.hidden_size, intermediate=ll.intermediate_size, heads=ll.num_attention_heads,
                      kv_heads=ll.num_key_value_heads),
        "mixtral": dict(hidden=mx.hidden_size, intermediate=mx.intermediate_size, heads=mx.num_attention_heads,
                        kv_heads=mx.num_key_value_heads, experts_per_token=mx.num_experts_per_tok,
                        n_experts=mx.num_local_experts),
    }


def measure() -> dict:
    """Every fact, as stored in docs/data/advice.json (without the metadata)."""
    stack = {}
    for depth in (12, 48):
        for gamma in (1.0, 0.1):
            gn = prenorm_gradient_norms(depth, gamma=gamma)
            stack[f"depth{depth}_gain{gamma:g}".replace(".", "p")] = {"first": gn[0], "last": gn[-1], "max_over_min": max(gn) / min(gn)}
    cfgs = model_configs()
    d = cfgs["llama"]["hidden"]
    below, above = np.full(d, 3.9), np.full(d, 4.1)  # constant rows of RMS 3.9 and 4.1, around the limit
    return {
        "loss_scale": fp16_loss_scale_window(2.0**8),
        "prenorm_stack": {"width": 32, "runs": stack},
        "fp16_stats": {
            "d": d,
            "rms_limit": fp16_sum_of_squares_limit(d),
            "square_overflow_above": math.sqrt(float(FP16.max)),
            "fp16_sum_at_rms_3_9": fp16_accumulate_squares(below),
            "true_sum_at_rms_3_9": float(np.sum(below * below)),
            "fp16_sum_overflows_at_rms_4_1": math.isinf(fp16_accumulate_squares(above)),
            "eps_1e-6_in_fp16": float(torch.tensor(1e-6).half()),
            "eps_1e-8_in_fp16": float(torch.tensor(1e-8).half()),
        },
        "jacobian_rank": {str(n): jacobian_ranks(n) for n in (2, 3, 8, 64, 127)},
        "flop_share": {name: dict(norm_flop_share(**cfg), config=cfg) for name, cfg in cfgs.items()},
    }


def main(argv=None) -> int:
    from tqdm import tqdm

    prov = record(COMMAND, SOURCES, packages=("torch", "numpy", "transformers"))
    steps = tqdm(total=1, desc="advice facts", disable=not sys.stderr.isatty())
    facts = measure()
    steps.update(1)
    steps.close()
    payload = {"provenance": finish(prov), **facts}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_json(OUT, payload)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
