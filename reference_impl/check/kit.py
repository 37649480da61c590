"""Check a norm function or module against a model by name: :func:`check_norm`, :func:`diagnose`, and the
pieces the pytest plugin and the conformance study share (:func:`plan`, :func:`run_case`, :func:`compare`).

Calling protocol of the function under test (``fn``), by kind of norm:

- RMSNorm (also QK-norm: x is ``(..., heads, head_dim)``): ``fn(x, weight, eps) -> y``;
- LayerNorm: ``fn(x, weight, bias, eps) -> y``;
- L2 norm (no gain): ``fn(x, eps) -> y``;
- fused residual add + RMSNorm (``residual=True``): ``fn(x, residual, weight, eps) -> (y, new_residual)``,
  where ``new_residual`` must equal ``x + residual`` rounded to x's dtype, bit for bit, and ``y`` the norm
  of it.

``x`` is ``(..., d)`` (2-d, 3-d, or a strided view), ``weight`` ``(d,)`` is the weight as the model class
stores it (the gain ``w``, or Gemma's offset from one, whose gain is ``1 + w``), in bfloat16 or float32;
``y`` must have x's shape and the dtype the model's module returns. An ``nn.Module`` is called as
``module(x)`` (``module(x, residual)``) after its ``weight``/``bias`` are replaced by the probe's and its
``eps``/``variance_epsilon``/``epsilon`` attribute set to the model's eps.
"""
from __future__ import annotations

import math
import traceback
from dataclasses import dataclass

import numpy as np
import torch

from . import matching as M
from .calling import call, grad_call, grad_names, module_for, reference_grads, truth  # noqa: F401 (the kit's API)
from .models import HF_EXTRA, Target
from .options import _dtype, check_device, target_for  # noqa: F401 (check_device: part of the kit's API)
from .report import CaseResult, NormCheckFailed, Report

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
WIDTHS = (33, 64, 127)
SCALES = (1e-4, 1.0, 300.0)
_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23, torch.float64: 52}


@dataclass
class Case:
    """One input of a check: the probe, its layout ("contiguous", "strided", "3-d") and an id for pytest."""

    probe: M.Probe
    layout: str
    id: str

    def __str__(self) -> str:
        return self.id


def plan(target: Target, dtypes=DTYPES, weight_dtypes=None, widths=None, scales=SCALES, residual=False,
         device="cpu", seed=0, wide=None) -> list[Case]:
    """Every input of a check: each x dtype with each gain dtype (default: x's own half dtype, as a
    checkpoint stores it, and float32; ``"x"``: the gain in x's dtype), odd and even widths, each scale;
    plus, per dtype pair, x as a strided view and as a 3-d ``(2, 2, d)`` tensor (a QK-norm's
    ``(tokens, heads, head_dim)``). ``widths=None``: the small widths :data:`WIDTHS`, and then ``wide``
    (default: when ``widths`` is not given; ``widths=WIDTHS`` gives the small probes alone) adds the wide
    probes of :mod:`reference_impl.check.probes`: widths 1 to 8192 and the model's own sizes, 64 rows each at
    scales from below eps to the overflow edge."""
    from . import probes as P

    wide = (widths is None) if wide is None else wide
    widths = WIDTHS if widths is None else widths
    cases = []
    bias = target.bias
    gated = target.kind == "gated_rms"
    if isinstance(weight_dtypes, str):  # "x": the gain in x's dtype; "fp32"; "bf16,fp32"
        weight_dtypes = [w.strip() for w in weight_dtypes.split(",") if w.strip()]
    if isinstance(dtypes, str):
        dtypes = [d.strip() for d in dtypes.split(",") if d.strip()]
    dtypes = list(dtypes)
    if not dtypes:
        raise ValueError("dtypes is empty: give at least one of bf16, fp16, fp32, fp64")
    if weight_dtypes is not None and not list(weight_dtypes):
        raise ValueError("weight_dtypes is empty: give 'x' (the gain in x's dtype) or dtypes such as bf16, fp32")
    for dt in map(_dtype, dtypes):
        wdts = [dt if w == "x" else _dtype(w) for w in weight_dtypes] if weight_dtypes is not None else \
            ([dt, torch.float32] if dt in (torch.float16, torch.bfloat16) else [dt])
        wdts = list(dict.fromkeys(wdts))
        for wdt in wdts:
            kw = {"gain": target.gain, "bias": bias, "eps": target.eps, "residual": residual, "gate": gated}
            probes = M.make_probes(widths, [dt], [wdt], scales=scales, seed=seed, **kw)
            probes += M.make_probes(widths[:1], [dt], [wdt], scales=(1.0,), seed=seed + 1, noncontiguous=True, **kw)
            three = M.make_probes(widths[-1:], [dt], [wdt], scales=(1.0,), seed=seed + 2, **kw)
            big = P.wide_probes(target, dt, wdt, residual=residual, gated=gated, seed=seed) if wide else []
            for p in three:
                p.x = p.x.reshape(2, 2, -1)
                p.residual = None if p.residual is None else p.residual.reshape(2, 2, -1)
                p.gate = None if p.gate is None else p.gate.reshape(2, 2, -1)
                p.label = p.label.replace("(4,", "(2, 2,")
            for p in probes + three + big:
                if device != "cpu":
                    p.x = p.x.to(device)
                    p.weight = None if p.weight is None else p.weight.to(device)
                    p.bias = None if p.bias is None else p.bias.to(device)
                    p.residual = None if p.residual is None else p.residual.to(device)
                    p.gate = None if p.gate is None else p.gate.to(device)
                layout = "strided" if not p.x.is_contiguous() else ("3-d" if p.x.dim() == 3 else "contiguous")
                layout = P.LAYOUT if any(p is q for q in big) else layout
                wname = "none" if p.weight is None else M.dtype_name(p.weight.dtype)
                cid = f"{M.dtype_name(dt)}-w{wname}-{'x'.join(map(str, p.x.shape))}-" + \
                    ("rows" if layout == P.LAYOUT else f"s{p.scale:g}") + ("-strided" if layout == "strided" else "")
                cases.append(Case(p, layout, cid))
    return cases


