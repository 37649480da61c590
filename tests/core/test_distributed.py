"""Tensor- and sequence-parallel norms (reference_impl/distributed.py) on real gloo process groups.

One job per world size (2 and 4 CPU ranks, tests/core/_distributed_worker.py) runs every case once and saves what
each rank computed; the tests below assemble the ranks' slices in this process and compare them with the
float64 oracle under the tolerance policy, with the single-device code bit for bit where the math is the
same, with a fixed-order simulation for the deterministic mode, and the bytes sent with the registry.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from reference_impl import conventions as C
from reference_impl import distributed as D
from reference_impl import oracle, symbolic
from reference_impl import tolerances as tol
from reference_impl.norms.layer_norm import layer_norm as ref_layer_norm
from reference_impl.shared import row_mean
from reference_impl.studies import distributed_bench as B

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _distributed_worker as W  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WORLDS = (2, 4)
TP_RMS = [n for n, c in W.CASES.items() if c[:2] == ("rms", "tp")]
TP_LN = [n for n, c in W.CASES.items() if c[:2] == ("ln", "tp")]
SP = [n for n, c in W.CASES.items() if c[1] == "sp"]
U32 = tol.unit_roundoff(torch.float32)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """``job(p)``: every rank's saved results of the world of p ranks (run once per module)."""
    cache = {}

    def get(p):
        if p not in cache:
            out = tmp_path_factory.mktemp(f"dist{p}")
            try:
                B.spawn(W.safe_job, p, (str(out),), timeout_s=240)
            except Exception as exc:
                errors = "\n".join(f.read_text() for f in sorted(out.glob("*.error")))
                pytest.fail(f"the {p}-rank job failed: {exc}\n{errors}")
            cache[p] = [torch.load(out / f"rank{k}.pt", weights_only=False) for k in range(p)]
        return cache[p]
    return get


def _np(t):
    return None if t is None else t.detach().double().numpy()


def _assemble(ranks, name, key):
    """The full tensor from the ranks' pieces: slices of the last dimension (tp), of the rows (sp: y, dx);
    sequence-parallel gain gradients are whole on every rank (rank 0's is returned)."""
    parts = [r["cases"][name][key] for r in ranks]
    if W.CASES[name][1] == "tp":
        return torch.cat(parts, -1)
    return torch.cat(parts, 0) if key in ("y", "dx") else parts[0]


def _expected_rms(name, p):
    x, w, _, dy = W.full_inputs(name, p)
    conv = W.CASES[name][4].get("convention", "reference")
    gain = _np(C.effective_gain(w, conv))
    y = oracle.rms_norm_forward(_np(x), gain, 1e-6)
    dx, dw = oracle.rms_norm_backward(_np(dy), _np(x), gain, 1e-6)
    by = tol.convention_forward_bound(x, w, 1e-6, conv)
    bdx, bdw = tol.convention_backward_bounds(dy, x, w, 1e-6, conv)
    return (x, w, dy, conv), (y, dx, dw), (by, bdx, bdw)


# ------------------------------------------------------------------------------------- RMSNorm, tp

@pytest.mark.guards("rms.forward", "rms.vjp_x", "rms.vjp_weight", "snippet:distributed.sharded_rms",
                    "snippet:conventions.conventions_forward", "snippet:distributed.reduce")
@pytest.mark.parametrize("name", TP_RMS)
@pytest.mark.parametrize("p", WORLDS)
def test_sharded_rms_norm_forward_and_gradients_match_the_oracle(job, p, name):
    """Uneven column shards, float32 and bfloat16, with and without weight, several casting orders: y, dx and
    dweight assembled from the ranks' slices lie within the policy bound of the float64 oracle."""
    ranks = job(p)
    (x, w, dy, conv), (y, dx, dw), (by, bdx, bdw) = _expected_rms(name, p)
    got_y = _assemble(ranks, name, "y")
    assert got_y.dtype == C.output_dtype(x.dtype, None if w is None else w.dtype, conv)
    tol.assert_within(got_y, y, by, f"{name} p={p}: y")
    tol.assert_within(_assemble(ranks, name, "dx"), dx, bdx, f"{name} p={p}: dx")
    if w is not None:
        tol.assert_within(_assemble(ranks, name, "dw"), dw, bdw, f"{name} p={p}: dweight")
    else:
        assert all(r["cases"][name]["dw"] is None for r in ranks)


