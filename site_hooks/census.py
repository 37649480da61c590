"""The "Find your model" page (docs/models.md), drawn from the census of the installed transformers
(``docs/data/census.json``, written by ``python -m reference_impl.studies.census``).

- ``{{ model_finder() }}``: the finder's markup and, embedded in the page, the census rows it needs (one
  record per model type, the norm classes they use, the catalog entries with their section links, the code
  to copy for each entry from ``reference_impl/standalone/`` and the implementations the conformance study
  found bit-identical to it). ``docs/assets/javascripts/models.js`` draws the cards from that record; the
  page loads nothing else.
- ``{{ census_models_table() }}``: every model type as a plain Markdown table, so the site search holds each
  model type and class name, and a reader without JavaScript still has the facts.
- ``{{ census_catalog_split() }}``: how many model types use each catalog entry, linked to its section.

A model type, class or catalog entry that the census names but this site does not know (a catalog entry that
no longer exists, a class without its record) fails the build, naming the file and the field.
"""
from __future__ import annotations

import html
import json
from collections import defaultdict
from functools import lru_cache

from . import data
from .macros import MacroError, macro

FILE = "census.json"
CONFORMANCE = "conformance.json"
PAGE_DEPTH = "../"  # docs/models.md is served at models/, so other pages are one folder up
ROLES = ("input", "sublayer_output", "residual_sum", "q_per_head", "k_per_head", "q_whole", "k_whole", "v_per_head",
         "v_whole", "latent",
         "inner_output", "final", "embedding", "other")
PLACEMENT_WORDS = {"pre": "a norm on each sub-layer's input (Pre-LN)",
                   "post": "a norm on the residual stream after each addition (Post-LN)",
                   "sandwich": "a norm on each sub-layer's input and on its output",
                   "output": "a norm on each sub-layer's output only, before the addition",
                   "other": "another arrangement"}
QK_WORDS = {"none": "none", "per_head": "per head, on q and k", "whole_projection": "over the whole q and k projections",
            "other": "other"}


def gain_words(classes: list[dict]) -> str:
    """How the model stores its norms' gains, in words, from the census records of its classes (``gain``:
    "w", "1+w" or "none"): "stored as w, not 1 + w", "stored as 1 + w (offset)", both with the classes
    named, or "none stored"."""
    by = defaultdict(list)
    for c in classes:
        if c["gain"] in ("w", "1+w"):
            by[c["gain"]].append(c["name"])
    if not by:
        return "none stored (the norms have no learned gain)"
    if list(by) == ["w"]:
        return "stored as w, not 1 + w"
    if list(by) == ["1+w"]:
        return "stored as 1 + w (offset)"
    return f"stored as 1 + w (offset) in {', '.join(by['1+w'])}; as w, not 1 + w, in {', '.join(by['w'])}"


def qk_words(qk: str | None, rope: str | None) -> str:
    """The QK-norm and its order with RoPE, in words, from the census fields ``qk_norm`` and ``qk_rope``."""
    if qk is None:
        return "not known (the model was not traced)"
    if qk == "none":
        return "none, so no order with RoPE to choose"
    what = QK_WORDS.get(qk, qk)
    if rope is None:
        return f"{what}; no RoPE on q and k after it, so no order with RoPE to choose"
    return f"{what}, {rope} RoPE"


def final_words(final: bool | None, module: str | None) -> str:
    """Whether a norm follows the last layer, and which module it is."""
    if final is None:
        return "not known (the model was not traced)"
    return (f"yes ({module})" if module else "yes") if final else "no"


def card_words(classes: list[dict], qk, rope, final, final_module) -> dict:
    """What a model card says in words (the finder shows these): ``gain``, ``qk``, ``final``."""
    return {"gain": gain_words(classes), "qk": qk_words(qk, rope), "final": final_words(final, final_module)}


def clear_caches() -> None:
    census.cache_clear()
    page_record.cache_clear()


@lru_cache(maxsize=1)
def census() -> dict:
    """docs/data/census.json, validated against its schema, with each model's records cross-checked."""
    doc = data.load(FILE)
    classes = {c["name"]: c for c in doc["classes"]}
    catalog = _catalog()
    for i, m in enumerate(doc["models"]):
        for name in m["norm_classes"]:
            if name not in classes:
                raise MacroError(f"docs/data/{FILE}: models.{i} ({m['model_type']}) names norm class {name!r}, "
                                 f"which has no record in classes")
        for entry in m["catalog"]:
            if entry is not None and base_entry(entry) not in catalog:
                raise MacroError(f"docs/data/{FILE}: models.{i} ({m['model_type']}) names catalog entry {entry!r}, "
                                 f"which reference_impl.norms.CATALOG does not have")
    for i, c in enumerate(doc["classes"]):
        if c.get("catalog") and base_entry(c["catalog"]) not in catalog:
            raise MacroError(f"docs/data/{FILE}: classes.{i} ({c['name']}) names catalog entry {c['catalog']!r}, "
                             f"which reference_impl.norms.CATALOG does not have")
    return doc


