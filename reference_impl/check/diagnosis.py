"""The kit's diagnosis: an experiment, not a nearest neighbour.

Starting from the model's own order (its replay, :func:`replay`, bit-identical to the model's module on the
kit's inputs), change one operation at a time (where the sum of squares is accumulated, where eps goes, the
``1 + w`` offset, a rounding step before the gain, a mean subtracted, the dimension reduced over, the value
of eps, the dtype the gain is held in) and name the change that reproduces the function's output bit for
bit on the failing cases (or most closely); where none does, pairs of changes (:func:`fixed_pairs` and the
changes that came closest alone, two by two) are replayed and the pair that does is named. Failures that
are not about values are named from what the kit saw (an exception, an input changed in place, two calls
that disagree, a wrong shape or dtype, the residual contract, a missing or wrong gradient).

:func:`explain` returns one sentence, its evidence and a line to rerun the failing case; it never says that
a failing function equals the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import shared as S
from . import matching as M

_EPS_VALUES = (1e-5, 1e-6, 1e-8, 1e-12, 0.0)
_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32", torch.float64: "float64"}


@dataclass
class Finding:
    """What the diagnosis found: ``sentence`` (what differs, in words), ``evidence`` (the numbers behind
    it), ``rerun`` (a line that reruns the case it is drawn from) and ``key`` (a stable name of the
    change, e.g. ``"eps_outside"``, for tests and data files)."""

    key: str
    sentence: str
    evidence: str = ""
    rerun: str = ""

    def text(self) -> str:
        out = self.sentence
        if self.evidence:
            out += f" ({self.evidence})"
        if self.rerun:
            out += f"; rerun: {self.rerun}"
        return out


# ------------------------------------------------------------------------------------------ the model's order

def _dtname(dt) -> str:
    return _NAMES.get(dt, str(dt).replace("torch.", ""))


def replay(p: M.Probe, target, *, acc_in_x=False, square_in_x=False, center=None, dim=None, placement=None,
           offset_flip=False, round_flip=None, gain_in_x=False, eps=None, bias=True, center_x=None,
           root_norm=False, stat_in_x=False):
    """The target's order on a probe with at most the named changes (none: the model's order itself).

    RMSNorm (``target.kind == "rms"``) follows :func:`reference_impl.shared.rms_forward` step by step;
    LayerNorm centres in float32 and applies ``w`` and the bias in float32, then one cast. ``round_flip``:
    "f32" (the gain applied in float32 before the one rounding) or "x" (rounded to x's dtype, then the gain).
    ``center`` centres the statistic; ``center_x`` (default: as ``center``) the x that is divided by it.
    ``root_norm``: the RMS taken as a vector norm over sqrt(d), ``sqrt(sum(x^2)) / sqrt(d)``, squared back
    before eps; ``stat_in_x``: that statistic (the norm, then the quotient; or else the mean square) rounded
    to x's dtype.
    """
    x, w, conv = p.x, p.weight, target.convention
    layer = target.kind == "layer"
    center = layer if center is None else center
    eps = p.eps if eps is None else eps
    sd = S.stat_dtype(x, conv) if not layer else torch.float32
    xf = x.to(sd)

    def mean(t):
        if dim is not None:
            return t.mean(dim=dim, keepdim=True)
        return S.family_row_mean(t, conv) if not layer else t.mean(-1, keepdim=True)

    num = xf
    if center:
        xf = xf - mean(xf)
    num = xf if (center if center_x is None else center_x) else num
    if root_norm:  # torch.linalg.vector_norm(x) / d ** 0.5, in x's dtype with stat_in_x
        n = xf.pow(2).sum(-1 if dim is None else dim, keepdim=True).sqrt()
        n = n.to(x.dtype) if stat_in_x else n
        cnt = xf.numel() // n.numel()
        ms = (n / cnt ** 0.5).to(sd) ** 2
    elif acc_in_x:
        ms = mean(xf.to(x.dtype).pow(2)).to(sd)
    elif square_in_x:
        ms = mean(xf.to(x.dtype).pow(2).to(sd))
    else:
        ms = mean(xf.pow(2))
    if stat_in_x and not root_norm:
        ms = ms.to(x.dtype).to(sd)
    rstd = S.inv_rms(ms, eps, placement or target.placement)
    xf = num
    h = xf * rstd
    if layer:
        g = None if w is None else (w.float() + 1.0 if offset_flip else w.float())
        if g is not None and gain_in_x:
            g = g.to(x.dtype).float()
        if round_flip == "x":
            h = h.to(x.dtype).float()
        y = h if g is None else h * g
        if bias and p.bias is not None:
            y = y + p.bias.float()
        return y.to(x.dtype)
    if w is None:
        return S.apply_gain(x, rstd, None, conv) if not center else h.to(x.dtype)
    if target.gain == "1+w":  # Gemma: (1 + w) in float32, one cast
        g = w.float() if offset_flip else 1.0 + w.float()
        if gain_in_x:
            g = g.to(x.dtype).float()
        if round_flip == "x":
            return (h.to(x.dtype).float() * g).to(x.dtype)
        return (h * g).to(x.dtype)
    ww = (w + 1) if offset_flip else w
    if gain_in_x:
        ww = ww.to(x.dtype)
    out_dt = S.output_dtype(x.dtype, w.dtype, conv)
    if round_flip == "f32":  # the gain in float32 before the one rounding
        return (h * ww.to(sd)).to(x.dtype).to(out_dt)
    if round_flip == "x":
        return (ww * h.to(x.dtype)).to(out_dt)
    if center or dim is not None or root_norm or stat_in_x or conv not in ("llama", "t5"):
        # apply_gain recomputes x * rstd from x; the centred/odd statistics need this h instead
        if conv in ("llama",):
            return ww * h.to(x.dtype)
        return (h * ww.to(sd)).to(x.dtype) if conv == "reference" else h.mul(ww).to(x.dtype)
    return S.apply_gain(x, rstd, ww, conv)


def changes(target, dtype: torch.dtype) -> list[tuple[str, dict, str]]:
    """The experiments for a target and an x dtype: ``(key, replay options, sentence)``, in the order a
    tie is broken."""
    m, layer = target.name, target.kind == "layer"
    dn = _dtname(dtype)
    out = []
    if dtype in S.HALF:
        out.append(("acc_in_x", {"acc_in_x": True},
                    f"the sum of squares is accumulated in {dn}, where {m} accumulates in float32"))
        out.append(("square_in_x", {"square_in_x": True},
                    f"x * x is computed in {dn} before the float32 mean"
                    + (" (float16 overflows in the sum of squares above |x| = 256)" if dtype == torch.float16 else "")))
    other = "outside" if target.placement == "inside" else "inside"
    out.append((f"eps_{other}", {"placement": other},
                "eps is added after the square root, x / (rms + eps), where " + m + " adds it inside: rsqrt(ms + eps)"
                if other == "outside" else
                "eps is added inside the square root, where " + m + " adds it after: x / (rms + eps)"))
    if target.gain == "1+w":
        out.append(("plain_gain", {"offset_flip": True}, f"the gain is applied as w, not 1 + w ({m} stores the "
                                                          "offset from one)"))
    elif target.gain == "w":
        out.append(("offset_gain", {"offset_flip": True}, f"the gain is applied as 1 + w, not w ({m} stores the "
                                                           "gain itself)"))
    if dtype in S.HALF:
        out.append(("stat_in_x", {"stat_in_x": True}, f"the mean square is rounded to {dn} before eps is added, where "
                                                      f"{m} holds it in float32"))
    if layer:
        out.append(("no_center", {"center": False}, "the mean is not subtracted (a mean square, not a variance)"))
        out.append(("x_uncentred", {"center_x": False}, "x is not centred: x itself, not x - mean, is divided by the "
                                                        "standard deviation"))
        out.append(("no_bias", {"bias": False}, "the bias is not added"))
    else:
        out.append(("center", {"center": True}, "the mean is subtracted (a variance, not a mean square)"))
    rounds_first = target.kind == "rms" and target.convention in ("llama", "t5") and target.gain == "w"
    if rounds_first:
        out.append(("gain_before_rounding", {"round_flip": "f32"},
                    f"the gain is applied in float32 before the result is rounded to {dn}, where {m} rounds first"))
    elif dtype in S.HALF:
        out.append(("rounds_before_gain", {"round_flip": "x"},
                    f"the result is rounded to {dn} before the gain, where {m} applies the gain in float32 and "
                    "rounds once"))
    if dtype in S.HALF:
        out.append(("gain_in_x", {"gain_in_x": True}, f"the gain is rounded to {dn} before it is applied"))
    out.append(("dim0", {"dim": 0}, "the reduction runs over the wrong dimension (dim 0, down the columns, not the "
                                    "last dimension)"))
    out.append(("dim_all", {"dim": "all"}, "the reduction runs over the whole tensor, not over each row"))
    for e in _EPS_VALUES:
        if not math.isclose(e, target.eps, rel_tol=1e-9, abs_tol=0.0):
            out.append((f"eps_{e:g}", {"eps": e}, f"eps is {e:g}, where {m} uses {target.eps:g}"))
    return out


def components(target, dtype: torch.dtype) -> list[tuple[str, dict, str]]:
    """Changes tried only in pairs (alone they are no change, or a reordering within the last bit):
    ``(key, replay options, sentence)``."""
    out = []
    if target.kind == "rms":
        out.append(("x_uncentred", {"center_x": False}, "x itself, not x - mean, is divided by the statistic"))
    out.append(("root_norm", {"root_norm": True}, "the RMS is taken as a vector norm over sqrt(d), "
                                                  "sqrt(sum(x^2)) / sqrt(d), and squared back before eps"))
    return out


def fixed_pairs(target, dtype: torch.dtype) -> list[tuple[str, str, str]]:
    """The pairs always tried, whatever each change does alone: ``(key, key, sentence)``. Each pairs a change
    with one that is no change (or a last-bit reordering) on its own, so the rule that pairs only the
    changes that moved toward the function's output alone would never try them."""
    m, dn = target.name, _dtname(dtype)
    out = []
    if target.kind == "rms":
        out.append(("center", "x_uncentred", "x is not centred but the variance is: the statistic is a variance (the "
                                             "mean subtracted), while x itself, not x - mean, is divided by it"))
    if dtype in S.HALF:
        out.append(("root_norm", "stat_in_x", f"the RMS is a vector norm over sqrt(d) held in {dn} (the norm and the "
                                              f"quotient each rounded), where {m} keeps the mean square in float32"))
    return out


MOVERS = 4  # the single changes (those that moved toward the function) paired with each other


def _run_change(p: M.Probe, target, opts: dict):
    opts = dict(opts)
    if opts.get("dim") == "all":
        opts["dim"] = tuple(range(p.x.dim()))
    elif opts.get("dim") == 0 and p.x.dim() == 3:
        opts["dim"] = (0, 1)  # every position of every token, as a flattening kernel would
    return replay(p, target, **opts)


# ------------------------------------------------------------------------------------------ experiments

def _dist(got, want) -> torch.Tensor | None:
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor) or got.shape != want.shape:
        return None
    got = got.detach().cpu()
    want = want.detach().cpu().to(got.dtype) if got.dtype in M._INT else None
    return None if want is None else M.ulp_distance(got, want)


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def value_experiment(outputs: list, target) -> Finding | None:
    """``outputs``: ``(case, probe, fn's output, the model's output)`` of the cases whose values failed.
    Returns the change that reproduces the most of them bit for bit (then the smallest distance); where no
    single change reproduces them all, a pair of changes that reproduces more (see :func:`_pairs`); None
    when nothing comes within half the distance of the model's own order to the function."""
    if not outputs or target.kind not in ("rms", "layer"):
        return None
    base_worst = 0
    rows = []
    for case, p, got, ref in outputs:
        d0 = _dist(got, ref)
        base_worst = max(base_worst, M.HUGE if d0 is None else int(d0.max()) if d0.numel() else 0)
        opts = {k: (o, snt) for k, o, snt in changes(target, p.x.dtype) + components(target, p.x.dtype)}
        rows.append((case, p, got, ref, opts))
    singles = list(dict.fromkeys(k for *_, opts in rows for k in opts))
    comp = {k for _, p, *_ in rows for k, _, _ in components(target, p.x.dtype)}
    sentences = _sentences(rows, {k: o[k][1] for *_, o in rows for k in o})
    scores = {k: _score(rows, (k,), target) for k in singles}
    order = [k for k in singles if k not in comp]
    scores_single = {k: scores[k] for k in order if scores[k] is not None}
    if not scores_single:
        return None
    best = min(scores_single, key=lambda k: (-scores[k][0], scores[k][1], order.index(k)))
    hits, worst, example = scores[best]
    n = len(outputs)
    pair = _pairs(rows, target, scores, order, base_worst) if hits < n else None
    if pair is not None and (pair[1][0] > hits or (pair[1][0] == hits and pair[1][1] < worst
                                                     and (hits > 0 or 2 * pair[1][1] <= worst))):
        (a, b, sentence), (hits, worst, example) = pair
        alone = "; ".join(f"{'the first' if k == a else 'the second'} alone: "
                          + (f"{scores[k][0]} of {n} bit for bit, at most {_big(scores[k][1])} ulp away"
                             if scores[k] is not None else "not applicable") for k in (a, b))
        ev = (f"changing these two in {target.name}'s order reproduces the function bit for bit on "
              + (f"all {n} failing cases" if hits == n else f"{hits} of {n} failing cases (at most {_big(worst)} ulp "
                                                            "away on the others)") + f"; {alone}")
        return Finding(f"{a}+{b}", sentence, ev + _example(example, target))
    if hits == 0 and 2 * worst > base_worst:  # barely closer than the model's order: no evidence for it
        return None
    sentence = sentences[best]
    if hits == n:
        how = f"changing only this in {target.name}'s order reproduces the function bit for bit on all {n} failing cases"
    elif hits:
        how = (f"changing only this in {target.name}'s order reproduces the function bit for bit on {hits} of {n} "
               f"failing cases (at most {_big(worst)} ulp away on the others)")
    else:
        how = (f"no single change reproduces the function bit for bit; this one comes closest: at most {_big(worst)} ulp "
               f"from it, where {target.name}'s order is {_big(base_worst)} ulp away")
    return Finding(best, sentence, how + _example(example, target))


