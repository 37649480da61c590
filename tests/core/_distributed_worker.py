"""What every rank runs for tests/core/test_distributed.py: one job per world size runs every case and saves its
outputs (``rank<k>.pt``); the test module compares them with the float64 oracle in the parent process.

Inputs are drawn from seeded generators in float64 and cast, so the parent rebuilds the full tensors bit for
bit. Tensor-parallel ("tp") cases split the last dimension into the uneven ``WIDTHS``; sequence-parallel
("sp") cases split the rows into ``SP_ROWS`` (one rank may hold none).
"""
from __future__ import annotations

import math
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from reference_impl import distributed as D
from reference_impl.studies import distributed_bench as B

F32, BF16 = torch.float32, torch.bfloat16
D_TOTAL = 37
WIDTHS = {2: [15, 22], 4: [7, 13, 9, 8]}
LEAD = (3, 5)
SP_ROWS = {2: [4, 7], 4: [4, 0, 5, 2]}
SP_INNER = 2           # x_local is (rows_k, SP_INNER, d)

# name: (norm, layout, x dtype, weight dtype or None, options); LayerNorm cases with a weight also get a bias
CASES = {
    "tp_rms_reference_f32": ("rms", "tp", F32, F32, {}),
    "tp_rms_reference_f32_noweight": ("rms", "tp", F32, None, {}),
    "tp_rms_reference_bf16": ("rms", "tp", BF16, BF16, {}),
    "tp_rms_llama_bf16": ("rms", "tp", BF16, BF16, {"convention": "llama"}),
    "tp_rms_llama_bf16_f32weight": ("rms", "tp", BF16, F32, {"convention": "llama"}),
    "tp_rms_llama_f32_noweight": ("rms", "tp", F32, None, {"convention": "llama"}),
    "tp_rms_gemma_bf16": ("rms", "tp", BF16, BF16, {"convention": "gemma"}),
    "tp_rms_reference_f32_det": ("rms", "tp", F32, F32, {"deterministic": True}),
    "tp_rms_llama_bf16_det": ("rms", "tp", BF16, BF16, {"convention": "llama", "deterministic": True}),
    "tp_ln_sums_f32": ("ln", "tp", F32, F32, {"stats": "sums"}),
    "tp_ln_sums_f32_noweight": ("ln", "tp", F32, None, {"stats": "sums"}),
    "tp_ln_sums_bf16": ("ln", "tp", BF16, BF16, {"stats": "sums"}),
    "tp_ln_sums_f32_det": ("ln", "tp", F32, F32, {"stats": "sums", "deterministic": True}),
    "tp_ln_welford_f32": ("ln", "tp", F32, F32, {"stats": "welford"}),
    "tp_ln_welford_bf16": ("ln", "tp", BF16, BF16, {"stats": "welford"}),
    "tp_ln_welford_f32_noweight": ("ln", "tp", F32, None, {"stats": "welford"}),
    "sp_rms_reference_f32": ("rms", "sp", F32, F32, {}),
    "sp_rms_reference_bf16_noweight": ("rms", "sp", BF16, None, {}),
    "sp_rms_llama_bf16": ("rms", "sp", BF16, BF16, {"convention": "llama"}),
    "sp_rms_gemma_bf16": ("rms", "sp", BF16, BF16, {"convention": "gemma"}),
    "sp_rms_reference_f32_det": ("rms", "sp", F32, F32, {"deterministic": True}),
    "sp_ln_f32": ("ln", "sp", F32, F32, {}),
    "sp_ln_bf16_det": ("ln", "sp", BF16, BF16, {"deterministic": True}),
}
LN_OFFSET = 0.5                            # LayerNorm inputs: 0.5 + N(0, 1)
LARGE_MEAN_OFFSETS = (0.0, 100.0, 1000.0, 10000.0)
ONE_RANK_CONVENTIONS = ("reference", "llama", "gemma", "t5", "olmo2", "torch")


def full_inputs(name: str, p: int):
    """(x, weight, bias, dy) of the whole problem, float64 draws cast to the case's dtypes."""
    norm, layout, xdt, wdt, _ = CASES[name]
    lead = LEAD if layout == "tp" else (sum(SP_ROWS[p]), SP_INNER)
    g = torch.Generator().manual_seed(sum(map(ord, name)) * 10 + p)
    f64 = dict(generator=g, dtype=torch.float64)
    x = torch.randn(*lead, D_TOTAL, **f64) * 2 + (LN_OFFSET if norm == "ln" else 0.0)
    w = 1 + 0.5 * torch.randn(D_TOTAL, **f64)
    if norm == "rms" and CASES[name][4].get("convention") == "gemma":
        w = w - 1                                # gemma stores the offset from 1
    b = 0.3 * torch.randn(D_TOTAL, **f64)
    dy = torch.randn(*lead, D_TOTAL, **f64)
    w_ = None if wdt is None else w.to(wdt)
    b_ = None if (wdt is None or norm == "rms") else b.to(wdt)
    return x.to(xdt), w_, b_, dy.to(xdt)