def _catalog():
    from reference_impl.norms import CATALOG

    return CATALOG


def base_entry(name: str) -> str:
    """'rms_norm.llama (eps outside)' -> 'rms_norm.llama': the catalog entry a census match names."""
    return name.split(" (", 1)[0]


def catalog_href(name: str, markdown: bool = False) -> str:
    """Link from the models page to a catalog entry's section card: as the built page's URL (for the
    script), or as a Markdown link to the source page (which the strict build checks, anchor included)."""
    from .catalog import anchor

    name = base_entry(name)
    spec = _catalog()[name]
    if markdown:
        return spec.page + "#" + anchor(name)
    return PAGE_DEPTH + spec.page[: -len(".md")] + "/#" + anchor(name)


def standalone_code(entry: str) -> dict | None:
    """The copyable code for a catalog entry: ``{"function", "file", "code"}``, the snippet region of the
    function that ``reference_impl.standalone.BY_CATALOG`` names (its import line included), or None where
    the package has none for that entry (the card then links to the catalog section only)."""
    import importlib

    try:
        pkg = importlib.import_module("reference_impl.standalone")
    except ModuleNotFoundError as exc:
        if exc.name != "reference_impl.standalone":
            raise
        return None
    fn_name = getattr(pkg, "BY_CATALOG", {}).get(entry)
    if fn_name is None:
        return None
    where = getattr(pkg, "SNIPPETS", {}).get(fn_name)
    if where is None:
        raise MacroError(f"reference_impl.standalone.BY_CATALOG maps {entry!r} to {fn_name!r}, which SNIPPETS lacks")
    rel, _, region = where.rpartition(":")
    text = (data.REPO / rel).read_text()
    start, end = f"# --8<-- [start:{region}]\n", f"# --8<-- [end:{region}]"
    if start not in text or end not in text:
        raise MacroError(f"{rel}: no snippet region {region!r} (reference_impl.standalone.SNIPPETS names it)")
    code = text.split(start, 1)[1].split(end, 1)[0]
    return {"function": fn_name, "file": rel, "code": code.strip("\n") + "\n"}


def reproducers() -> dict[str, list[str]]:
    """Convention -> labels of the implementations outside transformers that the conformance study found
    bit-identical to it in every case it measured (cases it could not measure do not count either way)."""
    try:
        conf = data.load(CONFORMANCE)
    except MacroError:
        return {}
    labels = {i["key"]: (i["label"], i["engine"]) for i in conf["implementations"]}
    seen: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for case in conf["cases"]:
        for key, res in case["results"].items():
            if "identical" in res:
                seen[case["convention"]][key].append(bool(res["identical"]))
    out = {}
    for conv, by_impl in seen.items():
        out[conv] = [f"{labels[k][0]} ({labels[k][1]})" for k, v in by_impl.items()
                     if k in labels and v and all(v) and labels[k][1] != "Hugging Face transformers"]
    return out


def source_url(version: str, source: str, line: int | None = None) -> str:
    url = f"https://github.com/huggingface/transformers/blob/v{version}/src/transformers/{source}"
    return url + (f"#L{line}" if line else "")


def _version(doc: dict) -> str:
    prov = doc["provenance"]
    v = prov.get("transformers") or (prov.get("versions") or {}).get("transformers")
    if not v:
        raise MacroError(f"docs/data/{FILE}: provenance names no transformers version")
    return v