# ------------------------------------------------------------------------------------------ calling

def _fn_name(fn) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


# ------------------------------------------------------------------------------------------ measuring

def ulp(v: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """The spacing of ``dtype`` at |v| (float64 array), with the subnormal floor."""
    a = np.maximum(np.abs(v), torch.finfo(dtype).tiny)
    return np.exp2(np.floor(np.log2(a)) - _BITS[dtype])


def _spec_params(target: Target) -> tuple:
    from ..norms import CATALOG

    spec = CATALOG[target.entry]
    params = {**spec.params, "eps": target.eps}
    if "eps_placement" in params:
        params["eps_placement"] = target.placement
    return spec, params


def oracle_and_bound(target: Target, x, weight, bias, gate=None):
    """The float64 output of the target's math and the derived bound per element (tolerances.py)."""
    spec, params = _spec_params(target)
    ins = {"x": x}
    if target.kind in ("rms", "layer", "gated_rms"):
        ins["weight"] = weight
    if target.kind == "layer":
        ins["bias"] = bias
    if target.kind == "gated_rms":
        from .roles import gated_params

        ins["gate"] = gate
        params = {k: v for k, v in gated_params(target).items() if k in params or k == "activation"}
    ins = {k: (None if v is None else v.detach().cpu()) for k, v in ins.items()}
    exact = spec.oracle(**{k: (None if v is None else v.double().numpy()) for k, v in ins.items()}, **params)
    bound = spec.bound(ins, params)
    return np.asarray(exact, np.float64), np.asarray(bound, np.float64)


def compare(got: torch.Tensor, ref: torch.Tensor, exact: np.ndarray | None = None, bound=None) -> dict:
    """Bits of ``got`` against ``ref`` and its error against the float64 ``exact``, in ulps of the output
    dtype: ``identical``, ``fraction_different``, ``max_ulp``, ``max_ulp_vs_oracle`` (and with ``bound``, at
    the element whose error uses the largest share of its bound: ``worst_err_ulp`` and ``bound_ulp``, its
    error and its bound in ulps; ``within_bound``: every element within its bound).
    When the dtypes differ ``got`` is rounded to ``ref``'s dtype and ``note`` says so (the conformance
    study's rule)."""
    if got.shape != ref.shape:
        raise ValueError(f"shape {tuple(got.shape)} differs from the reference's {tuple(ref.shape)}")
    out = {}
    if got.dtype != ref.dtype:
        out["note"] = f"returned {str(got.dtype).replace('torch.', '')}, rounded to {str(ref.dtype).replace('torch.', '')}"
        got = got.to(ref.dtype)
    got, ref = got.detach().cpu(), ref.detach().cpu()
    dist = M.ulp_distance(got, ref)
    res = {"identical": bool(torch.equal(got, ref) or bool((dist == 0).all())),
           "fraction_different": float((dist > 0).double().mean()) if dist.numel() else 0.0,
           "max_ulp": int(dist.max()) if dist.numel() else 0}
    if exact is not None:
        sp = ulp(exact, ref.dtype)
        err = np.abs(got.double().numpy() - exact) / sp
        res["max_ulp_vs_oracle"] = float(err.max()) if err.size else 0.0
        if bound is not None:  # at the element whose error uses most of its bound: err and bound there
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(err == 0, 0.0, err / (bound / sp))
                res["within_bound"] = bool(np.all(np.abs(got.double().numpy() - exact) <= bound))
            i = int(np.nanargmax(ratio)) if ratio.size and not np.isnan(ratio).all() else 0
            res["worst_err_ulp"] = float(err.reshape(-1)[i]) if err.size else 0.0
            res["bound_ulp"] = float((bound / sp).reshape(-1)[i]) if err.size else 0.0
    res.update(out)
    return res


class _BackwardError(Exception):
    """The function's own backward raised."""


def _grads(fn, target: Target, p: M.Probe, residual: bool) -> tuple[float | None, str | None, str | None]:
    """The largest gradient error over its bound (dx, the weight's and the bias's gradients), against
    float64: ``(ratio, note, problem)``; a gradient that does not reach an input is a problem."""
    if residual or target.kind not in ("rms", "layer", "gated_rms"):
        return None, "gradients are checked for RMSNorm, LayerNorm and gated RMSNorm only", None
    x = p.x.detach().clone().requires_grad_(True)
    w = None if p.weight is None else p.weight.detach().clone().requires_grad_(True)
    try:
        y, params = grad_call(fn, p, target, residual)(x, w)
    except (Exception, SystemExit) as exc:  # the forward with inputs that require grad
        raise _BackwardError(f"(forward with inputs that require grad) {type(exc).__name__}: {exc}") from exc
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        return None, None, ("no gradient: the output does not require grad (a forward-only function, or one that "
                            "detaches its output); pass grads=False (--no-grads) to check the forward only")
    g = torch.Generator().manual_seed(11)
    dy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(y.dtype).to(y.device)
    try:
        got = torch.autograd.grad(y, [x] + params, dy, allow_unused=True)
    except Exception as exc:  # the function's backward
        raise _BackwardError(f"{type(exc).__name__}: {exc}") from exc
    worst, missing = 0.0, []
    names = grad_names(target)
    for name, t, (ref, b) in zip(names, got, reference_grads(target, p, dy)):
        if ref is None:
            continue
        if t is None:
            missing.append(name)
            continue
        err = np.abs(t.detach().cpu().double().numpy() - ref)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(err == 0, 0.0, err / b)
        worst = max(worst, float(np.nanmax(r)) if r.size else 0.0, math.inf if np.isnan(r).any() else 0.0)
    if missing:
        return worst, None, ("no gradient reaches " + ", ".join(f"the {n}" if n != "x" else "x" for n in missing)
                             + " (detached, or not used through autograd)")
    return worst, None, None


def run_case(fn, target: Target, case: Case, *, grads=True, bits=True, use_hf=True, residual=False,
             strict_dtype=True, batch_invariant=False) -> CaseResult:
    """One case: call ``fn`` twice, compare with the truth (bits) and the float64 oracle (bound), then the
    gradients. Problems (an exception, a wrong shape or dtype, NaN where the truth is finite, a changed
    input, two calls that disagree) are recorded in ``problem`` rather than raised."""
    p = case.probe
    res = CaseResult(case.id, M.dtype_name(p.x.dtype), "none" if p.weight is None else M.dtype_name(p.weight.dtype),
                     tuple(p.x.shape), p.scale, case.layout, bits_required=bits)
    try:
        ref, ref_s, _ = truth(target, p, residual, use_hf)
    except (TypeError, ValueError, RuntimeError) as exc:
        res.not_applicable = f"the model's norm rejects this input ({type(exc).__name__}: {exc})"
        return res
    x_before = p.x.clone()
    try:
        with torch.no_grad():
            out = call(fn, p, target, residual)
            again = call(fn, p, target, residual)
    except (Exception, SystemExit) as exc:  # the function's own error (or exit), with the input that caused it
        res.problem = (f"raised SystemExit: the function called sys.exit({exc.code!r})" if isinstance(exc, SystemExit)
                       else f"raised {type(exc).__name__}: {exc}")
        res.notes.append("".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)))
        return res
    if not bool((M.ulp_distance(p.x, x_before) == 0).all()):
        res.problem = "changed its input x in place"
        return res
    if residual:
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            res.problem = f"must return (y, new_residual) with residual=True, got {type(out).__name__}"
            return res
        (out, s_out), (again, _) = out, again
        if not isinstance(s_out, torch.Tensor) or s_out.shape != ref_s.shape or s_out.dtype != ref_s.dtype or \
                not bool((M.ulp_distance(s_out, ref_s) == 0).all()):
            res.problem = "new_residual is not x + residual rounded to x's dtype, bit for bit (the residual contract)"
            return res
    if not isinstance(out, torch.Tensor):
        res.problem = f"returned {type(out).__name__}, not a tensor"
        return res
    if out.layout != torch.strided or out.is_meta or out.device != ref.device:
        what = "a meta tensor (no values)" if out.is_meta else (
            f"a {str(out.layout).replace('torch.', '')} tensor" if out.layout != torch.strided else f"a tensor on {out.device}")
        res.problem = f"returned {what}; the norm must return a dense tensor on {ref.device}, as x is"
        return res
    if out.shape != ref.shape:
        res.problem = f"returned shape {tuple(out.shape)}, expected {tuple(ref.shape)} (x's shape)"
        return res
    if out.dtype != ref.dtype:
        if strict_dtype or out.dtype not in M._INT:
            res.problem = (f"returned {str(out.dtype).replace('torch.', '')} where the model returns "
                           f"{str(ref.dtype).replace('torch.', '')}")
            return res
        res.notes.append(f"returned {out.dtype}; the truth was rounded to it")
        ref = ref.to(out.dtype)
    same = M.ulp_distance(out, again)
    if bool((same > 0).any()):
        res.problem = (f"non-deterministic: two calls on the same input differ in {int((same > 0).sum())} of "
                       f"{same.numel()} elements")
        return res
    x_for_bound = ref_s if residual else p.x
    exact, bound = oracle_and_bound(target, x_for_bound, p.weight, p.bias, p.gate)
    bad_nan = (~torch.isfinite(out.detach().cpu())) & torch.from_numpy(np.isfinite(exact)) & \
        torch.isfinite(ref.detach().cpu())
    if bool(bad_nan.any()):
        idx = tuple(int(i) for i in bad_nan.nonzero()[0])
        res.problem = (f"NaN or inf in {int(bad_nan.sum())} elements where the model's output is finite "
                       f"(first at index {idx})")
        return res
    c = compare(out, ref, exact, bound)
    res.identical, res.fraction_different, res.max_ulp = c["identical"], c["fraction_different"], c["max_ulp"]
    res.err_ulp, res.within_bound = c["max_ulp_vs_oracle"], c["within_bound"]
    res.worst_err_ulp, res.bound_ulp = c["worst_err_ulp"], c["bound_ulp"]
    if grads:
        try:
            res.grad_ratio, res.grad_note, problem = _grads(fn, target, p, residual)
            res.problem = res.problem or problem
        except _BackwardError as exc:
            res.problem = f"backward raised {exc}"
    else:
        res.grad_note = "forward-only: gradients not checked"
    if batch_invariant and res.problem is None:
        from .consistency import batch_invariance

        try:
            res.problem = batch_invariance(fn, target, case, residual, grads)
        except (Exception, SystemExit) as exc:
            res.problem = f"raised {type(exc).__name__} in the batch-invariance runs: {exc}"
    return res


