"""The package's house rules: no import circle among its modules, no module over 600 lines, a catalog that
prints what it holds, and spec helpers a norm module can import without reaching for private names.

Imports are read from each module's syntax tree, at any depth (a function-level import closes a circle as
surely as a top-level one, only later): ``import reference_impl.x``, ``from reference_impl.x import y``
and relative ``from .x import y`` / ``from . import x`` / ``from .. import x``. An import of a name from a
package's ``__init__`` is an edge to that ``__init__``; an import of a submodule is an edge to the submodule.
Imports made by ``importlib.import_module`` count too: a constant name is an edge to that module, and a
name built from the package's own ``__name__`` (``f"{__name__}.{info.name}"``, the catalog's discovery) is
an edge to each of the package's submodules.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "reference_impl"
MAX_LINES = 600


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every Python file of the package (a package is its ``__init__``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _dynamic_targets(call: ast.Call, name: str, is_package: bool, modules) -> list[str]:
    """The modules an ``importlib.import_module(...)`` call can reach, when its argument tells."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called != "import_module" or not call.args:
        return []
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if (is_package and isinstance(arg, ast.JoinedStr) and arg.values
            and isinstance(arg.values[0], ast.FormattedValue) and getattr(arg.values[0].value, "id", None) == "__name__"):
        return [m for m in modules if m.rpartition(".")[0] == name]
    return []


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in its body)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name.split(".") if is_package else name.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                else:
                    base = []
                stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for a in node.names:
                    sub = f"{stem}.{a.name}" if stem else a.name
                    targets.append(sub if sub in modules else stem)
            elif isinstance(node, ast.Call):
                targets = _dynamic_targets(node, name, is_package, modules)
            for t in targets:
                while t and t not in modules:  # `import reference_impl.x.y` where y is a name: its module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_cycle_finder_finds_function_level_and_package_circles(tmp_path):
    """The finder itself, on a tiny package: a circle closed by an import inside a function, one through a
    package's __init__, and a one-way import that is no circle."""
    pkg = tmp_path / "reference_impl"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    (pkg / "sub" / "__init__.py").write_text("from .c import g\n")
    (pkg / "sub" / "c.py").write_text("def g():\n    from reference_impl.sub import g as h\n    return h\n")
    (pkg / "d.py").write_text("import reference_impl.a\nfrom reference_impl.sub.c import g\n")
    graph = import_graph(pkg)
    assert graph["reference_impl.d"] == {"reference_impl.a", "reference_impl.sub.c"}
    assert import_cycles(graph) == [["reference_impl.a", "reference_impl.b"],
                                    ["reference_impl.sub", "reference_impl.sub.c"]]


def test_the_cycle_finder_sees_a_package_that_discovers_its_modules(tmp_path):
    """A catalog that imports its modules by name at run time (``importlib.import_module(f"{__name__}.x")``)
    and a registry that asks the catalog for its entries inside a function: the loop the symbolic registry
    once closed through the catalog. A constant ``import_module("reference_impl.z")`` is an edge too."""
    pkg = tmp_path / "reference_impl"
    (pkg / "catalog").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "catalog" / "__init__.py").write_text(
        "import importlib, pkgutil\n"
        "def entries():\n"
        "    return [importlib.import_module(f\"{__name__}.{m.name}\") for m in pkgutil.iter_modules(__path__)]\n")
    (pkg / "catalog" / "norm.py").write_text("from .. import registry\n")
    (pkg / "registry.py").write_text("def build():\n    from .catalog import entries\n    return entries()\n")
    (pkg / "z.py").write_text("")
    (pkg / "y.py").write_text("import importlib\nZ = importlib.import_module('reference_impl.z')\n")
    graph = import_graph(pkg)
    assert graph["reference_impl.catalog"] == {"reference_impl.catalog.norm"}
    assert graph["reference_impl.y"] == {"reference_impl.z"}
    assert import_cycles(graph) == [["reference_impl.catalog", "reference_impl.catalog.norm", "reference_impl.registry"]]
    (pkg / "registry.py").write_text("def build(entries):\n    return list(entries)\n")      # handed in: no loop
    assert import_cycles(import_graph(pkg)) == []