def _score(rows, keys, target) -> list | None:
    """``[hits, worst, example]`` of the changes ``keys`` made together on every row they apply to (None
    when they apply to none): hits, the rows reproduced bit for bit; worst, the largest ulp distance."""
    s = None
    for case, p, got, ref, opts in rows:
        # a pair whose one change does not apply to x's dtype (a rounding to x's dtype, x float32) is the other
        # change alone there
        if any(k not in opts for k in keys) and (len(keys) == 1 or not any(k in opts for k in keys)):
            continue
        merged = {}
        for k in keys:
            merged.update(opts.get(k, ({}, ""))[0])
        try:
            with torch.no_grad():
                alt = _run_change(p, target, merged)
        except (RuntimeError, TypeError, ValueError):
            continue
        d = _dist(got, alt)
        w = M.HUGE if d is None else (int(d.max()) if d.numel() else 0)
        s = s or [0, 0, None]
        s[0] += w == 0
        s[1] = max(s[1], w)
        if w == 0 and s[2] is None:
            s[2] = (case, p, got, ref, alt)
    return s


def _pairs(rows, target, scores, order, base_worst):
    """The best pair of changes, ``((a, b, sentence), score)``, or None: the fixed pairs of
    :func:`fixed_pairs`, and every pair of the :data:`MOVERS` single changes that came closest to the
    function alone (those that reproduced a case, or came nearer than the model's order), whose options do
    not overlap."""
    movers = sorted((k for k in order if scores[k] is not None and (scores[k][0] or scores[k][1] < base_worst)),
                    key=lambda k: (-scores[k][0], scores[k][1], order.index(k)))[:MOVERS]
    sentences = _sentences(rows, {k: o[k][1] for *_, o in rows for k in o})
    options = {k: o[k][0] for *_, o in rows for k in o}
    dtypes = list(dict.fromkeys(p.x.dtype for _, p, *_ in rows))
    tried = {}
    for dt in dtypes:
        for a, b, snt in fixed_pairs(target, dt):
            tried.setdefault((a, b), set()).add(snt)
    tried = {k: _one_sentence(v, dtypes) for k, v in tried.items()}
    for i, a in enumerate(movers):
        for b in movers[i + 1:]:
            if not set(options[a]) & set(options[b]) and (a, b) not in tried and (b, a) not in tried:
                tried[(a, b)] = f"{sentences[a]}, and {sentences[b]}"
    best = None
    for (a, b), snt in tried.items():
        sc = _score(rows, (a, b), target)
        if sc is not None and (best is None or (-sc[0], sc[1]) < (-best[1][0], best[1][1])):
            best = ((a, b, snt), sc)
    return best