# ------------------------------------------------------------------------------------------ the API

def _hf_available(target: Target, use_hf) -> tuple[bool, str | None]:
    if not use_hf or not target.module:
        return False, None
    if not target.module.startswith("transformers"):
        return True, None
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False, f"transformers is not installed: bits are compared with the catalog's replay; {HF_EXTRA}"
    return True, None


def diagnose(fn, model=None, *, convention=None, eps=None, dtypes=DTYPES, weight_dtypes=None, widths=WIDTHS,
             residual=False, device="cpu", norm=None):
    """Which catalog convention (and eps placement) ``fn`` equals bit for bit on the kit's inputs, as a
    :class:`~reference_impl.check.matching.Match`; ``model``/``convention`` decide the kind, the gain storage
    and eps, and the model's own convention is preferred when several match."""
    target = target_for(model, convention, eps, norm)
    device = check_device(device)
    cases = [c for c in plan(target, dtypes, weight_dtypes, widths, residual=residual, device=device)
             if c.layout == "contiguous"]
    kind = "fused_add_rms" if residual else target.kind
    prefer = _prefer(target, residual)
    return M.match(lambda p: call(fn, p, target, residual), [c.probe for c in cases], kind, prefer=prefer)


def check_norm(fn, model=None, *, convention=None, eps=None, dtypes=DTYPES, weight_dtypes=None, device="cpu",
               grads=True, bits=True, residual=False, widths=None, scales=SCALES, use_hf=True, strict_dtype=True,
               batch_invariant=False, norm=None, raise_on_failure=True) -> Report:
    """Check ``fn`` (a function or an ``nn.Module``, called as the module docstring says) against a model's
    norm, and return a :class:`~reference_impl.check.report.Report`; raise
    :class:`~reference_impl.check.report.NormCheckFailed` (an AssertionError) with the table and a diagnosis
    when a case fails.

    ``model``: a transformers model type ("gemma3_text", "qwen3") or family name; its convention, eps and
    gain storage come from the census index (or the catalog's families). ``convention``: a catalog entry
    ("rms_norm.gemma") or casting order, overriding the model's. ``eps``: overrides the model's eps.
    ``dtypes``: x dtypes; ``weight_dtypes``: gain dtypes (default per x dtype: its own half dtype and
    float32; ``"x"``: the gain in x's dtype). ``bits``: require bit-identity with the model's module (else
    only the float64 bound). ``grads``: compare autograd gradients (through a module's own parameters) with
    float64 within the derived bound; a gradient that does not reach x, the weight or the bias fails.
    ``residual``: ``fn`` is a fused residual add + norm. ``strict_dtype``: a result in another dtype than
    the module's fails. ``widths``/``scales``: the probes' row widths and the scales of x (``widths`` not
    given: the small probes and the wide ones).
    ``batch_invariant``: also require, on each contiguous case, the same bits for a row (and its gradient)
    alone, at any position of batches of other sizes and between padding rows, and for repeated calls
    (:mod:`reference_impl.check.consistency`). ``norm``: one norm of the model, by class
    ("Qwen3NextRMSNormGated") or role ("q", "k", "value", "latent", "inner output", "final"); a gated norm
    is called as ``fn(x, weight, gate, eps)`` (:mod:`reference_impl.check.roles`).
    The diagnosis of a failing check is an experiment (:mod:`reference_impl.check.diagnosis`).
    """
    from .diagnosis import explain

    target = target_for(model, convention, eps, norm)
    if not callable(fn):
        raise TypeError(f"fn must be a function or an nn.Module, got {type(fn).__name__}")
    device = check_device(device)
    hf, note = _hf_available(target, use_hf)
    cases = plan(target, dtypes, weight_dtypes, widths, scales=scales, residual=residual, device=device)
    results = [run_case(fn, target, c, grads=grads, bits=bits, use_hf=hf, residual=residual,
                        strict_dtype=strict_dtype, batch_invariant=batch_invariant) for c in cases]
    _, _, what = truth(target, cases[0].probe, residual, hf)
    report = Report(_fn_name(fn), target, what, results)
    from .probes import coverage

    report.notes.append(coverage(cases))
    if note:
        report.notes.append(note)
    if not target.source.startswith("the census"):
        report.notes.append(f"{target.name}: facts from {target.source}")
    broken = {r.case for r in results if r.problem and (r.problem.startswith(("raised", "returned", "must return"))
                                                         or "residual" in r.problem)}
    usable = [c.probe for c in cases if c.layout == "contiguous" and c.id not in broken]
    if usable and len(broken) < len(cases):
        kind = "fused_add_rms" if residual else target.kind
        prefer = _prefer(target, residual)
        try:
            report.match = M.match(lambda p: call(fn, p, target, residual), usable, kind, prefer=prefer)
        except (Exception, SystemExit) as exc:
            report.notes.append(f"no diagnosis: the function raised {type(exc).__name__} on an input: {exc}")
    if report.ok:
        report.diagnosis = _diagnosis(report, target, residual)
    else:
        args = ", ".join(f"{k}={v!r}" for k, v in (("model", model), ("norm", norm), ("convention", convention),
                                                   ("eps", eps),
                                                   ("residual", residual or None), ("bits", None if bits else False),
                                                   ("grads", None if grads else False),
                                                   ("batch_invariant", batch_invariant or None))
                         if v is not None)
        try:
            report.findings = explain(fn, report, target, cases, residual, fn_name=_fn_name(fn), args=args,
                                      use_hf=hf)
        except (Exception, SystemExit) as exc:  # the diagnosis must not hide the verdict: keep the table
            report.notes.append(f"no diagnosis: {type(exc).__name__}: {exc}")
            report.findings = []
        m = report.match
        if m is not None and m.matched and report.findings and report.findings[0].key not in _NOT_VALUES:
            f = report.findings[0]
            f.evidence += f"; on the contiguous inputs the function is the catalog's {m.matched}: it {m.description}"
        report.diagnosis = "; also ".join(f.text() if i == 0 else f.sentence for i, f in enumerate(report.findings))
    for n in sorted({r.grad_note for r in results if r.grad_note}):
        report.notes.append(n if n.startswith("forward-only") else f"gradients: {n}")
    _bits_hint(report)
    if raise_on_failure and not report.ok:
        raise NormCheckFailed(report)
    return report