def test_the_symbolic_package_imports_nothing_above_it():
    """symbolic/ is the bottom layer: none of its modules imports the catalog or anything else of the
    package outside symbolic/ (the catalog hands its formulas to the registry: norms.formula_registry)."""
    graph = import_graph()
    up = {m: sorted(t for t in ts if not t.startswith("reference_impl.symbolic"))
          for m, ts in graph.items() if m.startswith("reference_impl.symbolic")}
    assert not any(up.values()), f"symbolic/ imports from above it: {up}"


def test_no_import_circle_among_the_package_modules():
    cycles = import_cycles(import_graph())
    assert not cycles, "import circles (break each by moving the shared part into a module both import):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)


def test_no_module_over_600_lines():
    long = {path.relative_to(REPO).as_posix(): n for path in _modules().values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by what they hold): {long}"


MAX_TOP_LEVEL = 12


def test_the_package_top_level_holds_at_most_12_modules():
    """reference_impl/ itself holds at most 12 modules (``__init__.py`` included): what is not core math
    goes into a subpackage, and an old name is a module object made in ``__init__.py``, not a file that
    re-exports."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert "__init__.py" in top and len(top) >= 2, f"is {PACKAGE} still the package? found {top}"
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} top-level modules in reference_impl/ (at most {MAX_TOP_LEVEL}): {top}"


def test_the_catalog_prints_its_names_and_is_a_read_only_mapping():
    from collections.abc import Mapping

    from reference_impl.norms import CATALOG

    assert isinstance(CATALOG, Mapping) and not hasattr(CATALOG, "__setitem__")
    text = repr(CATALOG)
    assert len(CATALOG) >= 1 and all(name in text for name in CATALOG), text
    assert str(CATALOG) == text and text != "{}"
    assert dict(CATALOG.items()) == {name: CATALOG[name] for name in CATALOG}
    with pytest.raises(KeyError, match="no norm 'no_such_norm' in the catalog; it has: .*rms_norm"):
        CATALOG["no_such_norm"]


def test_norm_modules_use_only_public_spec_helpers():
    """What a catalog module needs from norms/spec.py is public; no module imports a private name from it."""
    private = []
    for path in sorted((PACKAGE / "norms").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.ImportFrom) and node.module == "spec" and node.level == 1:
                private += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not private, f"private names imported from norms/spec.py: {private}"


def test_a_formula_with_an_unnamed_scalar_says_where_to_name_it():
    """A new scalar in a formula needs its keyword in algebra._SCALARS: the error says so where the
    numeric function is made, not as NumPy's "loop of ufunc does not support argument 0 of type Symbol"."""
    from reference_impl import symbolic as S

    f = S.Formula("test.new_scalar", "a formula with a new scalar", "y", S.x[S.i] * S.sp.Symbol("tau"), {}, "definition")
    with pytest.raises(ValueError, match=r"scalar\(s\) \['tau'\]: give each its keyword in _SCALARS "
                                         r"\(reference_impl/symbolic/algebra\.py\)"):
        f.numeric()
    ok = S.Formula("test.known_scalar", "a formula with eps", "y", S.x[S.i] * S.eps, {}, "definition")
    assert ok.numeric()(x=[[1.0, 2.0]], eps=0.5).tolist() == [[0.5, 1.0]]


def test_symbolic_names_lead_to_their_definitions():
    """The package imports each name from the module that defines it (no merged namespace)."""
    from reference_impl import symbolic as S

    for name in S.__all__:
        obj = getattr(S, name)
        home = getattr(obj, "__module__", None)
        if callable(obj) and home and home.startswith("reference_impl.symbolic."):
            assert getattr(importlib.import_module(home), name) is obj, f"S.{name} is not {home}.{name}"
    src = (PACKAGE / "symbolic" / "__init__.py").read_text()
    assert "globals().update" not in src
