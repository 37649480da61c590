"""Check your own norm against a model by name: bits against the model's module, ulps against the float64
oracle, gradients, and a diagnosis naming the convention the function does compute.

    from reference_impl.check import check_norm
    check_norm(my_rms_norm, model="gemma3_text")   # raises NormCheckFailed (an AssertionError) with a table

Importing this package imports torch and numpy only; ``transformers`` (the ``reference_impl[hf]`` extra) is
imported when a check builds the model's own module, and without it the bits are compared with the
catalog's replay of the module's order (the report says so).
"""
from __future__ import annotations

from .kit import Case, call, check_norm, compare, diagnose, plan, run_case
from .matching import Match, Probe, candidates, make_probes, match, ulp_distance
from .models import Target, resolve
from .report import CaseResult, NormCheckFailed, Report


def norm_cases(model=None, **kwargs) -> list:
    """The cases of a check, for ``pytest.mark.parametrize``: each carries its target, so
    ``check_case(fn, case)`` runs it. Keyword arguments as :func:`check_norm` (convention, eps, dtypes,
    weight_dtypes, widths, scales, residual, device, norm)."""
    from .kit import check_device

    from .options import target_for

    target = target_for(model, kwargs.pop("convention", None), kwargs.pop("eps", None), kwargs.pop("norm", None))
    if "device" in kwargs:
        kwargs["device"] = check_device(kwargs["device"])
    residual = kwargs.get("residual", False)
    cases = plan(target, **kwargs)
    for c in cases:
        c.target, c.residual = target, residual
    return cases


def check_case(fn, case, *, grads=True, bits=True, batch_invariant=False) -> CaseResult:
    """Run one case of :func:`norm_cases`; raise :class:`NormCheckFailed` with its table row if it fails."""
    res = run_case(fn, case.target, case, grads=grads, bits=bits, residual=case.residual,
                   batch_invariant=batch_invariant)
    if not res.ok:
        from .kit import _fn_name

        raise NormCheckFailed(Report(_fn_name(fn), case.target, "the model's module", [res]))
    return res


__all__ = ["check_norm", "diagnose", "norm_cases", "check_case", "Report", "CaseResult", "NormCheckFailed",
           "Target", "resolve", "Case", "plan", "run_case", "call", "compare", "Match", "Probe", "candidates",
           "make_probes", "match", "ulp_distance"]
