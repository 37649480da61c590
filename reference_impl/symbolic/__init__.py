"""The symbolic registry: every formula on the site, as a SymPy expression with a stable id.

Three modules; each name below is imported from the module that defines it, so ``S.x``, ``S.registry()``
or ``S.count_ops`` lead to their definition:

- :mod:`reference_impl.symbolic.algebra`: symbols, definitions, the two sum rules, proofs, :class:`Formula`;
- :mod:`reference_impl.symbolic.formulas`: :func:`registry`, :func:`get`, and the counts that read the
  registry's formulas (:func:`backward_ops`, :func:`bytes_per_row`);
- :mod:`reference_impl.symbolic.costs`: explicit Jacobians at fixed d, operation counts per row.
"""
from __future__ import annotations

import sympy as sp

from . import algebra, costs, formulas
from .algebra import (alpha, beta, c, d, dy, eps, expand_defs, FEATURE_ARRAYS, Formula, g, gamma,
                      i, j, k, l, latex, LATEX_NAMES, LayerNorm, LN_DEFS, LN_Y, m, MS, ms, MU, mu,
                      normalize, NUMERIC_ARGS, one, PMS, PRMS_DEFS, PRMS_Y, PRMSNorm, prove_equal,
                      r, R_LN, R_RMS, RMS, RMS_DEFS, RMS_Y, RMSNorm, ROW_ARRAYS, s, sum_over,
                      unfold, VAR, var, vjp, x, xhat)
from .costs import (count_ops, ELEM_BYTES, equal_explicit, explicit_jacobian, forward_ops,
                    instantiate, OP_KINDS)
from .formulas import (backward_ops, bytes_per_row, get, registry, STATS_SAVED)
from .algebra import _zero_based  # noqa: F401  (the tests check the index shift on its own)

__all__ = ["sp", "algebra", "costs", "formulas",
           "alpha", "beta", "c", "d", "dy", "eps", "expand_defs", "FEATURE_ARRAYS", "Formula", "g",
           "gamma", "i", "j", "k", "l", "latex", "LATEX_NAMES", "LayerNorm", "LN_DEFS", "LN_Y",
           "m", "MS", "ms", "MU", "mu", "normalize", "NUMERIC_ARGS", "one", "PMS", "PRMS_DEFS",
           "PRMS_Y", "PRMSNorm", "prove_equal", "r", "R_LN", "R_RMS", "RMS", "RMS_DEFS", "RMS_Y",
           "RMSNorm", "ROW_ARRAYS", "s", "sum_over", "unfold", "VAR", "var", "vjp", "x", "xhat",
           "count_ops", "ELEM_BYTES", "equal_explicit", "explicit_jacobian", "forward_ops",
           "instantiate", "OP_KINDS", "backward_ops", "bytes_per_row", "get", "registry",
           "STATS_SAVED"]