@pytest.mark.guards("snippet:conventions.conventions_forward")
def test_one_rank_group_gives_the_single_device_bits(job):
    """With all columns on one rank the sharded and the sequence-parallel RMSNorm are the single-device
    convention bit for bit (forward, dx, dweight), for every casting order and dtype pairing: the casting
    code in distributed.py cannot drift from conventions.py."""
    one = job(2)[0]["one_rank"]
    assert len(one) == len(W.ONE_RANK_CONVENTIONS) * 4
    for (conv, _, _), (x, w, dy, outs) in one.items():
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = C.rms_norm(xl, wl, 1e-6, convention=conv)
        y.backward(dy.to(y.dtype))
        for fn, (y2, dx2, dw2) in outs.items():
            what = f"{fn} {conv} x {x.dtype} w {w.dtype}"
            assert y2.dtype == y.dtype, what + ": dtype"
            if conv == "reference":
                # the core sums each row in float64 in a fixed order (batch-invariant); the distributed norms
                # add float32 partials (one per rank), so the last bit may differ: within the rounding
                for got, want, part in ((y2, y.detach(), "y"), (dx2, xl.grad, "dx"), (dw2, wl.grad, "dweight")):
                    u = 4 * tol.unit_roundoff(got.dtype)
                    torch.testing.assert_close(got, want, rtol=u, atol=u * float(want.abs().max()),
                                               msg=what + ": " + part)
                continue
            assert torch.equal(y2, y.detach()), what + ": y"
            assert torch.equal(dx2, xl.grad), what + ": dx"
            assert torch.equal(dw2, wl.grad), what + ": dweight"


# ------------------------------------------------------------------------------------------- LayerNorm

def ln_sums_bounds(x, w, b, dy, eps):
    """Policy bounds for LayerNorm whose variance is E[x^2] - mean^2 (``stats="sums"``), float32.

    The one-pass variance carries e_var <= gamma(d+3) (ms + mu^2 + var) + e_mu (2|mu| + e_mu), with
    e_mu = gamma(d+1) mean|x| the error of the mean; the clamp at 0 only shrinks it. With D = e_var / (var +
    eps) < 1 the computed r is off by the relative rho = (1 + 2u) / sqrt(1 - D) - 1, which enters y as
    |w| (|xc| r rho + e_mu r (1 + rho)) on top of four roundings; the backward terms of the two-pass policy
    grow by rho r (|g| + mean|g| + 3 |xhat| mean|g xhat|) (1 + rho)^2, dweight by rho sum|dy xhat|. D >= 1
    (the variance lost in rounding) gives an infinite bound: nothing is promised there.
    """
    xd = _np(x)
    d = xd.shape[-1]
    mu = xd.mean(-1, keepdims=True)
    xc = xd - mu
    var = (xc * xc).mean(-1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    u = U32
    e_mu = tol.gamma(d + 1, u) * np.abs(xd).mean(-1, keepdims=True)
    e_var = tol.gamma(d + 3, u) * ((xd * xd).mean(-1, keepdims=True) + mu * mu + var) + e_mu * (2 * np.abs(mu) + e_mu)
    big = e_var / (var + eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(big < 1, (1 + 2 * u) / np.sqrt(np.maximum(1 - big, 1e-300)) - 1, np.inf)
    lost = ~np.isfinite(rho)                      # where the variance is lost every bound is infinite
    rho = np.where(lost, 0.0, rho)
    aw = 1.0 if w is None else np.abs(_np(w))
    by = tol.ln_forward_bound(x, w, b, eps, x.dtype) + aw * (np.abs(xc) * r * rho + e_mu * r * (1 + rho)
                                                             + tol.gamma(4, u) * np.abs(xc) * r * (1 + rho))
    bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, eps, x.dtype, None if w is None else w.dtype)
    xhat = xc * r
    g = _np(dy) * (1.0 if w is None else _np(w))
    gabs = np.abs(g)
    env = gabs + gabs.mean(-1, keepdims=True) + 3 * np.abs(xhat) * np.abs(g * xhat).mean(-1, keepdims=True)
    bdx = bdx + rho * r * env * (1 + rho) ** 2
    by, bdx = np.where(lost, np.inf, by), np.where(lost, np.inf, bdx)
    if bdw is not None:
        bdw = bdw + (rho * (1 + rho) * np.abs(_np(dy) * xhat)).reshape(-1, d).sum(0)
        bdw = np.where(lost.any(), np.inf, bdw)
    return by, bdx, bdw, bdb


@pytest.mark.guards("ln.forward", "ln.vjp_x", "ln.vjp_weight", "ln.vjp_bias", "snippet:distributed.sharded_ln_stats",
                    "snippet:distributed.chan_merge")
@pytest.mark.parametrize("name", TP_LN)
@pytest.mark.parametrize("p", WORLDS)
def test_sharded_layer_norm_matches_the_oracle(job, p, name):
    """Both statistics methods, float32 and bfloat16, with and without gain and bias: Welford/Chan within the
    two-pass policy bound, sums within the one-pass bound (:func:`ln_sums_bounds`)."""
    ranks = job(p)
    x, w, b, dy = W.full_inputs(name, p)
    stats = W.CASES[name][4].get("stats", "sums")
    y = oracle.layer_norm_forward(_np(x), _np(w), _np(b), 1e-5)
    dx, dw, db = oracle.layer_norm_backward(_np(dy), _np(x), _np(w), _np(b), 1e-5)
    if stats == "welford":
        by = tol.ln_forward_bound(x, w, b, 1e-5, x.dtype)
        bdx, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, 1e-5, x.dtype, None if w is None else w.dtype)
    else:
        by, bdx, bdw, bdb = ln_sums_bounds(x, w, b, dy, 1e-5)
        assert np.isfinite(by).all(), "these inputs should have a finite one-pass bound"
    tol.assert_within(_assemble(ranks, name, "y"), y, by, f"{name} p={p}: y")
    tol.assert_within(_assemble(ranks, name, "dx"), dx, bdx, f"{name} p={p}: dx")
    if w is not None:
        tol.assert_within(_assemble(ranks, name, "dw"), dw, bdw, f"{name} p={p}: dweight")
        tol.assert_within(_assemble(ranks, name, "db"), db, bdb, f"{name} p={p}: dbias")