def _one_sentence(variants: set, dtypes) -> str:
    """One sentence for a change whose sentence names x's dtype and differs between the dtypes of the
    failing cases: the first, with the dtype named as x's (the half dtypes listed)."""
    first = sorted(variants)[0]
    if len(variants) == 1:
        return first
    halves = [_dtname(d) for d in dtypes if d in S.HALF]
    for h in halves:
        if h in first:
            return first.replace(h, f"x's dtype ({' or '.join(halves)})")
    return first


def _sentences(rows, last: dict) -> dict:
    out = {}
    dtypes = list(dict.fromkeys(p.x.dtype for _, p, *_ in rows))
    for k in last:
        out[k] = _one_sentence({o[k][1] for *_, o in rows if k in o}, dtypes)
    return out


def _example(example, target) -> str:
    if example is None:
        return ""
    case, p, got, ref, alt = example
    dd = _dist(got, ref)
    if dd is None or not dd.numel():
        return ""
    i = int(dd.reshape(-1).argmax())
    idx = tuple(int(v) for v in np.unravel_index(i, tuple(got.shape)))
    g, r = float(got.detach().reshape(-1)[i]), float(ref.detach().reshape(-1)[i])
    return f"; e.g. case {case.id}, element {list(idx)}: the function gives {_fmt(g)}, {target.name} {_fmt(r)}"