# names readers search for, for model types the pages do not discuss by name (reference_impl.families.NAMES
# holds those); only the finder and the site search use them
ALIASES = {
    "gemma3": "Gemma 3 (multimodal)", "gemma4_text": "Gemma 4", "gemma4": "Gemma 4 (multimodal)",
    "llama4": "Llama 4 (multimodal)", "deepseek_v2": "DeepSeek-V2", "deepseek_v32": "DeepSeek-V3.2",
    "deepseek_v4": "DeepSeek-V4", "olmo3": "OLMo 3", "qwen2_moe": "Qwen2 MoE", "qwen3_moe": "Qwen3 MoE",
    "qwen3_5_text": "Qwen3.5", "qwen3_5": "Qwen3.5 (multimodal)", "qwen3_5_moe_text": "Qwen3.5 MoE",
    "minimax_m2": "MiniMax-M2", "glm4": "GLM-4", "glm4_moe": "GLM-4.5 (MoE)", "phi4_multimodal": "Phi-4 multimodal",
    "phimoe": "Phi-3.5 MoE", "exaone4": "EXAONE 4", "ernie4_5": "ERNIE 4.5", "falcon_h1": "Falcon-H1",
    "smollm3": "SmolLM3", "seed_oss": "Seed-OSS", "kimi_linear": "Kimi Linear",
}


def display_names() -> dict[str, str]:
    from reference_impl.families import NAMES

    return {**ALIASES, **NAMES}


@lru_cache(maxsize=1)
def page_record() -> dict:
    """What the finder script needs, in one JSON-able record (short keys keep the page small)."""
    doc = census()
    version = _version(doc)
    classes = {c["name"]: c for c in doc["classes"]}
    names = display_names()
    used_classes, used_entries = set(), set()
    ckpts = data.load("checkpoints.json")["checkpoints"]
    models = []
    for m in sorted(doc["models"], key=lambda m: m["model_type"]):
        used_classes.update(m["norm_classes"])
        cats = list(dict.fromkeys(e for e in m["catalog"] if e is not None))  # one per entry, in class order
        used_entries.update(cats)
        models.append({
            "t": m["model_type"], "name": names.get(m["model_type"], ""), "cfg": m["config_class"] or "",
            "cls": m["model_class"] or "", "status": m["status"], "error": m["error"], "norms": m["norm_classes"],
            "cat": cats, "pl": m["placement"] or "other", "pln": m["placement_note"], "qk": m["qk_norm"] or "none",
            "rope": m["qk_rope"], "final": bool(m["final_norm"]), "extra": m["extra_norms"], "eps": m["eps"],
            "eps_attr": m["eps_attr"], "src": source_url(version, m["source"]) if m["source"] else None,
            "layer": [[e["module"], e["class"], e["role"], e["sublayer"], e.get("note")] for e in m["layer"]],
            "par": bool(m.get("parallel")),
            "say": card_words([classes[n] for n in m["norm_classes"]], m["qk_norm"], m["qk_rope"], m["final_norm"],
                              m.get("final_module")),
            "vars": [{"f": v["flag"], "v": v["value"], "d": v["default"], "req": v["requires"], "ch": v["changes"],
                      "pl": v["placement"], "qk": v["qk_norm"], "rope": v["qk_rope"], "par": bool(v["parallel"]),
                      "clip": v["clip"], "set": [c["repo"] for c in ckpts if c["model_type"] == m["model_type"]
                                                 and v["flag"] in c["variants_set"]]}
                     for v in m.get("variants", [])],
        })
    cls_out = {}
    for name in sorted(used_classes):
        c = classes[name]
        cls_out[name] = {"src": source_url(version, c["source"], c["line"]) if c.get("source") else None,
                         "file": c.get("source"), "line": c.get("line"), "cat": c["catalog"], "closest": c["closest"],
                         "ulp": c["max_ulp"], "gain": c["gain"], "eps": c["eps_default"], "bias": c["bias"],
                         "kind": c["kind"], "note": c["note"], "reason": c["reason"],
                         "exception": c.get("exception")}
        if c["catalog"]:
            used_entries.add(c["catalog"])
    catalog = _catalog()
    repro = reproducers()
    cat_out = {}
    for entry in sorted(used_entries):
        spec = catalog[base_entry(entry)]
        code = standalone_code(base_entry(entry))
        convs = [c for c in spec.conventions if c in repro]
        cat_out[entry] = {"title": spec.title, "href": catalog_href(entry), "code": code,
                          "same": sorted({label for c in convs for label in repro[c]})}
    by_type = {m["model_type"]: m for m in doc["models"]}
    checkpoints = [{"r": c["repo"], "al": c["aliases"], "t": c["model_type"], "rel": c["release"], "eps": c["eps"],
                    "set": c["variants_set"], "st": c["structure"], "say": _checkpoint_words(c, by_type, classes),
                    "vals": {f: {"v": v["value"], "ok": v["agree"],
                                 "reads": [[r["source"], r["where"], r["value"]] for r in v["readings"]]}
                             for f, v in c["values"].items()}}
                   for c in ckpts]
    return {"transformers": version, "placement": PLACEMENT_WORDS, "qk": QK_WORDS,
            "models": models, "classes": cls_out, "catalog": cat_out, "checkpoints": checkpoints}