@pytest.mark.guards("snippet:distributed.chan_merge", "snippet:distributed.sharded_ln_stats")
@pytest.mark.parametrize("p", WORLDS)
def test_sums_lose_the_variance_when_the_mean_is_large_and_welford_does_not(job, p):
    """Rows offset + N(0, 1) in float32: Welford/Chan stays within the two-pass policy bound at every offset;
    the one-pass sums stay within their own bound, which is finite only while the variance survives, and
    from |mean|/std = 100 on their error is more than 10 times Welford's."""
    ranks = job(p)
    for off in W.LARGE_MEAN_OFFSETS:
        g = torch.Generator().manual_seed(int(off) + 3)
        x = (off + torch.randn(6, W.D_TOTAL, generator=g, dtype=torch.float64)).float()
        ref = oracle.layer_norm_forward(_np(x), None, None, 1e-5)
        got = {s: torch.cat([r["large_mean"][off][s] for r in ranks], -1) for s in ("sums", "welford")}
        tol.assert_within(got["welford"], ref, tol.ln_forward_bound(x, None, None, 1e-5, torch.float32),
                          f"welford, offset {off}")
        by = ln_sums_bounds(x, None, None, torch.zeros_like(x), 1e-5)[0]
        err = {s: np.abs(_np(t) - ref) for s, t in got.items()}
        finite = np.isfinite(by)
        assert (err["sums"][finite] <= by[finite]).all(), f"sums outside its bound at offset {off}"
        if off >= 100:
            assert err["sums"].max() > 10 * err["welford"].max(), (off, err["sums"].max(), err["welford"].max())


# ---------------------------------------------------------------------------------- sequence parallel

@pytest.mark.guards("rms.vjp_weight", "ln.vjp_weight", "ln.vjp_bias", "snippet:distributed.sp_rms",
                    "snippet:distributed.reduce")
