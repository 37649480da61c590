"""The catalog of norms: one module per norm, and :data:`CATALOG`, built from them.

Every module in this package that defines ``SPECS`` (a tuple of :class:`~reference_impl.norms.spec.NormSpec`)
contributes its entries; nothing else lists them. The generic tests (tests/core/test_catalog.py), the
formula registry (:func:`reference_impl.symbolic.registry` adds each spec's ``build_formulas``), the guard
ids and the catalog table on the site iterate over :data:`CATALOG`. To add a norm, see the README.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import lru_cache

from .derf import Derf, derf
from .dyt import DyT, dyt
from .spec import BadInput, Impl, NormSpec

# tests that iterate over the catalog and guard each spec's ids (site_hooks/guards.py reads this)
GENERIC_TESTS = (
    "tests/core/test_catalog.py::test_reference_matches_oracle",
    "tests/core/test_catalog.py::test_gradcheck_and_gradgradcheck",
)


@lru_cache(maxsize=1)
def _catalog() -> dict:
    specs = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for spec in getattr(module, "SPECS", ()):
            if spec.name in specs:
                raise ValueError(f"norm {spec.name!r} is declared twice (in {module.__name__} and before)")
            specs[spec.name] = spec
    return specs


class Catalog(Mapping):
    """The read-only mapping name -> :class:`NormSpec` of every catalog module, built on first use (the
    modules import the core lazily, so importing this package stays light). ``repr`` lists the names."""

    def __getitem__(self, name: str) -> NormSpec:
        try:
            return _catalog()[name]
        except KeyError:
            raise KeyError(f"no norm {name!r} in the catalog; it has: {', '.join(_catalog())}") from None

    def __iter__(self):
        return iter(_catalog())

    def __len__(self) -> int:
        return len(_catalog())

    def __repr__(self) -> str:
        return f"Catalog({len(self)} norms: {', '.join(self)})"


CATALOG: Mapping[str, NormSpec] = Catalog()


def catalog_guards(kind: str = "all") -> list[str]:
    """Every guard id the generic tests carry: ``norm.<name>`` and each spec's formula ids."""
    return sorted({gid for spec in CATALOG.values() for gid in spec.guard_ids()})


def catalog_formulas():
    """The registry entries the catalog's modules add (each spec's ``build_formulas``)."""
    out = []
    for spec in CATALOG.values():
        if spec.build_formulas is not None:
            out.extend(spec.build_formulas())
    return out


__all__ = ["CATALOG", "Catalog", "NormSpec", "Impl", "BadInput", "catalog_guards", "catalog_formulas", "dyt", "DyT",
           "derf", "Derf"]