def _checkpoint_words(c: dict, models: dict, classes: dict) -> dict | None:
    """A released checkpoint's card words, from the structure its config resolves to (None: not resolved)."""
    st = c["structure"]
    if not st:
        return None
    base = models.get(c["model_type"]) or {}
    module = base.get("final_module") if st["final_norm"] and base.get("final_norm") else None
    return card_words([classes[n] for n in st["norm_classes"] if n in classes], st["qk_norm"], st["qk_rope"],
                      st["final_norm"], module)


def _embed(record: dict) -> str:
    """JSON safe inside a <script> element (no '<', so no '</script>' can end it early)."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True).replace("<", "\\u003c")


@macro("model_finder")
def model_finder_macro(ctx) -> str:
    ctx.guard_ids.append("census.models_page")
    rec = page_record()
    return (
        '<div class="mf" id="model-finder" data-ready="false">\n'
        '<div class="mf-pickers">\n'
        '<div class="mf-picker" data-slot="a"><label for="mf-q-a">Model</label>'
        '<input id="mf-q-a" class="mf-input" type="search" autocomplete="off" spellcheck="false" '
        'placeholder="e.g. qwen3, Gemma 3, meta-llama/Llama-3.1-8B"><ul class="mf-results" role="listbox"></ul></div>\n'
        '<div class="mf-picker" data-slot="b"><label for="mf-q-b">Compare with</label>'
        '<input id="mf-q-b" class="mf-input" type="search" autocomplete="off" spellcheck="false" '
        'placeholder="a second model (optional)"><ul class="mf-results" role="listbox"></ul></div>\n'
        '</div>\n'
        '<div class="mf-diff" hidden></div>\n'
        '<div class="mf-cards"><div class="mf-card" data-slot="a" hidden></div>'
        '<div class="mf-card" data-slot="b" hidden></div></div>\n'
        '<noscript><p>The finder needs JavaScript; the table below lists every model type.</p></noscript>\n'
        '</div>\n\n'
        f'<script type="application/json" id="mf-data">{_embed(rec)}</script>\n'
    )


def _md(text) -> str:
    return html.escape(str(text)).replace("|", "\\|")


@macro("census_models_table")
def census_models_table_macro(ctx) -> str:
    """One row per model type: its name, classes, catalog entries, how its gain is stored, placement, QK-norm
    and final norm in words (plain text, so the site search indexes every model type and class name)."""
    rec = page_record()
    rows = ["| model type | classes | norm | catalog | gain | placement | QK-norm | final norm |",
            "|---|---|---|---|---|---|---|---|"]
    for m in rec["models"]:
        label = f"`{m['t']}`" + (f" ({_md(m['name'])})" if m["name"] else "")
        if m["status"] != "traced":
            rows.append(f"| {label} | {_md(m['cls'])}, {_md(m['cfg'])} | not traced: {_md(m['error'] or 'error')} "
                        "| | | | | |")
            continue
        cat = ", ".join(f"[`{e}`]({catalog_href(e, markdown=True)})" for e in m["cat"]) or "none"
        say = m["say"]
        rows.append(f"| {label} | {_md(m['cls'])}, {_md(m['cfg'])} | {_md(', '.join(m['norms']) or '-')} | {cat} | "
                    f"{_md(say['gain'])} | {_md(m['pl'] + (', parallel block' if m['par'] else ''))} | "
                    f"{_md(say['qk'])} | {_md(say['final'])} |")
    return "\n".join(rows) + "\n"


@macro("census_catalog_split")
def census_catalog_split_macro(ctx) -> str:
    """``counts.by_catalog`` as a sentence: each catalog entry (linked) with the number of norm classes that
    equal it bit for bit, most first."""
    counts = census()["counts"]["by_catalog"]
    catalog = _catalog()
    parts = []
    for entry, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if base_entry(entry) not in catalog:
            raise MacroError(f"docs/data/{FILE}: counts.by_catalog names {entry!r}, which the catalog does not have")
        parts.append(f"[`{entry}`]({catalog_href(entry, markdown=True)}) {n}")
    if not parts:
        raise MacroError(f"docs/data/{FILE}: counts.by_catalog is empty")
    return ", ".join(parts)


@macro("census_count")
def census_count_macro(ctx, dotted: str) -> str:
    """``{{ census_count("by_placement.pre") }}``: an integer from the census's ``counts``."""
    node = census()["counts"]
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise MacroError(f"{ctx.src_path}: docs/data/{FILE} has no counts.{dotted}")
        node = node[part]
    if not isinstance(node, int) or isinstance(node, bool):
        raise MacroError(f"{ctx.src_path}: docs/data/{FILE} counts.{dotted} is {node!r}, not a count")
    return str(node)