@pytest.mark.parametrize("name", SP)
@pytest.mark.parametrize("p", WORLDS)
def test_sequence_parallel_is_single_device_per_row_and_sums_the_gain_gradient(job, p, name):
    """Rows split unevenly (one rank may hold none): each rank's y and dx are the single-device bits of its
    rows; dweight (and dbias) is the gradient over every rank's rows, within the policy bound, on every rank."""
    ranks = job(p)
    norm, _, _, _, opts = W.CASES[name]
    full = W.full_inputs(name, p)
    x, w, b, dy = full
    for k, r in enumerate(ranks):
        xl, wl, bl, dyl = W.local_slices(name, p, k, full)
        xg = xl.clone().requires_grad_()
        if norm == "rms":
            y = C.rms_norm(xg, wl, 1e-6, convention=opts.get("convention", "reference"))
        else:
            y = ref_layer_norm(xg, wl, bl, 1e-5)
        y.backward(dyl)
        assert torch.equal(r["cases"][name]["y"], y.detach()), f"rank {k}: y"
        assert torch.equal(r["cases"][name]["dx"], xg.grad), f"rank {k}: dx"
    if w is None:
        return
    if norm == "rms":
        conv = opts.get("convention", "reference")
        gain = _np(C.effective_gain(w, conv))
        _, dw = oracle.rms_norm_backward(_np(dy), _np(x), gain, 1e-6)
        _, bdw = tol.convention_backward_bounds(dy, x, w, 1e-6, conv)
        checks = [("dw", dw, bdw)]
    else:
        _, dw, db = oracle.layer_norm_backward(_np(dy), _np(x), _np(w), _np(b), 1e-5)
        _, bdw, bdb = tol.ln_backward_bounds(dy, x, w, b, 1e-5, x.dtype, w.dtype)
        checks = [("dw", dw, bdw), ("db", db, bdb)]
    for key, exp, bound in checks:
        for k, r in enumerate(ranks):
            tol.assert_within(r["cases"][name][key], exp, bound, f"{name} p={p} rank {k}: {key}")
        if opts.get("deterministic"):
            assert all(torch.equal(r["cases"][name][key], ranks[0]["cases"][name][key]) for r in ranks)


# ----------------------------------------------------------------------------------------- determinism

@pytest.mark.parametrize("p", WORLDS)
def test_repeated_calls_are_bit_identical(job, p):
    for k, r in enumerate(job(p)):
        for name in W.CASES:
            for key, t in r["cases"][name].items():
                again = r["repeat"][name][key]
                assert (t is None and again is None) or torch.equal(t, again), f"{name} rank {k}: {key}"


def _ordered_sum(parts):
    total = parts[0].clone()
    for t in parts[1:]:
        total += t
    return total


@pytest.mark.guards("snippet:distributed.reduce")
@pytest.mark.parametrize("name", [n for n in W.CASES if W.CASES[n][4].get("deterministic")])
@pytest.mark.parametrize("p", WORLDS)
def test_deterministic_mode_is_a_rank_order_float32_sum(job, p, name):
    """deterministic=True gives exactly a left-to-right float32 sum of the per-rank partials in rank order,
    computed here in one process without any backend, so it cannot depend on gloo's (or NCCL's) algorithm."""
    ranks = job(p)
    norm, layout, _, _, opts = W.CASES[name]
    conv = opts.get("convention", "reference")
    full = W.full_inputs(name, p)
    local = [W.local_slices(name, p, k, full) for k in range(p)]
    if layout == "tp" and norm == "rms":
        xs = [t[0].float() for t in local]
        d = float(sum(t.shape[-1] for t in xs))
        rstd = torch.rsqrt(_ordered_sum([t.pow(2).sum(-1, keepdim=True) for t in xs]) / d + 1e-6)
        parts = [D._rms_grad_parts(dyk, xk, wk, rstd, conv) for (xk, wk, _, dyk) in local]
        m = _ordered_sum([(g * xhat).sum(-1) for xhat, _, g in parts]).reshape(rstd.shape) / d
        for k, ((xk, wk, _, _), (xhat, dyf, g)) in enumerate(zip(local, parts)):
            got = ranks[k]["cases"][name]
            assert torch.equal(got["y"], C.apply_gain(xk, rstd, wk, conv)), f"rank {k}: y"
            assert torch.equal(got["dx"], (rstd * (g - xhat * m)).to(xk.dtype)), f"rank {k}: dx"
    elif layout == "tp":
        xs = [t[0].float() for t in local]
        d = float(sum(t.shape[-1] for t in xs))
        s1 = _ordered_sum([t.sum(-1, keepdim=True) for t in xs]) / d
        s2 = _ordered_sum([t.pow(2).sum(-1, keepdim=True) for t in xs]) / d
        rstd = torch.rsqrt((s2 - s1 * s1).clamp_min(0.0) + 1e-5)
        for k, (xk, wk, bk, _) in enumerate(local):
            assert torch.equal(ranks[k]["cases"][name]["y"], D._ln_out(xk, xk.float(), s1, rstd, wk, bk)), f"rank {k}"
    else:
        d = full[0].shape[-1]
        grads = []
        for xk, wk, bk, dyk in local:
            xf = xk.float()
            # the rows' statistics as the single-device reference computes them (float64 row sums)
            if norm == "rms":
                xhat = xf * torch.rsqrt(row_mean(xf.pow(2)) + 1e-6)
                grads.append((dyk.float() * xhat).reshape(-1, d).sum(0))
            else:
                mean = row_mean(xf)
                xhat = (xf - mean) * torch.rsqrt(row_mean((xf - mean).pow(2)) + 1e-5)
                grads.append(torch.cat([(dyk.float() * xhat).reshape(-1, d).sum(0), dyk.float().reshape(-1, d).sum(0)]))
        total = _ordered_sum(grads)
        for k in range(p):
            assert torch.equal(ranks[k]["cases"][name]["dw"], total[:d].to(full[1].dtype)), f"rank {k}: dweight"
            if norm == "ln":
                assert torch.equal(ranks[k]["cases"][name]["db"], total[d:].to(full[2].dtype)), f"rank {k}: dbias"