def _big(v: int) -> str:
    return ">1e9" if v > 10**9 else str(v)


def residual_experiment(p: M.Probe, s_out, y, target) -> Finding:
    """Which tensor the function returned as new_residual, when it is not ``x + residual`` in x's dtype."""
    x, r = p.x, p.residual
    if not isinstance(s_out, torch.Tensor):
        return Finding("residual_type", f"new_residual is a {type(s_out).__name__}, not a tensor")
    want = x + r
    if s_out.dtype != x.dtype:
        f32 = x.float() + r.float()
        extra = " (the float32 sum, never rounded)" if s_out.shape == f32.shape and \
            bool(torch.equal(s_out.to(f32.dtype), f32)) else ""
        return Finding("residual_dtype", f"new_residual is {_dtname(s_out.dtype)}, where the contract is x + residual "
                                         f"rounded to x's dtype ({_dtname(x.dtype)}){extra}")
    for key, t, what in (("residual_old", r, "the residual it was given"), ("residual_x", x, "x"),
                         ("residual_y", y, "the normalized output")):
        if isinstance(t, torch.Tensor) and t.shape == s_out.shape and t.dtype == s_out.dtype and \
                bool((M.ulp_distance(s_out, t) == 0).all()):
            return Finding(key, f"new_residual is {what}, not x + residual")
    d = _dist(s_out, want)
    far = "?" if d is None else _big(int(d.max()))
    return Finding("residual_values", f"new_residual is not x + residual rounded to x's dtype (up to {far} ulp away)")