def local_slices(name: str, p: int, rank: int, tensors):
    """This rank's part of (x, weight, bias, dy)."""
    x, w, b, dy = tensors
    if CASES[name][1] == "tp":
        lo, hi = B.shard_bounds(WIDTHS[p], rank)
        cut = (lambda t: None if t is None else t[..., lo:hi].contiguous())
        return cut(x), cut(w), cut(b), cut(dy)
    r0, r1 = B.shard_bounds(SP_ROWS[p], rank)
    return x[r0:r1].contiguous(), w, b, dy[r0:r1].contiguous()


def _run_case(name, x, w, b, dy, group=None):
    norm, layout, _, _, opts = CASES[name]
    xl = x.clone().requires_grad_()
    params = [t.clone().requires_grad_() if t is not None else None for t in (w, b)]
    if norm == "rms":
        fn = D.sharded_rms_norm if layout == "tp" else D.sequence_parallel_rms_norm
        y = fn(xl, params[0], 1e-6, group, **opts)
    else:
        fn = D.sharded_layer_norm if layout == "tp" else D.sequence_parallel_layer_norm
        y = fn(xl, params[0], params[1], 1e-5, group, **opts)
    y.backward(dy)
    return {"y": y.detach(), "dx": xl.grad, "dw": None if w is None else params[0].grad,
            "db": None if b is None else params[1].grad}


# --8<-- [start:usage]
def usage(q_local, w_local, h_local, w, tp_group=None):
    """QK-norm over heads split across ranks, and a norm of tokens split across ranks.

    q_local: (batch, seq, heads on this rank * head_dim); w_local: this rank's slice of the gain.
    h_local: (tokens on this rank, hidden); w: the whole gain, the same on every rank.
    """
    q = D.sharded_rms_norm(q_local, w_local, eps=1e-6, group=tp_group, convention="llama")
    h = D.sequence_parallel_rms_norm(h_local, w, eps=1e-6, group=tp_group)
    return q, h
# --8<-- [end:usage]


def _errors(rank, p):
    """Each scenario: (name, call). Every rank calls, so every rank must raise."""
    lo, hi = B.shard_bounds(WIDTHS[p], rank)
    wk, last = hi - lo, rank == p - 1
    x = torch.randn(4, wk)
    w = torch.ones(wk)
    full = torch.randn(4, D_TOTAL)
    ln = D.sharded_layer_norm
    return [
        ("rows_differ", lambda: D.sharded_rms_norm(torch.randn(2 if rank == 0 else 3, wk), None)),
        ("leading_differ", lambda: D.sharded_rms_norm(torch.randn(*((2, 6) if rank == 0 else (3, 4)), wk), None)),
        ("weight_length", lambda: D.sharded_rms_norm(x, torch.ones(wk + 1) if last else w)),
        ("dtype_differ", lambda: D.sharded_rms_norm(x.to(BF16) if rank == 0 else x, None)),
        ("weight_dtype_differ", lambda: D.sharded_rms_norm(x, w.to(BF16) if rank == 0 else w)),
        ("weight_none_on_some", lambda: D.sharded_rms_norm(x, None if rank == 0 else w)),
        ("empty_shard", lambda: D.sharded_rms_norm(torch.randn(4, 0) if last else x, None)),
        ("bad_eps_one_rank", lambda: D.sharded_rms_norm(x, w, -1.0 if rank == 0 else 1e-6)),
        ("eps_nan", lambda: D.sharded_rms_norm(x, w, math.nan)),
        ("eps_differ", lambda: D.sharded_rms_norm(x, w, 1e-5 if rank == 0 else 1e-6)),
        ("options_differ", lambda: D.sharded_rms_norm(x, w, deterministic=rank == 0)),
        ("stats_differ", lambda: ln(x, w, None, stats="welford" if rank == 0 else "sums")),
        ("bad_stats", lambda: ln(x, w, None, stats="kahan")),
        ("bad_convention", lambda: D.sharded_rms_norm(x, w, convention="llama3")),
        ("x_not_tensor_one_rank", lambda: D.sharded_rms_norm(x.tolist() if rank == 0 else x, None)),
        ("integer_x", lambda: D.sharded_rms_norm(torch.ones(4, wk, dtype=torch.int32), None)),
        ("sp_hidden_differ", lambda: D.sequence_parallel_rms_norm(torch.randn(3, D_TOTAL + (rank == 0)), None)),
        ("sp_ndim_differ", lambda: D.sequence_parallel_rms_norm(full if rank == 0 else full.reshape(2, 2, -1), None)),
        ("sp_weight_length", lambda: D.sequence_parallel_layer_norm(full, torch.ones(D_TOTAL - 1), None)),
        ("no_check_bad_eps", lambda: D.sharded_rms_norm(x, w, -1.0, check_shapes=False)),
        ("requires_grad_differ", lambda: D.sharded_rms_norm(x.clone().requires_grad_(rank == 0), w)),
        ("ln_requires_grad_differ", lambda: ln(x, w.clone().requires_grad_(last), None, stats="welford")),
        ("group_not_a_group", lambda: D.sharded_rms_norm(x, w, 1e-6, "world")),
    ]


