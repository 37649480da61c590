"""Formulas as plain text in the search index.

The search plugin indexes a page's HTML before :mod:`site_hooks.mathsvg` draws its formulas, so without
this module every formula reached ``search/search_index.json`` as TeX (``\\(\\sqrt{\\sigma^2 + \\epsilon}\\)``)
and result snippets showed it raw. :func:`rewrite_index`, run after the build (``on_post_build`` in
hooks.py, after the search plugin has written its file), replaces each formula in the index by a plain-text
reading of it (``√(sigma² + epsilon)``), so a snippet reads as a sentence and a search for "eps" still
finds it. Pages themselves are untouched: they show the drawn SVG.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

# TeX commands read as a word or a character. Greek letters keep their names ("epsilon", not "ε"), so a
# reader who types "eps" or "sigma" finds the formula; operators, relations and dots become characters.
SYMBOLS = {
    "varepsilon": "epsilon", "varphi": "phi", "ell": "ℓ", "nabla": "∇", "partial": "∂", "sum": "Σ", "prod": "Π", "infty": "∞", "cdot": "·", "times": "×", "odot": "⊙",
    "circ": "∘", "pm": "±", "mp": "∓", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠",
    "approx": "≈", "gg": "≫", "ll": "≪", "ast": "*", "mid": "|", "perp": "⊥", "otimes": "⊗", "oplus": "⊕",
    "equiv": "≡", "sim": "~", "propto": "∝", "to": "→", "rightarrow": "→", "leftarrow": "←",
    "mapsto": "↦", "in": "∈", "subset": "⊂", "cup": "∪", "cap": "∩", "forall": "∀", "exists": "∃",
    "dots": "…", "ldots": "…", "cdots": "⋯", "vdots": "⋮", "ddots": "⋱", "top": "ᵀ", "lVert": "‖",
    "rVert": "‖", "Vert": "‖", "|": "‖", "lvert": "|", "rvert": "|", "langle": "⟨", "rangle": "⟩",
    "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉", "{": "{", "}": "}", "%": "%", "_": "_",
    "#": "#", "&": "&", ",": " ", ";": " ", ":": " ", "!": "", "quad": " ", "qquad": " ", " ": " ",
}
# commands whose argument is kept as it is (fonts, text, operator names, decorations)
KEEP_ARG = {"mathrm", "mathbf", "mathit", "mathsf", "mathtt", "mathcal", "mathbb", "boldsymbol", "bm", "text",
            "textrm", "textbf", "textit", "operatorname", "mbox", "hat", "bar", "tilde", "vec", "widehat",
            "overline", "underline", "dot", "ddot", "displaystyle", "textstyle", "left", "right", "big", "Big",
            "bigl", "bigr", "Bigl", "Bigr", "bigg", "Bigg"}
SUPERSCRIPTS = str.maketrans("0123456789+-=()n", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿ")
SUBSCRIPTS = str.maketrans("0123456789+-=()", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎")

# a formula in the indexed text: inline \( \), display \[ \] or $$ $$, or a bare environment
FORMULA = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]|\$\$(.+?)\$\$|(\\begin\{(\w+\*?)\}.+?\\end\{\5\})", re.S)
# what must never reach a snippet: the test in tests/site/test_search.py checks the same list
LEFTOVER_TEX = re.compile(r"\\[()\[\]]|\$\$|\\(?:frac|dfrac|tfrac|sqrt|begin|end|left|right|mathrm|operatorname)\b")


def _group(tex: str, i: int) -> tuple[str, int]:
    """The brace group starting at ``tex[i] == '{'`` (without its braces) and the index after it; a single
    token when there is no brace."""
    while i < len(tex) and tex[i] == " ":
        i += 1
    if i >= len(tex):
        return "", i
    if tex[i] != "{":
        if tex[i] == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", tex[i:])
            return m.group(0), i + len(m.group(0))
        return tex[i], i + 1
    depth, j = 0, i
    while j < len(tex):
        if tex[j] == "\\":
            j += 2
            continue
        if tex[j] == "{":
            depth += 1
        elif tex[j] == "}":
            depth -= 1
            if depth == 0:
                return tex[i + 1:j], j + 1
        j += 1
    return tex[i + 1:], len(tex)


def _script(text: str, table: dict, mark: str) -> str:
    """x^2 -> x², x_i -> x_i unless every character has a small form."""
    small = text.translate(table)
    if all(c != o or c in " " for c, o in zip(small, text)) and text:
        return small
    return f"{mark}({text})" if len(text) > 1 else f"{mark}{text}"


GREEK = ("alpha", "beta", "gamma", "delta", "Delta", "epsilon", "eta", "theta", "lambda", "mu", "nu", "pi",
         "rho", "sigma", "Sigma", "tau", "phi", "psi", "omega")


def _atom(s: str) -> str:
    """``s`` as one operand of a slash: unchanged when it is a word or one bracketed term, else in brackets."""
    if re.fullmatch(r"[\w.²³⁻¹]+", s):
        return s
    start = 2 if s.startswith("√(") else 1 if s.startswith("(") else 0
    if start:
        depth = 0
        for k, ch in enumerate(s[start - 1:], start - 1):
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                if k == len(s) - 1:
                    return s
                break
    return f"({s})"


def tex_to_text(tex: str) -> str:
    """A plain-text reading of one TeX formula: Greek letters and operators as Unicode, fractions as a/b,
    roots as √(…), fonts and operator names as their text, alignment and spacing as spaces."""
    out: list[str] = []
    i = 0
    while i < len(tex):
        c = tex[i]
        if c == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", tex[i:])
            name, i = m.group(1), i + len(m.group(0))
            if name in ("frac", "dfrac", "tfrac"):
                num, i = _group(tex, i)
                den, i = _group(tex, i)
                out.append(f"{_atom(tex_to_text(num))}/{_atom(tex_to_text(den))}")
            elif name == "sqrt":
                if i < len(tex) and tex[i] == "[":
                    j = tex.index("]", i)
                    i = j + 1
                arg, i = _group(tex, i)
                out.append(f"√({tex_to_text(arg)})")
            elif name in ("begin", "end"):
                _, i = _group(tex, i)
                out.append(" ")
            elif name in KEEP_ARG:
                if name in ("left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr", "bigg", "Bigg"):
                    continue  # the delimiter that follows is read on its own
                arg, i = _group(tex, i)
                out.append(tex_to_text(arg))
            elif name == "\\":
                out.append("; ")
            elif name in GREEK:
                out.append(f" {name} ")
            else:
                out.append(SYMBOLS.get(name, name))
        elif c in "^_":
            arg, i = _group(tex, i + 1)
            arg = tex_to_text(arg)
            out.append(_script(arg, SUPERSCRIPTS if c == "^" else SUBSCRIPTS, c))
        elif c in "{}":
            i += 1
        elif c == "&":
            out.append(" ")
            i += 1
        elif c == "~":
            out.append(" ")
            i += 1
        else:
            out.append(c)
            i += 1
    text = re.sub(r"\s+", " ", "".join(out)).strip()
    # the spaces around a Greek name are not wanted next to a bracket or a small digit
    return re.sub(r"\(\s+", "(", re.sub(r"\s+([)²³⁰¹⁴-⁹ⁿ⁺⁻⁼₀-₉_^,;])", r"\1", text))


def strip_formulas(text: str) -> str:
    """Replaces every formula of an indexed text by its plain-text reading."""
    def one(m: re.Match) -> str:
        tex = next(g for g in m.groups()[:4] if g is not None)
        return tex_to_text(tex)

    return FORMULA.sub(one, text)


def rewrite_index(site_dir: str | Path) -> int:
    """Rewrites ``search/search_index.json`` of a built site with plain-text formulas; returns how many
    entries changed. A site without a search index (search disabled) is left alone."""
    path = Path(site_dir) / "search" / "search_index.json"
    if not path.is_file():
        return 0
    index = json.loads(path.read_text(encoding="utf-8"))
    changed = 0
    for doc in index.get("docs", []):
        for key in ("title", "text"):
            new = strip_formulas(doc.get(key, ""))
            if new != doc.get(key, ""):
                doc[key] = new
                changed += 1
    left = [d["location"] for d in index.get("docs", [])
            if LEFTOVER_TEX.search(d.get("text", "")) or LEFTOVER_TEX.search(d.get("title", ""))]
    if left:
        raise ValueError(f"{path}: TeX left in the search index after rewriting, in {left[:5]}")
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(index, separators=(",", ":"), ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return changed