# ---------------------------------------------------------------------------------------- bytes sent

@pytest.mark.guards("dist.rms.sharded_bytes", "dist.rms.sharded_bytes_deterministic", "dist.ln.sharded_bytes",
                    "dist.ln.sharded_bytes_welford", "dist.rms.sequence_parallel_bytes", "dist.ln.sequence_parallel_bytes")
@pytest.mark.parametrize("p", WORLDS)
def test_bytes_per_row_match_the_registry(job, p):
    """Bytes handed to the collectives (CommRecorder, ring model), at two row counts: the per-row part equals
    the registry's count at this p exactly; what is left per call is the one float32 that carries d (all-
    reduced, or all-gathered), and the input check's all-gather of 13 int64 per rank."""
    measured = B.add_formulas(job(p)[0]["bytes"], p)
    ar, ag = 2 * (p - 1) / p, (p - 1) / p
    per_call = {"sharded_rms": ar * 4, "sharded_rms_deterministic": ag * 4 * p, "sharded_ln_sums": ar * 4,
                "sharded_ln_welford": ag * 4 * p}
    for name in B.BYTE_METHODS:
        assert measured[name]["per_row"] == measured[name]["formula"], (name, measured[name])
        assert measured[name]["per_call"] == pytest.approx(per_call[name], abs=1e-9), name
    for name in B.SP_BYTE_METHODS:   # per step, whatever the number of rows
        assert measured[name]["per_step"] == [measured[name]["formula"]] * 2, (name, measured[name])
    assert measured["check_shapes_per_call"] == pytest.approx(ag * 13 * 8 * p)
    # RMSNorm sends half of LayerNorm's sums, and far less than gathering the row (d = 4096, bf16, p = 8)
    reg = symbolic.registry()
    pp = symbolic.sp.Symbol("p", integer=True, positive=True)
    rms, ln = reg["dist.rms.sharded_bytes"].display, reg["dist.ln.sharded_bytes"].display
    assert symbolic.sp.simplify(ln - 2 * rms) == 0
    row = reg["dist.allgather_row_bytes"].display.subs({pp: 8, symbolic.d: 4096, symbolic.ELEM_BYTES: 2})
    assert rms.subs(pp, 8) * 400 < row


# --------------------------------------------------------------------------------------------- DTensor

