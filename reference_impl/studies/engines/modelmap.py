"""Which norm path an engine uses for a model, read from the engine's own model file.

For each model file the parser collects every construction of one of the engine's norm classes
(``self.input_layernorm = RMSNorm(config.hidden_size, eps=...)``), with its attribute name, line and
keyword arguments (constants as values, anything else as the expression's text), and every call of such an
attribute with a second argument (``self.input_layernorm(hidden_states, residual)``): the fused residual
add. Only which file serves which model type is declared (the engines' registries map an architecture to
a file by name); what the file does is read from it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class NormUse:
    """One norm a model file constructs: ``cls`` with constant ``flags`` at ``line``, held as ``attrs``."""

    cls: str
    flags: dict
    attrs: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    residual_lines: list = field(default_factory=list)  # calls with a residual stream


def _name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _flag_value(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def norm_uses(text: str, classes) -> list[NormUse]:
    """The distinct (class, constant flags) a model file constructs, with where and how each is called."""
    tree = ast.parse(text)
    uses: dict = {}
    attr_of: dict = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        cls = _name(node.value.func)
        if cls not in classes:
            continue
        flags = {}
        for kw in node.value.keywords:
            if kw.arg and kw.arg not in ("eps", "hidden_size", "dim", "variance_epsilon"):
                v = _flag_value(kw.value)
                if v is not None or (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                    flags[kw.arg] = v
        key = (cls, tuple(sorted(flags.items(), key=lambda kv: kv[0])))
        use = uses.setdefault(key, NormUse(cls, flags))
        use.lines.append(node.lineno)
        for t in node.targets:
            if isinstance(t, ast.Attribute):
                use.attrs.append(t.attr)
                attr_of[t.attr] = use
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in attr_of:
            if len(node.args) >= 2 or any(k.arg == "residual" for k in node.keywords):
                attr_of[node.func.attr].residual_lines.append(node.lineno)
    return list(uses.values())


def residual_sites(text: str, pattern: str = "layernorm(hidden_states, residual") -> list[int]:
    """Lines of a helper file (SGLang's layer communicator) that call a layer's norm with the residual."""
    return [i for i, line in enumerate(text.splitlines(), 1) if pattern in line.replace(" ", "").replace(",", ", ")]