@macro("census_fact")
def census_fact_macro(ctx, what: str) -> str:
    """``{{ census_fact("transformers") }}``: the transformers version the census read."""
    if what != "transformers":
        raise MacroError(f"{ctx.src_path}: census_fact knows only 'transformers', not {what!r}")
    return _version(census())


@macro("census_classes_of")
def census_classes_of_macro(ctx, *entries: str) -> str:
    """``{{ census_classes_of("gated_rms_norm.mamba2") }}``: a table of the norm classes the census found equal
    to these catalog entries bit for bit, with the variant matched and the source file and line."""
    catalog = _catalog()
    for e in entries:
        if e not in catalog:
            raise MacroError(f"{ctx.src_path}: census_classes_of names {e!r}, which the catalog does not have")
    rows = classes_of(entries)
    if not rows:
        raise MacroError(f"{ctx.src_path}: docs/data/{FILE} matches no class to {', '.join(entries)}")
    lines = ["| class | equals | source |", "|---|---|---|"]
    for c, entry, built in sorted(rows, key=lambda r: (r[1], r[0]["name"])):
        src = f"`{c['source']}`" + (f", line {c['line']}" if c.get("line") else "")
        how = f" when built with {_args(built)}" if built else ""
        lines.append(f"| `{c['name']}` | `{entry}`{how} | {src} |")
    return "\n".join(lines)


def _args(args: dict) -> str:
    return ", ".join(f"`{k}={v!r}`" for k, v in args.items())


def classes_of(entries) -> list[tuple[dict, str, dict | None]]:
    """``(class record, matched entry, constructor arguments or None)`` for every class the census found equal
    to one of the catalog ``entries``: as the census builds it, or built as its model builds it under a config
    value (``config_builds``; listed when that build matches another entry than the class's own)."""
    out = []
    for c in census()["classes"]:
        if c.get("catalog") and base_entry(c["catalog"]) in entries:
            out.append((c, c["catalog"], None))
        for b in c.get("config_builds") or []:
            if b["catalog"] and b["catalog"] != c.get("catalog") and base_entry(b["catalog"]) in entries:
                out.append((c, b["catalog"], b["args"]))
    return out


def conformance_modules() -> dict:
    """The ``transformers`` rows of the conformance study (``engine`` "Hugging Face transformers"): ``same``,
    the labels of those equal to their family's module in every case run (the plot draws them as one row), and
    ``differ``, ``(label, verdict, class, census entry, the modules it is compared with)`` for the others: the
    census entry is the one the census finds the class equal to (None where it has no record of the class)."""
    from reference_impl.studies.conformance import target

    conf = data.load(CONFORMANCE)
    classes = {c["name"]: c for c in census()["classes"]}
    same, differ = [], []
    for row in conf["implementations"]:
        if row["engine"] != "Hugging Face transformers":
            continue
        if row["measured"] and row["identical"] == row["measured"]:
            same.append(row["label"])
            continue
        cls = row["label"].split(" (", 1)[0]
        differ.append((row["label"], row["verdict"], cls, (classes.get(cls) or {}).get("catalog"),
                       [target(c).norm_class for c in row["conventions"].split("/")]))
    return {"same": same, "differ": differ}


@macro("conformance_modules")
def conformance_modules_macro(ctx) -> str:
    """``{{ conformance_modules() }}``: how the ``transformers`` modules appear in the plot and the table, and
    why a module that differs from its family's module does (its own casting order, from the census)."""
    mods = conformance_modules()
    n = len(mods["same"]) + len(mods["differ"])
    if not n:
        raise MacroError(f"{ctx.src_path}: docs/data/{CONFORMANCE} has no transformers rows")
    out = (f"The table gives each of the {n} `transformers` modules its own row; the plot draws the "
           f"{len(mods['same'])} that equal their family's module in every case as one row.")
    for label, verdict, cls, entry, against in mods["differ"]:
        why = (f"the census finds `{cls}` equal to [`{entry}`]({catalog_href(entry, markdown=True)}), an order "
               f"of its own, so against {' and '.join(against)} it {verdict}") if entry else f"it {verdict}"
        out += f" {_md(label)} has a row of its own in the plot too: {why}."
    return out