def grad_experiment(fn, target, case, call) -> Finding | None:
    """Which gradient is wrong on a case, and whether a constant factor or a backward that treats the
    statistic as a constant explains it. ``call(x, weight) -> y`` runs the function."""
    from .calling import grad_names, reference_grads

    p = case.probe
    x = p.x.detach().clone().requires_grad_(True)
    w = None if p.weight is None else p.weight.detach().clone().requires_grad_(True)
    try:
        y, params = call(x, w)
    except Exception:
        return None
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        return None
    g = torch.Generator().manual_seed(11)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(y.dtype)
    got = torch.autograd.grad(y, [x] + params, dy, allow_unused=True)
    refs = reference_grads(target, p, dy)
    names = [f"d{n}" for n in grad_names(target)][: len(got)]
    worst_name, worst_ratio, worst = None, 0.0, None
    for name, t, (ref, bound) in zip(names, got, refs):
        if ref is None or t is None:
            continue
        err = np.abs(t.detach().double().numpy() - ref)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(err == 0, 0.0, err / bound)
        ratio = float(np.nanmax(r)) if r.size else 0.0
        if np.isnan(r).any():
            ratio = math.inf
        if ratio > worst_ratio:
            worst_name, worst_ratio, worst = name, ratio, (t.detach().double().numpy(), ref)
    if worst_name is None or worst_ratio <= 1:
        return None
    what = {"dx": "the gradient of x", "dweight": "the gradient of the weight", "dbias": "the gradient of the bias",
            "dgate": "the gradient of the gate"}[worst_name]
    t, ref = worst
    mask = np.abs(ref) > 1e-6 * max(np.abs(ref).max(), 1e-300)
    if mask.any():
        q = t[mask] / ref[mask]
        c = float(np.median(q))
        if abs(c - 1) > 1e-2 and np.allclose(q, c, rtol=2e-2):
            return Finding(f"{worst_name}_scaled", f"{what} is {c:.4g} times the right one",
                           f"{worst_ratio:.3g} times its float64 bound on case {case.id}")
    if worst_name == "dx" and target.kind == "rms":
        xd = p.x.detach().double()
        gain = p.effective_gain()
        gd = (dy.double() if gain is None else dy.double() * gain.double())
        rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + p.eps)
        no_proj = (gd * rstd).numpy()  # the backward with rstd held constant: no term through the statistic
        if np.allclose(t, no_proj, rtol=5e-2, atol=1e-3 * np.abs(no_proj).max()):
            return Finding("dx_no_stat_term", f"{what} misses the term through the statistic (the backward treats "
                                              "rsqrt(mean(x^2) + eps) as a constant)",
                           f"{worst_ratio:.3g} times its float64 bound on case {case.id}")
    return Finding(f"{worst_name}_wrong", f"{what} is wrong",
                   f"{worst_ratio:.3g} times its float64 bound on case {case.id}")