@pytest.mark.guards("dist.allgather_row_bytes", "data:distributed.json")
@pytest.mark.parametrize("p", WORLDS)
def test_dtensor_behaviour_is_what_the_data_file_records(job, p):
    """What F.rms_norm / F.layer_norm do with a Shard(-1) DTensor in the installed torch (the worker probes
    it) is what docs/data/distributed.json says; F.rms_norm with an uneven split all-gathers the row."""
    data = json.loads((REPO / "docs" / "data" / "distributed.json").read_text())
    assert data["torch"] == torch.__version__, "the data file was written with another torch: rerun the study"
    probe = job(p)[0]["dtensor"]
    for split in ("even", "uneven"):
        stored = data["dtensor"][f"p{p}"][split]
        for name in ("f_rms_norm", "f_layer_norm", "written_out"):
            got, rec = probe[split][name], stored[name]
            assert got["ok"] == rec["ok"], (split, name, got, rec)
            if not got["ok"]:
                assert got["error"] == rec["error"]
                continue
            for key in ("y_placement", "dx_placement", "forward", "backward", "forward_bytes_per_row",
                        "backward_bytes_per_row"):
                assert got[key] == rec[key], (split, name, key)
            assert got["max_abs_error"] < 1e-5
    # F.rms_norm on an uneven split gathers the whole row, each shard padded to the widest one (d' = p * ceil(d/p))
    uneven = probe["uneven"]["f_rms_norm"]
    if uneven["ok"]:
        padded = p * -(-(8 * p + 1) // p)
        row = symbolic.registry()["dist.allgather_row_bytes"].display.subs(
            {symbolic.sp.Symbol("p", integer=True, positive=True): p, symbolic.d: padded, symbolic.ELEM_BYTES: 4})
        assert uneven["forward"] == ["all_gather"] and uneven["forward_bytes_per_row"] == float(row)


# ---------------------------------------------------------------------------------------------- errors

ERRORS = {  # scenario: (exception type, text it names, same message on every rank)
    "rows_differ": ("ValueError", "row count", True),
    "leading_differ": ("ValueError", "leading dimensions", True),
    "weight_length": ("ValueError", "weight_local has shape", True),
    "dtype_differ": ("TypeError", "dtype differs", True),
    "weight_dtype_differ": ("TypeError", "weight's dtype differs", True),
    "weight_none_on_some": ("ValueError", "None on others", True),
    "empty_shard": ("ValueError", "empty shard", True),
    "bad_eps_one_rank": ("ValueError", "eps must be non-negative", True),
    "eps_nan": ("ValueError", "eps must be finite", True),
    "eps_differ": ("ValueError", "eps differs", True),
    "options_differ": ("ValueError", "options", True),
    "stats_differ": ("ValueError", "options", True),
    "bad_stats": ("ValueError", "stats must be", True),
    "bad_convention": ("ValueError", "unknown RMSNorm convention", True),
    "x_not_tensor_one_rank": ("TypeError", "x_local must be a torch.Tensor", True),
    "integer_x": ("TypeError", "integer", True),
    "sp_hidden_differ": ("ValueError", "normalized (last) dimension differs", True),
    "sp_ndim_differ": ("ValueError", "number of dimensions", True),
    "sp_weight_length": ("ValueError", "weight has shape", True),
    "no_check_bad_eps": ("ValueError", "eps must be non-negative", True),
    "group_not_a_group": ("TypeError", "ProcessGroup", True),
    "requires_grad_differ": ("ValueError", "record a gradient", True),
    "ln_requires_grad_differ": ("ValueError", "record a gradient", True),
}


@pytest.mark.parametrize("p", WORLDS)
def test_a_batch_of_zero_rows_is_an_empty_result_for_both_statistics(job, p):
    """sharded_layer_norm of a (0, d_k) shard returns a (0, d_k) tensor with stats="sums" and "welford"."""
    for k, r in enumerate(job(p)):
        for stats, y in r["zero_rows"].items():
            assert y.dim() == 2 and y.shape[0] == 0 and y.shape[1] >= 1, (stats, k, y.shape)


@pytest.mark.parametrize("p", WORLDS)
def test_bad_input_raises_the_same_clear_error_on_every_rank(job, p):
    """A mismatch or a bad input on any rank raises on every rank (no rank is left waiting in a collective),
    with a message that names the problem; afterwards the ranks are still in step."""
    ranks = job(p)
    for scenario, (kind, text, same) in ERRORS.items():
        got = [r["errors"][scenario] for r in ranks]
        for k, (typ, msg) in enumerate(got):
            assert typ == kind and text in msg, f"{scenario} rank {k}: {typ}: {msg[:300]}"
        if same:
            assert len({m for _, m in got}) == 1, f"{scenario}: the ranks raised different messages"
    member = [r["errors"]["not_a_member"] for r in ranks]
    assert member[0] == ("no error", "")
    assert all(t == "ValueError" and "not a member" in m for t, m in member[1:])
    for r in ranks:
        assert torch.equal(r["in_step_after_errors"], torch.ones_like(r["in_step_after_errors"]))


def test_without_a_process_group_the_error_says_so():
    assert not dist.is_initialized(), "this test needs a process without a default process group"
    for call in (lambda: D.sharded_rms_norm(torch.ones(2, 3), None),
                 lambda: D.sequence_parallel_rms_norm(torch.ones(2, 3), None),
                 lambda: D.sharded_layer_norm(torch.ones(2, 3), None, None),
                 lambda: D.sequence_parallel_layer_norm(torch.ones(2, 3), None, None)):
        with pytest.raises(RuntimeError, match="process group is not initialised.*init_process_group"):
            call()


# ------------------------------------------------------------------------------- data file and diagram

@pytest.mark.guards("data:distributed.json")
@pytest.mark.parametrize("p", WORLDS)
def test_data_file_byte_counts_are_what_the_code_sends(job, p):
    """The committed byte counts are the ones measured now, and the registry's."""
    data = json.loads((REPO / "docs" / "data" / "distributed.json").read_text())
    measured = B.add_formulas(job(p)[0]["bytes"], p)
    assert data["bytes"][f"p{p}"] == json.loads(json.dumps(measured))


@pytest.mark.guards("data:distributed.json")
def test_data_file_timing_summaries_follow_from_their_samples():
    data = json.loads((REPO / "docs" / "data" / "distributed.json").read_text())
    assert data["provenance"]["quick"] == (data["status"]["title"] == "Smoke run"), "a smoke run must say so"
    for p in WORLDS:
        t = data["timing"][f"p{p}"]
        assert t["reps"] >= 3 and set(t["methods"]) >= {"sharded_rms", "dtensor_f_rms_norm", "local_only"}
        for name, m in t["methods"].items():
            s = m["samples_us"]
            assert len(s) == t["reps"] and all(v > 0 for v in s), name
            assert m["min_us"] == min(s) and m["max_us"] == max(s)
            assert m["median_us"] == pytest.approx(float(np.median(s)))
            assert m["min_us"] <= m["q1_us"] <= m["median_us"] <= m["q3_us"] <= m["max_us"]
        ours, dt = t["methods"]["sharded_rms"], t["methods"]["dtensor_f_rms_norm"]
        expect = ("faster in every repetition" if ours["max_us"] < dt["min_us"] else
                  "slower in every repetition" if ours["min_us"] > dt["max_us"] else "not separable from the spread")
        assert t["verdict_vs_dtensor"] == expect


@pytest.mark.guards("data:distributed.json")
def test_layout_diagram_is_what_the_generator_draws(tmp_path):
    paths = B.write_diagrams(tmp_path)
    assert [p.name for p in paths] == ["distributed-layouts.svg", "distributed-layouts-dark.svg"]
    for p in paths:
        committed = REPO / "docs" / "data" / "plots" / p.name
        assert committed.read_text(encoding="utf-8") == p.read_text(encoding="utf-8"), f"rerun --diagram: {p.name}"
        text = p.read_text(encoding="utf-8")
        assert "<title" in text and "<desc" in text and 'role="img"' in text


@pytest.mark.guards("data:distributed.json")
def test_worked_example_in_the_data_file_is_right():
    """x = (1, 2, 2, 4) split 2 + 2: partial sums of squares 5 and 20, mean square 25/4, RMS 2.5, y = x / 2.5."""
    ex = json.loads((REPO / "docs" / "data" / "distributed.json").read_text())["worked_example"]
    assert ex["x"] == [1.0, 2.0, 2.0, 4.0] and ex["partials"] == [5.0, 20.0] and ex["sum_of_squares"] == 25.0
    assert ex["mean_square"] == 6.25 and ex["rms"] == 2.5
    np.testing.assert_allclose(ex["y"], oracle.rms_norm_forward(np.array(ex["x"]), None, 0.0), rtol=2 * U32)


# ------------------------------------------------------------------------------------- quoted sources

@pytest.mark.guards("dist.chan_merge")
def test_chan_merge_is_exact_for_symbolic_shards():
    """The merge formula (Chan, Golub & LeVeque 1979) equals the sum of squared deviations of the merged
    values, proven with SymPy for symbolic values at several shard sizes, and the code's rank-order merge of
    p shards equals a two-pass float64 computation."""
    sp = symbolic.sp
    f = symbolic.get("dist.chan_merge")
    for na, nb in ((1, 1), (1, 3), (2, 3), (4, 2)):
        xs = sp.symbols(f"v0:{na + nb}", real=True)
        a, b = xs[:na], xs[na:]

        def m2(vals):
            mean = sum(vals) / len(vals)
            return sum((v - mean) ** 2 for v in vals)
        delta = sum(b) / nb - sum(a) / na
        subs = {sp.Symbol("M_{2,a}"): m2(a), sp.Symbol("M_{2,b}"): m2(b), sp.Symbol("delta"): delta,
                sp.Symbol("n_a", integer=True, positive=True): na, sp.Symbol("n_b", integer=True, positive=True): nb}
        assert sp.expand(f.display.subs(subs) - m2(xs)) == 0, (na, nb)
    g = torch.Generator().manual_seed(5)
    x = 100 + torch.randn(3, 37, generator=g, dtype=torch.float64)
    widths = W.WIDTHS[4]
    parts = []
    for k in range(4):
        lo, hi = B.shard_bounds(widths, k)
        xs_ = x[:, lo:hi]
        mk = xs_.mean(-1, keepdim=True)
        parts.append(torch.cat([mk, (xs_ - mk).pow(2).sum(-1, keepdim=True)], -1))
    mean, m2_ = D._merge_mean_m2(torch.stack(parts), widths)
    torch.testing.assert_close(mean, x.mean(-1, keepdim=True), rtol=0, atol=1e-12)
    torch.testing.assert_close(m2_, (x - x.mean(-1, keepdim=True)).pow(2).sum(-1, keepdim=True), rtol=1e-12, atol=1e-10)


@pytest.mark.guards("dist.olmo2_tp_plan")
def test_olmo2_gathers_q_and_k_because_of_its_qk_norm():
    """OLMo 2 normalizes q and k over all heads at once (Olmo2RMSNorm of num_heads * head_dim), so transformers'
    tensor-parallel plan gathers the q/k/v projections' outputs ("colwise_gather_output") rather than keep
    them sharded: a sharded RMSNorm is what would let them stay split."""
    import inspect

    from transformers.models.olmo2 import configuration_olmo2, modeling_olmo2

    plan = configuration_olmo2.Olmo2Config.base_model_tp_plan
    for proj in ("q_proj", "k_proj", "v_proj"):
        assert plan[f"layers.*.self_attn.{proj}"] == "colwise_gather_output"
    src = inspect.getsource(modeling_olmo2.Olmo2Attention.__init__)
    assert "Olmo2RMSNorm(config.num_attention_heads * self.head_dim" in src


@pytest.mark.guards("snippet:_distributed_worker.usage")
@pytest.mark.parametrize("p", WORLDS)
def test_usage_example_runs_on_every_rank(job, p):
    """The page's example: a QK-norm over heads split unevenly (llama order, bfloat16) equals the single-device
    llama RMSNorm within its bound; the sequence-parallel norm equals the single-device bits on each rank's rows."""
    ranks = job(p)
    q, qw, h, hw, heads, head_dim = ranks[0]["usage_inputs"]
    got = torch.cat([r["usage"][0] for r in ranks], -1)
    gain = _np(qw)
    tol.assert_within(got, oracle.rms_norm_forward(_np(q), gain, 1e-6), tol.convention_forward_bound(q, qw, 1e-6, "llama"),
                      "usage: q")
    for k, r in enumerate(ranks):
        assert torch.equal(r["usage"][1], C.rms_norm(h[5 * k: 5 * k + 5], hw, 1e-6, convention="reference"))


@pytest.mark.guards("dist.dtensor_fused_rule")
def test_dtensor_fused_rms_norm_rule_never_shards_the_normalized_dimension():
    """Where F.rms_norm reaches the fused op (on GPUs), DTensor's sharding rule in the installed torch offers
    strategies for the leading dimensions only: a Shard(-1) input is redistributed (gathered) first."""
    from types import SimpleNamespace

    from torch.distributed.tensor._ops import _math_ops

    rule = _math_ops.rms_norm_single_dim_strategy
    rule = getattr(rule, "__wrapped__", rule)
    strategies = rule(torch.ops.aten._fused_rms_norm.default, (SimpleNamespace(shape=(2, 3, 8)), [8], None, 1e-6), {})
    assert len(strategies) == 2   # one per leading dimension, none for the last
    dims = {getattr(pl, "dim", None) for rule_ in strategies for pl in rule_}
    assert dims <= {0, 1}, dims
