"""Run a released engine's PyTorch code without installing the engine: take the class or function out of
the released file with :mod:`ast` and execute it with the smallest stubs.

What is kept: the named top-level function, or the named class with ``__init__``, the method to be called
and every method those reach through ``self.<name>`` (so ``forward_native`` brings its ``_norm``). What is
changed, and only this: a class's bases become ``torch.nn.Module`` (an engine's dispatch base such as
vLLM's ``CustomOp`` or SGLang's ``BaseFusedOp`` only picks a method per device); class decorators that
register the class, and annotations, are dropped (they evaluate names the arithmetic never uses). The
file's own ``import torch`` / ``torch.nn`` / ``typing`` / ``math`` lines are run as written. Every other
free name the kept code reads must be given as a stub, and :class:`MissingName` names the one that was
not, so a release that adds a dependency fails with a clear message instead of running something else.
The code is compiled under the released file's path, so a traceback points at the released line.
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from pathlib import Path

import torch

#: modules whose import lines in a released file are run as written
SAFE_IMPORTS = ("torch", "typing", "math", "functools", "numbers", "__future__")


class MissingName(NameError):
    """The kept code reads a name that is neither imported from a safe module nor stubbed."""


@dataclass
class Loaded:
    """What was taken from a file: the namespace, the kept objects' first lines, and the stubs used."""

    namespace: dict
    lines: dict = field(default_factory=dict)  # name or Class.method -> line in the released file
    stubs: list = field(default_factory=list)  # "name: what stands in for it"
    dropped: list = field(default_factory=list)  # decorators and bases replaced, in words


def _imports(tree: ast.Module, ns: dict) -> None:
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if all(m.split(".")[0] in SAFE_IMPORTS for m in mods) and getattr(node, "level", 0) == 0:
                exec(compile(ast.Module([node], []), "<imports>", "exec"), ns)


def _self_calls(fn: ast.AST) -> set[str]:
    """Methods called as ``self.<name>(...)``."""
    return {n.func.attr for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}


def _self_refs(fn: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self"}


def _unreached(fn: ast.FunctionDef) -> ast.FunctionDef:
    """A method the path only refers to (a bound method stored as a hook): kept by name, its body raising."""
    msg = ast.Constant(f"{fn.name} is not part of the path this study runs")
    fn.body = [ast.Raise(ast.Call(ast.Name("NotImplementedError", ast.Load()), [msg], []), None)]
    return fn


def _strip_annotations(fn: ast.FunctionDef) -> None:
    fn.returns = None
    for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs:
        a.annotation = None
    for a in (fn.args.vararg, fn.args.kwarg):
        if a is not None:
            a.annotation = None


def _free_names(nodes, bound: set[str]) -> set[str]:
    loads, stores = set(), set(bound)
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                (loads if isinstance(n.ctx, ast.Load) else stores).add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                stores.add(n.name)
            elif isinstance(n, ast.arg):
                stores.add(n.arg)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                stores.update((a.asname or a.name).split(".")[0] for a in n.names)
    return loads - stores - set(dir(builtins))


def load(path: Path, text: str, *, classes=(), functions=(), methods=("__init__",), stubs=None,
         keep_decorators=("staticmethod", "classmethod", "property")) -> Loaded:
    """Execute the named classes (with ``methods`` and what they reach) and functions of ``text`` (the
    released file, whose path ``path`` is used for tracebacks). ``stubs``: ``{name: (object, words)}``."""
    tree = ast.parse(text, filename=str(path))
    ns: dict = {"__name__": f"released:{path}", "torch": torch, "nn": torch.nn}
    _imports(tree, ns)
    out = Loaded(ns)
    stubs = dict(stubs or {})
    kept = []
    by_name = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for name in list(classes) + list(functions):
        if name not in by_name:
            raise MissingName(f"{path}: no top-level {name!r} (the release renamed or moved it)")
    for name in functions:
        fn = by_name[name]
        _strip_annotations(fn)
        dec = [d for d in fn.decorator_list if isinstance(d, ast.Name) and d.id in keep_decorators]
        if len(dec) != len(fn.decorator_list):
            out.dropped.append(f"{name}: decorators {[ast.unparse(d) for d in fn.decorator_list if d not in dec]}")
        fn.decorator_list = dec
        out.lines[name] = fn.lineno
        kept.append(fn)
    for name in classes:
        cls = by_name[name]
        table = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        want, todo = set(), [m for m in methods if m in table]
        while todo:
            m = todo.pop()
            if m in want:
                continue
            want.add(m)
            todo += [a for a in _self_calls(table[m]) if a in table]
        refs = {a for m in want for a in _self_refs(table[m]) if a in table} - want
        for m in sorted(refs):
            _unreached(table[m])
            out.dropped.append(f"{name}.{m}: referred to but not called on this path; its body raises")
        body = []
        for n in cls.body:
            if isinstance(n, ast.FunctionDef) and n.name in want | refs:
                _strip_annotations(n)
                dec = [d for d in n.decorator_list if isinstance(d, ast.Name) and d.id in keep_decorators]
                if len(dec) != len(n.decorator_list):
                    out.dropped.append(f"{name}.{n.name}: decorators "
                                       f"{[ast.unparse(d) for d in n.decorator_list if d not in dec]}")
                n.decorator_list = dec
                out.lines[f"{name}.{n.name}"] = n.lineno
                body.append(n)
        if cls.bases:
            out.dropped.append(f"{name}: bases {[ast.unparse(b) for b in cls.bases]} replaced by torch.nn.Module")
        if cls.decorator_list:
            out.dropped.append(f"{name}: class decorators {[ast.unparse(d) for d in cls.decorator_list]}")
        new = ast.ClassDef(name=name, bases=[ast.Attribute(ast.Name("torch", ast.Load()), "nn", ast.Load())],
                           keywords=[], body=body or [ast.Pass()], decorator_list=[])
        new.bases = [ast.Attribute(new.bases[0], "Module", ast.Load())]
        ast.copy_location(new, cls)
        out.lines[name] = cls.lineno
        kept.append(new)
    free = _free_names(kept, set(ns) | {n.name for n in kept})
    missing = sorted(free - set(stubs))
    if missing:
        raise MissingName(f"{path}: the kept code reads {', '.join(missing)}, which is neither a safe import "
                          f"nor stubbed: the release changed what this path depends on")
    for name in sorted(free):
        obj, words = stubs[name]
        ns[name] = obj
        out.stubs.append(f"{name}: {words}")
    module = ast.fix_missing_locations(ast.Module(kept, []))
    exec(compile(module, str(path), "exec"), ns)
    return out


def line_of(text: str, pattern: str, after: int = 0) -> int:
    """The 1-based number of the first line at or after line ``after`` that contains ``pattern``; a clear
    error when the release no longer has it."""
    for i, line in enumerate(text.splitlines(), 1):
        if i >= after and pattern in line:
            return i
    raise MissingName(f"no line contains {pattern!r}: the release changed this code")
