"""The catalog of norms: one module per norm, and :data:`CATALOG`, built from them.

Every module in this package that defines ``SPECS`` (a tuple of :class:`~reference_impl.norms.spec.NormSpec`)
contributes its entries; nothing else lists them. The generic tests (tests/core/test_catalog.py), the
formula registry (:func:`formula_registry`: the symbolic core's and each spec's ``build_formulas``), the guard
ids and the catalog table on the site iterate over :data:`CATALOG`. To add a norm, see the README.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import lru_cache

from .derf import Derf, derf
from .dyt import DyT, dyt
from .spec import BadInput, Impl, Layer, NormSpec

# tests that iterate over the catalog and guard each spec's ids (site_hooks/guards.py reads this)
GENERIC_TESTS = (
    "tests/core/test_catalog.py::test_reference_matches_oracle",
    "tests/core/test_catalog.py::test_gradcheck_and_gradgradcheck",
)


@lru_cache(maxsize=1)
def _catalog_and_homes() -> tuple[dict, dict]:
    specs, homes = {}, {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for spec in getattr(module, "SPECS", ()):
            if spec.name in specs:
                raise ValueError(f"norm {spec.name!r} is declared twice (in {module.__name__} and before)")
            specs[spec.name], homes[spec.name] = spec, module
    return specs, homes


def _catalog() -> dict:
    return _catalog_and_homes()[0]


def declared_in(name: str):
    """The catalog module that declares entry ``name`` (a module object)."""
    CATALOG[name]                     # the catalog's own error for an unknown name
    return _catalog_and_homes()[1][name]


def model_layers() -> dict[str, NormSpec]:
    """short name -> spec, for every entry that declares a :class:`Layer` (the norms a model configuration,
    such as the tiny decoder's ``norm="rms"``, can name). Two entries claiming one short name is an error."""
    out: dict[str, NormSpec] = {}
    for spec in CATALOG.values():
        if spec.layer is None:
            continue
        if spec.layer.short in out:
            raise ValueError(f"layer short name {spec.layer.short!r} is declared by both "
                             f"{out[spec.layer.short].name!r} and {spec.name!r}")
        out[spec.layer.short] = spec
    return out


def layer_sources(shorts) -> list[str]:
    """The repository files whose code decides what the layers ``shorts`` compute: the module declaring each
    entry (its ``Layer`` and ``build``) and the module defining the class ``build`` returns when it is ours
    (with what that module imports, the catalog package not expanded). A study that trains with these layers
    lists these, not every catalog module: an edit to another norm cannot change its numbers."""
    import inspect

    from .. import provenance as pv

    layers, files = model_layers(), set()
    for short in shorts:
        if short not in layers:
            raise KeyError(f"no catalog layer {short!r}; the catalog has: {', '.join(sorted(layers))}")
        spec = layers[short]
        files.add(pv.relative(inspect.getsourcefile(declared_in(spec.name))))
        built = type(spec.layer.build(2, 1e-5))
        if built.__module__.split(".")[0] == "reference_impl":
            files.update(pv.python_closure(pv.relative(inspect.getsourcefile(built)), discover=False))
    return sorted(files)


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


@lru_cache(maxsize=1)
def formula_registry() -> dict:
    """Every formula on the site, {id: Formula}: the symbolic core's (:func:`reference_impl.symbolic.registry`)
    and the catalog's (:func:`catalog_formulas`). Assembled here, above both, so that the symbolic package
    never imports the catalog. An id declared twice is an error naming it."""
    from ..symbolic import formulas as core

    out = dict(core.registry())
    for f in catalog_formulas():
        if f.id in out:
            raise ValueError(f"formula id {f.id!r} is declared twice (the core registry or another catalog spec)")
        out[f.id] = f
    return out


__all__ = ["CATALOG", "Catalog", "NormSpec", "Impl", "BadInput", "Layer", "model_layers", "layer_sources", "declared_in", "catalog_guards", "catalog_formulas", "formula_registry", "dyt", "DyT",
           "derf", "Derf"]