_NOT_VALUES = ("raises", "in_place", "nondeterministic", "batch_variant", "shape", "output_dtype", "missing_grad")


def _bits_hint(report: Report) -> None:
    """A check that fails on bits alone, every case within the float64 bound, says so and how to accept it."""
    fails = report.failures
    if fails and all(r.problem is None and r.within_bound and r.identical is False and
                     (r.grad_ratio is None or r.grad_ratio <= 1) for r in fails):
        report.notes.append(f"every failing case differs from {report.truth} in its bits only: its error is within "
                            "the float64 bound (err ulp <= bound); to accept an accurate implementation that is not "
                            "bit-identical, pass bits=False (--no-bits, --norm-no-bits)")


def _want(target: Target, residual: bool) -> str:
    """The matching candidate that is the target's own order."""
    if residual:
        return f"fused_add_rms_norm.{target.convention}"
    return target.convention if target.kind == "gated_rms" else target.candidate


def _prefer(target: Target, residual: bool) -> list[str]:
    """The model's own convention first, then its other eps placement (so a tie names the family)."""
    if residual:
        return [f"fused_add_rms_norm.{target.convention}"]
    names = [_want(target, residual)]
    if target.kind == "rms":
        names += [c.name for c in M.candidate_list("rms") if c.convention == target.convention and not c.folded]
    return names


def _diagnosis(report: Report, target: Target, residual: bool) -> str:
    m = report.match
    if m is None:
        return ""
    expected = M.Candidate(target.candidate, target.entry, target.convention, target.placement).describe()
    want = _want(target, residual)
    if target.kind == "gated_rms":
        expected = M.describe(want, "gated_rms")
    if m.matched == want or want in m.all_matched:
        return f"the function equals {want} bit for bit: it {expected}, as {target.name} does"
    if report.ok:  # bits not required: within the float64 bound, not the module's bits
        return (f"every case is within the float64 bound (bits not required); it is not {want} bit for bit: the "
                f"function {m.description}")
    return f"the function {m.description}; {target.name} {expected} ({want})"
