"""A Pre-LN model is a Pre-RMSNorm model once its residual stream is centred (reference_impl/equivalence.py).

Checked on GPT-2 and GPT-NeoX models built from the installed transformers: the identities behind the
conversion (SymPy, general d), the zero-mean stream at every norm, the norm swap at every site within the
tolerance policy, the logits end to end, and gain folding and rotation (what QuaRot and SliceGPT rely
on). Each broken variant (no centring, biases left, tied head, LayerNorm rotated) is shown to fail.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import sympy as sp
import torch
from torch import nn

from reference_impl import equivalence as E
from reference_impl import symbolic as S
from reference_impl import tolerances as tol
from reference_impl.norms.rms_norm import rms_norm

FAMILIES = ["gpt2", "gpt_neox"]
DTYPES = [torch.float64, torch.float32]


@pytest.fixture(scope="module", params=[(f, dt) for f in FAMILIES for dt in DTYPES],
                ids=lambda p: f"{p[0]}-{str(p[1]).split('.')[-1]}")
def case(request):
    family, dtype = request.param
    model = E.tiny_model(family, dtype=dtype, seed=1)
    ids = torch.randint(0, model.config.vocab_size, (3, 16), generator=torch.Generator().manual_seed(7))
    return model, ids, E.logits(model, ids)


def _converted(model):
    return E.to_rms_norm(copy.deepcopy(model))


def _excess(out, ref, bound):
    """The largest ratio |out - ref| / bound (<= 1 means within the bound)."""
    return float(((out - ref).abs() / bound).max())


# ------------------------------------------------------------------------------------- the identities


@pytest.mark.guards("equiv.ms_split", "equiv.rms_split", "equiv.rms_mean")
@pytest.mark.parametrize("fid", ["equiv.ms_split", "equiv.rms_split", "equiv.rms_mean"])
def test_identities_hold_for_general_d(fid):
    f = S.get(fid)
    assert f.kind == "identity" and f.holds()
    # the same proof rejects a wrong right-hand side
    wrong = S.Formula(fid + ".wrong", "", f.lhs, f.display + S.mu * S.r, f.defs, "identity", proof_lhs=f.proof_lhs)
    assert not wrong.holds()


@pytest.mark.guards("equiv.rms_split", "equiv.rms_mean", "C48")
def test_rmsnorm_keeps_a_per_token_multiple_of_the_all_ones_vector():
    """RMSNorm(x) = gamma r (x - mu) + (mu r) gamma: the second term's size changes from row to row, so no
    fixed bias can remove it; its unit-gain mean is exactly mu r."""
    g = np.random.default_rng(3)
    x = g.standard_normal((64, 24)) + g.standard_normal((64, 1))      # every row its own mean
    w = 1 + 0.3 * g.standard_normal(24)
    eps = 1e-5
    lhs = S.get("equiv.rms_split").numeric("lhs")(x=x, weight=w, eps=eps)
    rhs = S.get("equiv.rms_split").numeric()(x=x, weight=w, eps=eps)
    ours = rms_norm(torch.tensor(x), torch.tensor(w), eps).numpy()
    bound = tol.rms_forward_bound(x, w, eps, torch.float64)
    tol.assert_within(ours, lhs, bound, "reference RMSNorm vs the registry's lhs")
    mu = x.mean(-1)
    r = 1 / np.sqrt((x * x).mean(-1) + eps)
    # the split form cancels: charge its rounding to the terms (and to mu, a sum of d terms)
    terms = np.abs(w) * r[:, None] * (np.abs(x - mu[:, None]) + np.abs(mu)[:, None] + 2 * np.abs(x).mean(-1, keepdims=True))
    tol.assert_within(ours, rhs, bound + tol.gamma(24 + 6, tol.unit_roundoff(torch.float64)) * terms, "split form")
    shift = (ours - w * r[:, None] * (x - mu[:, None])) / w          # what is left once the centred part goes
    assert np.allclose(shift, (mu * r)[:, None], rtol=1e-12, atol=1e-14)
    assert np.ptp(mu * r) > 0.5                                        # per token, not a fixed offset
    unit = rms_norm(torch.tensor(x), None, eps).numpy().mean(-1)
    mean_formula = S.get("equiv.rms_mean").numeric()(x=x, eps=eps)
    assert np.allclose(unit, mean_formula, rtol=1e-12, atol=1e-15)


# ----------------------------------------------------------------------------------- the conversion


@pytest.mark.guards("equiv.centre_weight", "equiv.centre_bias", "ln.as_rms", "C07")
def test_conversion_keeps_the_logits(case):
    model, ids, ref = case
    conv = _converted(model)
    assert not any(isinstance(m, nn.LayerNorm) for m in conv.modules())
    assert sum(isinstance(m, E.RMSNormAffine) for m in conv.modules()) == 2 * model.config.num_hidden_layers + 1
    out = E.logits(conv, ids)
    assert _excess(out, ref, E.logit_bound(model, ids)) <= 1.0
    assert not torch.equal(conv.lm_head.weight, E.layout(conv).embedding.weight)   # head untied, embedding centred


@pytest.mark.guards("equiv.centre_weight", "equiv.centre_bias", "equiv.rms_mean")
def test_centred_stream_has_zero_mean_at_every_norm(case):
    model, ids, _ = case
    u = tol.unit_roundoff(model.lm_head.weight.dtype)
    paths = E.path_lengths(model, ids.shape[-1])
    before = E.norm_inputs(model, ids)
    after = E.norm_inputs(_converted(model), ids)
    assert len(after) == len(before) == len(paths) - 1
    for k, h in enumerate(after):
        limit = tol.gamma(max(paths[k], 1) + h.shape[-1], u)
        assert float(E.mean_shift(h).abs().max()) <= limit, f"norm {k}: stream not centred"
    # the check can fail: the original stream carries a mean of a tenth of its RMS or more
    assert max(float(E.mean_shift(h).abs().max()) for h in before) > 0.05


@pytest.mark.guards("ln.as_rms", "C07")
def test_norm_swap_is_within_the_policy_at_every_site(case):
    """On the centred stream of the converted model, LayerNorm and RMSNorm + bias agree within the sum of
    their policy bounds plus what the residual mean m (rounding level) contributes: |gamma_i| (r|m| + |h_i| r^3 m^2)."""
    model, ids, _ = case
    conv = _converted(model)
    norms = [getattr(p, a) for p, a in E.layout(model).norms]
    for k, (h, ln) in enumerate(zip(E.norm_inputs(conv, ids), norms)):
        with torch.no_grad():
            y_ln = ln(h)
            y_rms = E.RMSNormAffine.from_layer_norm(ln).to(h.dtype)(h)
        hd = h.double().numpy()
        w, b = ln.weight.detach().double().numpy(), ln.bias.detach().double().numpy()
        m = hd.mean(-1, keepdims=True)
        r = 1 / np.sqrt((hd * hd).mean(-1, keepdims=True) - m * m + ln.eps)
        mean_term = np.abs(w) * (r * np.abs(m) + np.abs(hd) * r ** 3 * m * m)
        bound = (tol.ln_forward_bound(hd, w, b, ln.eps, h.dtype) + tol.rms_forward_bound(hd, w, ln.eps, h.dtype)
                 + np.abs(b) * tol.unit_roundoff(h.dtype) + mean_term)
        tol.assert_within(y_rms, y_ln.double().numpy(), bound, f"norm {k}")


@pytest.mark.guards("equiv.centre_weight", "equiv.centre_bias", "C07")
def test_each_step_of_the_conversion_is_needed(case):
    model, ids, ref = case
    bound = E.logit_bound(model, ids)
    swapped = E.layer_norms_to_rms_norms(E.untie_head(copy.deepcopy(model)))          # no centring
    assert _excess(E.logits(swapped, ids), ref, bound) > 10
    no_bias = E.layer_norms_to_rms_norms(E.centre_writers(E.untie_head(copy.deepcopy(model)), biases=False))
    assert _excess(E.logits(no_bias, ids), ref, bound) > 10
    if model.lm_head.weight is E.layout(model).embedding.weight:                        # GPT-2 ties its head
        with pytest.raises(ValueError, match="untie_head"):
            E.centre_writers(copy.deepcopy(model))
        tied = copy.deepcopy(model)
        for mod, kind in E.layout(tied).writers:
            E.centre_writer(mod, kind)                                                # centres the head too
        assert _excess(E.logits(E.layer_norms_to_rms_norms(tied), ids), ref, bound) > 10
    # the final norm reads the same centred stream: a LayerNorm left there is still exact
    partial = E.untie_head(copy.deepcopy(model))
    E.centre_writers(partial)
    lay = E.layout(partial)
    for parent, attr in lay.norms[:-1]:
        setattr(parent, attr, E.RMSNormAffine.from_layer_norm(getattr(parent, attr)))
    assert _excess(E.logits(partial, ids), ref, bound) <= 1.0


# ------------------------------------------------------------------------------- folding and rotation


@pytest.mark.guards("equiv.fold_weight", "equiv.fold_bias")
@pytest.mark.parametrize("kind", ["linear", "conv1d"])
def test_fold_into_reader_matches_the_formula(kind):
    g = torch.Generator().manual_seed(2)
    d, out = 12, 7
    x = torch.randn(5, d, generator=g, dtype=torch.float64)
    gain, beta = 1 + torch.randn(d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    W, b = torch.randn(out, d, generator=g, dtype=torch.float64), torch.randn(out, generator=g, dtype=torch.float64)
    if kind == "linear":
        reader = nn.Linear(d, out, dtype=torch.float64)
        with torch.no_grad():
            reader.weight.copy_(W)
    else:
        from transformers.pytorch_utils import Conv1D   # GPT-2's layer: y = x @ W + b, W stored (in, out)

        reader = Conv1D(out, d).double()
        with torch.no_grad():
            reader.weight.copy_(W.T)
    with torch.no_grad():
        reader.bias.copy_(b)
    with torch.no_grad():
        before = reader(x * gain + beta)
        E.fold_into_reader(reader, kind, gain, beta)
        after = reader(x)
    Wf = reader.weight if kind == "linear" else reader.weight.T
    # the formulas, element by element: W'_ij = W_ij gamma_j, b'_i = b_i + sum_j W_ij beta_j
    wij = S.get("equiv.fold_weight").display
    sub = {sp.Indexed(sp.IndexedBase("W", real=True), S.i, S.j): sp.Symbol("w"), S.gamma[S.j]: sp.Symbol("g")}
    fn = sp.lambdify([sp.Symbol("w"), sp.Symbol("g")], wij.xreplace(sub))
    assert torch.allclose(Wf, fn(W, gain[None, :]), rtol=0, atol=0)
    assert torch.allclose(reader.bias, b + W @ beta, rtol=1e-14, atol=1e-14)
    assert torch.allclose(after, before, rtol=1e-12, atol=1e-12)


def _rms_rows(x, eps=1e-6):
    return rms_norm(x, None, eps)


@pytest.mark.guards("equiv.rotation")
def test_rmsnorm_commutes_with_an_orthogonal_matrix_and_layernorm_does_not():
    d = 32
    q = E.random_orthogonal(d, seed=4)
    assert torch.allclose(q @ q.T, torch.eye(d, dtype=torch.float64), atol=1e-14)
    x = torch.randn(40, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 0.7
    lhs, rhs = _rms_rows(x @ q), _rms_rows(x) @ q
    u = tol.unit_roundoff(torch.float64)
    # both sides are RMSNorm within the policy, plus the products with Q (gamma(d) |x||Q| r and |y||Q|)
    r = 1 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    bound = (torch.tensor(tol.rms_forward_bound(x @ q, None, 1e-6, torch.float64))
             + torch.tensor(tol.rms_forward_bound(x, None, 1e-6, torch.float64)) @ q.abs()
             + tol.gamma(d + 2, u) * ((x.abs() @ q.abs()) * r + rhs.abs().new_tensor((_rms_rows(x).abs() @ q.abs()).numpy())))
    assert bool(((lhs - rhs).abs() <= bound).all())
    # a gain that is not 1, or centring, breaks it
    w = 1 + 0.5 * torch.randn(d, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    assert float((rms_norm(x @ q, w, 1e-6) - rms_norm(x, w, 1e-6) @ q).abs().max()) > 1e3 * float(bound.max())
    ln = torch.nn.functional.layer_norm
    assert float((ln(x @ q, (d,)) - ln(x, (d,)) @ q).abs().max()) > 1e3 * float(bound.max())


@pytest.mark.guards("equiv.fold_weight", "equiv.fold_bias", "equiv.rotation")
def test_folding_and_rotating_the_converted_model_keeps_the_logits(case):
    model, ids, ref = case
    bound = E.logit_bound(model, ids)
    d = model.config.hidden_size
    conv = _converted(model)
    with pytest.raises(ValueError, match="fold_norm_gains"):
        E.rotate_residual(copy.deepcopy(conv), E.random_orthogonal(d))                  # gains not folded yet
    folded = E.fold_norm_gains(conv)
    assert all(m.bias is None and bool((m.weight == 1).all()) for m in folded.modules() if isinstance(m, E.RMSNormAffine))
    assert _excess(E.logits(folded, ids), ref, bound) <= 1.0
    rotated = E.rotate_residual(folded, E.random_orthogonal(d, seed=9))
    assert _excess(E.logits(rotated, ids), ref, bound) <= 1.0
    # the same rotation of the LayerNorm model (gains folded too) changes its function
    ln_model = E.fold_norm_gains(E.untie_head(copy.deepcopy(model)))
    assert _excess(E.logits(ln_model, ids), ref, bound) <= 1.0
    E.rotate_residual(ln_model, E.random_orthogonal(d, seed=9), strict=False)
    assert _excess(E.logits(ln_model, ids), ref, bound) > 10


# ------------------------------------------------------------------------------------------ bad input


def test_bad_input_gets_a_clear_error():
    with pytest.raises(TypeError, match="GPT-2 or GPT-NeoX"):
        E.layout(nn.Linear(3, 3))
    with pytest.raises(TypeError, match="LayerNorm"):
        E.RMSNormAffine.from_layer_norm(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="last dimension"):
        E.RMSNormAffine.from_layer_norm(nn.LayerNorm((2, 3)))
    with pytest.raises(ValueError, match="positive int"):
        E.random_orthogonal(0)
    with pytest.raises(ValueError, match="family"):
        E.tiny_model("llama")
    with pytest.raises(ValueError, match="writer kind"):
        E.centre_writer(nn.Linear(3, 3), "conv2d")
    with pytest.raises(ValueError, match="reader kind"):
        E.fold_into_reader(nn.Linear(3, 3), "conv2d", torch.ones(3), None)
    model = E.fold_norm_gains(E.to_rms_norm(E.tiny_model(d=16, layers=1)))
    with pytest.raises(ValueError, match=r"Q must be \(16, 16\)"):
        E.rotate_residual(model, torch.eye(8, dtype=torch.float64))
    with pytest.raises(ValueError, match="not orthogonal"):
        E.rotate_residual(model, 2 * torch.eye(16, dtype=torch.float64))


@pytest.mark.guards("equiv.ms_split", "equiv.rms_mean", "ln.as_rms")
def test_the_worked_example_of_the_page():
    ex = E.worked_example()
    assert ex["ms"] == pytest.approx(ex["var"] + ex["mu"] ** 2, rel=1e-15)
    assert ex["rms_norm_mean"] == pytest.approx(ex["mu_over_rms"], rel=1e-15)
    assert np.allclose(ex["layer_norm"], ex["rms_norm_of_centred"], rtol=1e-15, atol=1e-15)
    assert not np.allclose(ex["layer_norm"], ex["rms_norm"], atol=0.1)
    assert ex["text"]["x"] == "(1, 2, 3, 6)"
