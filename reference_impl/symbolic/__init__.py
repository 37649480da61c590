"""The symbolic registry: every formula on the site, as a SymPy expression with a stable id.

Three modules, re-exported here so that ``from reference_impl import symbolic as S; S.registry()`` and
``S.x``, ``S.normalize``, ``S.count_ops`` work as one namespace:

- :mod:`reference_impl.symbolic.algebra`: symbols, definitions, the two sum rules, proofs, :class:`Formula`;
- :mod:`reference_impl.symbolic.formulas`: :func:`registry` and :func:`get`;
- :mod:`reference_impl.symbolic.costs`: explicit Jacobians at fixed d, operation and byte counts per row.
"""
from __future__ import annotations

from . import algebra, costs, formulas

# one namespace: every name the three modules define (private helpers included, for the tests)
for _module in (algebra, costs, formulas):
    globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__") and k != "annotations"})
del _module

sp = algebra.sp
