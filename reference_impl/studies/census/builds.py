"""Classes built as their model builds them: the constructor arguments a model passes from its config where it
creates a norm class (Falcon-H1's ``norm_before_gate=config.mamba_norm_before_gate``), read from the model's
source, and the class probed (:func:`reference_impl.studies.census.probe.probe_class`) under each value of such
a boolean field."""
from __future__ import annotations

import inspect

from .discover import Found
from .probe import _WIDTH_ARGS, DTYPES, WIDTHS, _config_for, needs_gate, probe_class


def config_arguments(found: Found) -> dict[str, str]:
    """Constructor argument -> config field, for the arguments the class's model passes from its config where
    it builds the class (``Cls(..., norm_before_gate=config.mamba_norm_before_gate)``, or through an attribute
    the same method set from the config, ``self.n_groups = config.mamba_n_groups``), read from the model's
    source; empty when the source does not say."""
    import ast
    import importlib

    try:
        tree = ast.parse(inspect.getsource(importlib.import_module(found.module)))
    except (OSError, TypeError, SyntaxError, ImportError):
        return {}

    def config_field(node):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "config":
            return node.attr
        return None

    out: dict[str, str] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        via_self = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and config_field(node.value):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        via_self[t.attr] = config_field(node.value)
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == found.name:
                for kw in node.keywords:
                    v = kw.value
                    f = config_field(v)
                    if f is None and isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) \
                            and v.value.id == "self":
                        f = via_self.get(v.attr)
                    if kw.arg and f:
                        out.setdefault(kw.arg, f)
    return out


def _config_defaults(found: Found) -> object | None:
    try:
        return _config_for(found, None, 8)
    except Exception:
        return None


def config_builds(found: Found, widths=WIDTHS, dtypes=DTYPES) -> list[dict]:
    """The class built as its model builds it under each value of a boolean config field it passes to the
    constructor (Falcon-H1's ``norm_before_gate=config.mamba_norm_before_gate``), other config-given arguments
    at the config's defaults: ``[{"config": {field: value}, "args": {arg: value}, "catalog", "closest",
    "max_ulp", "note"}]``, one per value of each such field (the default value first). Empty for a class
    whose model passes no such field. Only gated classes: the fields that choose a gate's place."""
    if not needs_gate(found.cls):
        return []
    given = config_arguments(found)
    cfg = _config_defaults(found)
    if not given or cfg is None:
        return []
    try:
        params = inspect.signature(found.cls.__init__).parameters
    except (TypeError, ValueError):
        return []
    fixed = {a: getattr(cfg, f) for a, f in given.items() if a in params and hasattr(cfg, f)
             and isinstance(getattr(cfg, f), int) and not isinstance(getattr(cfg, f), bool)
             and a not in _WIDTH_ARGS and a not in ("eps", "epsilon")}
    out = []
    for arg, f in given.items():
        default = getattr(cfg, f, None)
        if arg not in params or not isinstance(default, bool):
            continue
        for value in (default, not default):
            r = probe_class(found, widths, dtypes, extra={**fixed, arg: value})
            out.append({"config": {f: value, **{given[a]: v for a, v in fixed.items()}},
                        "args": {arg: value, **fixed}, "catalog": r.catalog, "closest": r.closest,
                        "max_ulp": r.max_ulp, "note": r.note})
    return out