def job(rank: int, world: int, out_dir: str) -> None:
    res: dict = {"cases": {}, "repeat": {}, "one_rank": {}, "errors": {}, "large_mean": {}}
    for name in CASES:
        parts = local_slices(name, world, rank, full_inputs(name, world))
        res["cases"][name] = _run_case(name, *parts)
        res["repeat"][name] = _run_case(name, *parts)
    # one-rank groups: with every column on one rank the sharded functions must give the single-device bits
    groups = [dist.new_group([k]) for k in range(world)]
    if rank == 0:
        g = torch.Generator().manual_seed(11)
        x, dy = (torch.randn(3, 4, 29, generator=g, dtype=torch.float64) * 3 for _ in range(2))
        w = 0.5 + torch.randn(29, generator=g, dtype=torch.float64)
        for conv in ONE_RANK_CONVENTIONS:
            for xdt, wdt in ((F32, F32), (BF16, BF16), (BF16, F32), (torch.float16, torch.float16)):
                out = {}
                for fn in (D.sharded_rms_norm, D.sequence_parallel_rms_norm):
                    xl, wl = x.to(xdt).requires_grad_(), w.to(wdt).requires_grad_()
                    y = fn(xl, wl, 1e-6, groups[0], convention=conv)
                    y.backward(dy.to(y.dtype))
                    out[fn.__name__] = (y.detach(), xl.grad, wl.grad)
                res["one_rank"][(conv, str(xdt), str(wdt))] = (x.to(xdt), w.to(wdt), dy, out)
    # LayerNorm statistics for rows with a large mean
    lo, hi = B.shard_bounds(WIDTHS[world], rank)
    for off in LARGE_MEAN_OFFSETS:
        g = torch.Generator().manual_seed(int(off) + 3)
        x = (off + torch.randn(6, D_TOTAL, generator=g, dtype=torch.float64)).float()
        res["large_mean"][off] = {s: D.sharded_layer_norm(x[:, lo:hi].contiguous(), None, None, 1e-5, stats=s)
                                  for s in ("sums", "welford")}
    # a batch of 0 rows is valid for every statistics method (an empty result of the right shape)
    res["zero_rows"] = {s: D.sharded_layer_norm(torch.randn(0, hi - lo), None, None, 1e-5, stats=s)
                        for s in ("sums", "welford")}
    head_dim, heads = 4, [2, 1, 3, 2][:world] if world == 4 else [3, 2]   # heads split unevenly
    g = torch.Generator().manual_seed(21)
    q = torch.randn(2, 3, sum(heads) * head_dim, generator=g).to(BF16)
    qw = (1 + 0.1 * torch.randn(sum(heads) * head_dim, generator=g)).to(BF16)
    h = torch.randn(5 * world, 16, generator=g).to(BF16)
    hw = torch.ones(16, dtype=BF16)
    c0, c1 = (head_dim * v for v in B.shard_bounds(heads, rank))
    res["usage"] = usage(q[..., c0:c1].contiguous(), qw[c0:c1], h[5 * rank: 5 * rank + 5], hw)
    res["usage_inputs"] = (q, qw, h, hw, heads, head_dim)
    res["bytes"] = B.bytes_per_row()
    res["dtensor"] = {"even": B.dtensor_probe(8 * world), "uneven": B.dtensor_probe(8 * world + 1)}
    for name, call in _errors(rank, world):
        try:
            call()
            res["errors"][name] = ("no error", "")
        except Exception as exc:   # noqa: BLE001 - the test judges the type
            res["errors"][name] = (type(exc).__name__, str(exc))
    # a non-member: rank 0 alone forms the group; the others must get a clear error, rank 0 a result
    try:
        D.sharded_rms_norm(torch.ones(2, 3), None, 1e-6, dist.new_group([0]))
        res["errors"]["not_a_member"] = ("no error", "")
    except Exception as exc:   # noqa: BLE001
        res["errors"]["not_a_member"] = (type(exc).__name__, str(exc))
    # after all of that the ranks must still be in step
    x = torch.ones(2, WIDTHS[world][rank])
    res["in_step_after_errors"] = D.sharded_rms_norm(x, None, 0.0)
    torch.save(res, Path(out_dir) / f"rank{rank}.pt")


def safe_job(rank: int, world: int, out_dir: str) -> None:
    try:
        job(rank, world, out_dir)
    except Exception:
        (Path(out_dir) / f"rank{rank}.error").write_text(traceback.format_exc())
        raise