# ------------------------------------------------------------------------------------------ the whole report

def _rerun(fn_name: str, args: str, case) -> str:
    p = case.probe
    w = "None" if p.weight is None else repr(M.dtype_name(p.weight.dtype))
    if case.layout == "wide":  # the default run holds the wide probes: rerun it in this dtype pair
        return (f"check_norm({fn_name}, {args}, dtypes=({M.dtype_name(p.x.dtype)!r},), weight_dtypes=({w},))"
                .replace(", weight_dtypes=(None,)", ""))
    return (f"check_norm({fn_name}, {args}, dtypes=({M.dtype_name(p.x.dtype)!r},), weight_dtypes=({w},), "
            f"widths=({p.x.shape[-1]},), scales=({p.scale:g},))").replace("weight_dtypes=(None,), ", "")


def _is_value_failure(r) -> bool:
    if r.problem is not None:
        return r.problem.startswith("NaN or inf")
    return r.within_bound is False or (r.bits_required and r.identical is False)


def explain(fn, report, target, cases, residual: bool, *, fn_name: str, args: str, use_hf=True) -> list[Finding]:
    """The findings for a failing report, the first the most basic: an exception, an input changed in place,
    two calls that disagree, a wrong shape or dtype, the residual contract, the values, the gradients. Each
    kind of failure gives at most one finding; an empty list when every case passes."""
    from .calling import call, grad_call, truth

    by_id = {c.id: c for c in cases}
    fails = [r for r in report.failures if r.case in by_id]
    found: list[Finding] = []

    def first(pred):
        return next((r for r in fails if r.problem and pred(r.problem)), None)

    def add(key, sentence, r, evidence=""):
        found.append(Finding(key, sentence, evidence, _rerun(fn_name, args, by_id[r.case])))

    r = first(lambda s: s.startswith(("raised", "backward raised")))
    if r:
        add("raises", f"the function {r.problem}", r, f"case {r.case}")
    r = first(lambda s: s == "changed its input x in place")
    if r:
        add("in_place", "the input x is modified in place (it differs after the call)", r, f"case {r.case}")
    r = first(lambda s: s.startswith(("non-deterministic", "not deterministic")))
    if r:
        add("nondeterministic", "two calls on the same input disagree (non-deterministic)", r,
            r.problem.split(": ", 1)[1] + f", case {r.case}")
    r = first(lambda s: s.startswith("not batch-invariant"))
    if r:
        add("batch_variant", "a row's result depends on the batch around it (not batch-invariant"
            + (", in its gradient)" if "gradient" in r.problem else ")"), r,
            r.problem.split(": ", 1)[1] + f", case {r.case}")
    r = first(lambda s: s.startswith("returned shape"))
    if r:
        add("shape", f"the output has the wrong shape: it {r.problem}", r, f"case {r.case}")
    r = first(lambda s: s.startswith("returned") and "where the model returns" in s)
    if r:
        c = by_id[r.case]
        got_dt, want_dt = r.problem.split()[1], r.problem.split()[-1]
        whose = "x's dtype" if want_dt == _dtname(c.probe.x.dtype) else "the weight's promoted dtype"
        ev = f"case {r.case}"
        try:
            with torch.no_grad():
                out = call(fn, c.probe, target, residual)
                out = out[0] if residual else out
                ref = truth(target, c.probe, residual, use_hf)[0]
            d = _dist(out.to(ref.dtype), ref)
            if d is not None and not bool(d.any()):
                ev += f"; rounded to {want_dt} it equals {target.name} bit for bit"
        except Exception:  # the evidence is optional; the finding stands on the dtype alone
            pass
        add("output_dtype", f"the output is {got_dt} where {target.name} returns {whose} ({want_dt})", r, ev)
    r = first(lambda s: "residual" in s or s.startswith("must return"))
    if r:
        c = by_id[r.case]
        if r.problem.startswith("must return"):
            add("residual_return", r.problem, r)
        else:
            with torch.no_grad():
                out = call(fn, c.probe, target, residual)
            f = residual_experiment(c.probe, out[1], out[0], target)
            add(f.key, f.sentence, r, f"case {r.case}")
    values = [r for r in fails if _is_value_failure(r)]
    if values:
        rows = []
        # the experiment runs on the small failing cases and at most three wide ones (the narrowest): its
        # cost grows with every element it replays twenty ways
        small = [r for r in values if by_id[r.case].layout != "wide"]
        wide = sorted((r for r in values if by_id[r.case].layout == "wide"), key=lambda r: by_id[r.case].probe.x.numel())
        for r in small + wide[:3]:
            c = by_id[r.case]
            p = c.probe
            with torch.no_grad():
                out = call(fn, p, target, residual)
                out = out[0] if residual and isinstance(out, (tuple, list)) else out
                ref, s, _ = truth(target, p, residual, use_hf)
            q = p if s is None else M.Probe(s, p.weight, p.bias, p.eps, p.label, p.gain, None, p.scale)
            rows.append((c, q, out, ref))
        f = value_experiment(rows, target)
        if f is not None and len(rows) < len(values):
            f.evidence += f"; the experiment ran on {len(rows)} of the {len(values)} failing cases"
        worst = max(values, key=lambda r: (r.max_ulp or 0))
        if f is None and all(by_id[r.case].layout in ("strided", "3-d") for r in values):
            add("layout", "the function gives other bits on a non-contiguous or 3-d input than on the same values "
                          "in a contiguous 2-d tensor (it depends on the memory layout)", worst,
                f"{len(values)} failing cases, all {', '.join(sorted({by_id[r.case].layout for r in values}))}")
        elif f is None and all(r.problem is None and r.within_bound for r in values):
            add("bits_within_bound", f"the function differs from {target.name}'s module in its last bits only, within "
                                     "the float64 bound (it adds or rounds in another order); pass bits=False "
                                     "(--no-bits) to accept it", worst,
                f"{len(values)} failing cases, at most {worst.max_ulp} ulp from the module")
        elif f is None:
            desc = report.match.description if report.match is not None else "differs from every catalog order"
            add("unexplained", f"no change of {target.name}'s order, alone or in a pair, reproduces the function; it {desc}",
                worst, f"{len(values)} failing cases")
        else:
            ex = next((r for r in values if f.evidence and f"case {r.case}," in f.evidence), worst)
            add(f.key, f.sentence, ex, f.evidence)
    r = first(lambda s: s.startswith("no gradient"))
    if r:
        add("missing_grad", r.problem.split(" (")[0].split(";")[0], r, f"case {r.case}")
    grads = [r for r in fails if r.problem is None and r.grad_ratio is not None and r.grad_ratio > 1]
    if grads:
        r = max(grads, key=lambda r: r.grad_ratio)
        c = by_id[r.case]
        f = grad_experiment(fn, target, c, grad_call(fn, c.probe, target, residual))
        if f is not None:
            add(f.key, f.sentence, r, f.evidence)
        else:
            add("grad", "a gradient differs from float64 beyond its bound", r,
                f"{r.grad_ratio:.3g} times the bound on case {r.case}")
    return found
