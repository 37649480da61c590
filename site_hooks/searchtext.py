"""Formulas as plain text in the search index.

The search plugin indexes a page's HTML before :mod:`site_hooks.mathsvg` draws its formulas, so without
this module every formula reached ``search/search_index.json`` as TeX (``\\(\\sqrt{\\sigma^2 + \\epsilon}\\)``)
and result snippets showed it raw. :func:`rewrite_index`, run after the build (``on_post_build`` in
hooks.py, after the search plugin has written its file), replaces each formula in the index by a plain-text
reading of it (``√(sigma² + epsilon)``), so a snippet reads as a sentence and a search for "eps" still
finds it. Pages themselves are untouched: they show the drawn SVG.

It also makes the search answer what newcomers type:

- Words are split at round brackets as well as at spaces and hyphens (:data:`SEPARATOR`, written into the
  index's configuration, which the browser's search reads): with mkdocs' default, "(1 + w)" was the words
  "(1" and "w)", which a search for "1 + w" cannot match, and "(rsqrt)" one that "rsqrt" missed.
- Each model type with a family name becomes an entry of the "Find your model" page whose address opens
  its card (``models/#model=gemma4``): a search for "gemma 4" or "qwen3 next" offers the card itself
  (:func:`finder_entries`).
- A few sections get tags (:data:`TAGS`) for the words newcomers type that their text cannot win.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import quote

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


# where the site search splits words: spaces and hyphens (mkdocs' default) and round brackets. Splitting
# at underscores, slashes or dots as well was tried and sent "qk norm" and "jacobian" to the wrong pages
# (the search reads each word as a prefix, and many new short words matched them)
SEPARATOR = r"[\s\-()]+"
DEFAULT_SEPARATOR = r"[\s\-]+"
FINDER_PAGE = "models/"
# A card's entry weighs as much as a section of a page. Only model types with a family name get one: the
# title is that name ("Gemma 4", "Qwen3-Next"), made of words readers type; a title made of the model type
# itself ("gemma4_unified_text") is a word so rare that the search ranked it above the page that answers
# "gemma eps". The model type stays in the text.
FINDER_BOOST = 1.5
# Tags weigh a million times the text in Material's search (its default field boosts): a tag that is one of
# a newcomer's words sends each query holding it to that section. Keep them few and specific. "check" sends
# "check my kernel" (and "check") to the kit's page, which the kernels pages outranked by the word "kernel";
# "1 + w" sends "1 + w" and "1 + weight" (the search reads "1*" and "w*" or "weight*") to the section that
# explains the offset gain, which a title "(1 + w)" alone did not win against code signatures full of
# w-words.
TAGS = {"check/": ["check"], "norms/#the-1-w-gain": ["1 + w"]}


def finder_entries(record: dict) -> list[dict]:
    """One search entry per model type with a family name in the finder's record
    (``site_hooks.census.page_record()``), at the address that opens its card: the family name as title, the
    model type, its classes and its catalog entries as text."""
    def where(name: str) -> str:
        return f"{FINDER_PAGE}#model={quote(name, safe='')}"

    out = []
    for m in record["models"]:
        if not m["name"]:
            continue
        title = m["name"]
        classes = ", ".join(filter(None, [m["cls"], m["cfg"], *m["norms"]]))
        text = (f"The card of model type {m['t']} in Find your model: {classes}"
                + (f"; catalog: {', '.join(m['cat'])}" if m["cat"] else "")
                + ("" if m["status"] == "traced" else "; not traced"))
        out.append({"location": where(m["t"]), "title": html.escape(title), "text": html.escape(text),
                    "boost": FINDER_BOOST})
    return out


def _finder_record() -> dict:
    from site_hooks import census

    return census.page_record()


def rewrite_index(site_dir: str | Path, finder_record: dict | None = None) -> int:
    """Rewrites ``search/search_index.json`` of a built site: plain-text formulas, the separator
    :data:`SEPARATOR`, and, when the site has the "Find your model" page, its cards as entries
    (:func:`finder_entries` of ``finder_record``, by default the census's). Returns how many entries changed
    or were added. A site without a search index (search disabled) is left alone."""
    path = Path(site_dir) / "search" / "search_index.json"
    if not path.is_file():
        return 0
    index = json.loads(path.read_text(encoding="utf-8"))
    config = index.setdefault("config", {})
    if config.get("separator", DEFAULT_SEPARATOR) not in (DEFAULT_SEPARATOR, SEPARATOR):
        raise ValueError(f"{path}: mkdocs.yml sets the search separator {config['separator']!r}; the separator "
                         f"is set in site_hooks/searchtext.py (SEPARATOR), so set it there instead")
    config["separator"] = SEPARATOR
    changed = 0
    docs = index.get("docs", [])
    if any(d.get("location") == "" for d in docs):  # a whole site (its home page), not a test's small index
        by_location = {d["location"]: d for d in docs}
        missing = sorted(set(TAGS) - set(by_location))
        if missing:
            raise ValueError(f"{path}: no search entry at {missing}, which site_hooks/searchtext.py TAGS names "
                             f"(a heading renamed or a page moved?)")
        for location, tags in TAGS.items():
            doc = by_location[location]
            doc["tags"] = list(dict.fromkeys([*doc.get("tags", []), *tags]))
            changed += 1
    if any(d.get("location") == FINDER_PAGE for d in docs):
        known = {d["location"] for d in docs}
        added = [e for e in finder_entries(finder_record or _finder_record()) if e["location"] not in known]
        docs.extend(added)
        changed += len(added)
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
