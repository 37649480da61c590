"""The claims ledger: ``{{ ledger() }}`` renders every claim of ``ledger/claims.yaml`` with its verdict.

Sources:

- ``ledger/claims.yaml``: the canonical list (id, source article, paraphrased claim, owning ledger file,
  ``gpu``: whether settling it needs a GPU measurement).
- ``ledger/<owner>.yaml``: a list of entries, one per claim the owner judges::

      - id: C13
        verdict: refuted            # verified | refuted | partly true | unverifiable here
        claim: "the claim, paraphrased"
        finding: "what is true; markdown; may use {{ data(...) }} and {{ test(...) }}"
        evidence:                   # at least one item; each item has exactly one key
          - test: tests/test_x.py::test_name        # must exist (and pass, checked in phase 2)
          - data: file.json                         # a file under docs/data/
          - cite: "paper, arXiv id, section"        # a precise primary source
        gpu_data: cuda_bench.json   # optional: the committed GPU measurement for a gpu claim

A malformed entry, an unknown or duplicated id, or evidence naming a missing test or data file fails the
build. A claim without an entry is shown as "no verdict yet" (the phase-2 test fails on it), so pages keep
building while the ledger files are being written.
"""
from __future__ import annotations

import html
import json
import posixpath
import re
from functools import lru_cache
from pathlib import Path

from . import guards
from .macros import MacroError, expand, macro
from .data import DataFileError, check_yaml_file

REPO = Path(__file__).resolve().parent.parent
LEDGER = REPO / "ledger"
DATA = REPO / "docs" / "data"
CANONICAL = LEDGER / "claims.yaml"

VERDICTS = ("verified", "refuted", "partly true", "unverifiable here")
VERDICT_CLASS = {"verified": "verified", "refuted": "refuted", "partly true": "partly",
                 "unverifiable here": "unverifiable"}
ENTRY_KEYS = {"id", "verdict", "claim", "finding", "evidence"}
OPTIONAL_KEYS = {"gpu_data"}
EVIDENCE_KINDS = ("test", "data", "cite")
ID_RE = re.compile(r"^C\d\d$")
ARXIV_RE = re.compile(r"arXiv:\s*(\S+)", re.I)
ARXIV_ID_RE = re.compile(r"^\d{4}\.\d{4,5}(v\d+)?[,;.)]?$")
# A bare "arXiv:2102.11972" in a finding or citation, not already inside a link or a code span.
ARXIV_LINK_RE = re.compile(r"(?<![\[/`\w])arXiv:(\d{4}\.\d{4,5})(v\d+)?")


def link_arxiv(text: str) -> str:
    """Turns every bare arXiv id of markdown ``text`` into a link to its abstract page (code spans kept)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else
                   ARXIV_LINK_RE.sub(lambda m: f"[arXiv:{m[1]}{m[2] or ''}](https://arxiv.org/abs/{m[1]}{m[2] or ''})", p)
                   for p in parts)
# the state of a GPU claim whose ledger entry names no committed GPU data file, shown as a badge
NOT_MEASURED = "needs a GPU"


def clear_caches() -> None:
    _canonical_file.cache_clear()
    entries.cache_clear()


@lru_cache(maxsize=1)
def _canonical_file() -> dict:
    """``ledger/claims.yaml`` as a mapping with ``sources``, ``themes`` and ``claims``, validated against
    ``ledger_claims.schema.json`` (the data files' JSON Schema machinery): bad UTF-8, bad YAML, a scalar, a
    claim that is a string or lacks its id fail the build with the file and the field named."""
    try:
        loaded = check_yaml_file(CANONICAL, "ledger_claims")
    except DataFileError as exc:
        raise MacroError(str(exc)) from exc
    if isinstance(loaded, list):  # a bare list of claims
        return {"sources": {}, "themes": [], "claims": loaded}
    return {"sources": loaded.get("sources") or {}, "themes": loaded.get("themes") or [],
            "claims": loaded["claims"]}


def canonical() -> list[dict]:
    """The claims, in order, as listed in ``ledger/claims.yaml``."""
    return _canonical_file()["claims"]


def sources() -> dict:
    """{article id ("000"): {label, title_zh, title_en, kind}} of the source articles."""
    return _canonical_file()["sources"]


def themes() -> list[dict]:
    """[{key, title}] in page order."""
    return _canonical_file()["themes"]


def ledger_files() -> list[Path]:
    return sorted(p for p in LEDGER.glob("*.yaml") if p != CANONICAL)


@lru_cache(maxsize=1)
def entries() -> tuple[dict, list[str]]:
    """Returns ({claim id: entry with ``_file`` added}, [problems]) over every ledger file.

    Problems are schema errors: they do not include claims that have no entry yet.
    """
    problems: list[str] = []
    known = {c["id"]: c for c in canonical()}
    found: dict[str, dict] = {}
    for path in ledger_files():
        rel = f"ledger/{path.name}"
        try:  # structure: ledger_entries.schema.json; cross-references (ids, tests, files): check_entry
            items = check_yaml_file(path, "ledger_entries")
        except DataFileError as exc:
            problems.append(str(exc))
            continue
        for n, entry in enumerate(items):
            where = f"{rel} entry {n}"
            if not isinstance(entry, dict):
                problems.append(f"{where}: must be a mapping")
                continue
            cid = entry.get("id")
            where = f"{rel} {cid or f'entry {n}'}"
            problems += [f"{where}: {p}" for p in check_entry(entry, known, path.stem)]
            if isinstance(cid, str):
                if cid in found:
                    problems.append(f"{where}: duplicate, already in {found[cid]['_file']}")
                else:
                    found[cid] = dict(entry, _file=rel)
    return found, problems


def check_entry(entry: dict, known: dict, owner: str | None = None) -> list[str]:
    """Schema problems of one entry (an empty list when it is well formed)."""
    out = []
    missing = ENTRY_KEYS - set(entry)
    extra = set(entry) - ENTRY_KEYS - OPTIONAL_KEYS
    if missing:
        out.append(f"missing keys {sorted(missing)}")
    if extra:
        out.append(f"unknown keys {sorted(extra)} (allowed: {sorted(ENTRY_KEYS | OPTIONAL_KEYS)})")
    cid = entry.get("id")
    if not isinstance(cid, str) or not ID_RE.match(cid):
        out.append(f"id must look like 'C07', got {cid!r}")
    elif cid not in known:
        out.append(f"id {cid} is not in ledger/claims.yaml")
    elif owner is not None and known[cid].get("owner") != owner:
        out.append(f"{cid} belongs in ledger/{known[cid].get('owner')}.yaml, not ledger/{owner}.yaml")
    if entry.get("verdict") not in VERDICTS:
        out.append(f"verdict must be one of {VERDICTS}, got {entry.get('verdict')!r}")
    for key in ("claim", "finding"):
        if key in entry and (not isinstance(entry[key], str) or len(entry[key].strip()) < 10):
            out.append(f"{key} must be a sentence (a non-empty string)")
    ev = entry.get("evidence")
    if "evidence" in entry:
        if not isinstance(ev, list) or not ev:
            out.append("evidence must be a non-empty list")
        else:
            for item in ev:
                out += check_evidence(item)
    gd = entry.get("gpu_data")
    if gd is not None:
        if not isinstance(gd, str) or not gd.endswith(".json") or ".." in gd.split("/"):
            out.append(f"gpu_data must name a .json file under docs/data, got {gd!r}")
        elif cid in known and not known[cid].get("gpu"):
            out.append("gpu_data is only for claims marked gpu: true in ledger/claims.yaml")
    return out


def check_evidence(item) -> list[str]:
    if not isinstance(item, dict) or len(item) != 1 or next(iter(item)) not in EVIDENCE_KINDS:
        return [f"evidence item must be one of {{test: ...}}, {{data: ...}}, {{cite: ...}}, got {item!r}"]
    kind, value = next(iter(item.items()))
    if not isinstance(value, str) or not value.strip():
        return [f"evidence {kind} must be a non-empty string"]
    if kind == "test":
        if not guards.test_exists(value):
            return [f"evidence test {value!r} does not exist (expected tests/<file>.py::<test function>)"]
    elif kind == "data":
        path = (DATA / value).resolve()
        if DATA.resolve() not in path.parents or not path.is_file():
            return [f"evidence data file docs/data/{value} does not exist"]
    elif kind == "cite":
        if len(value.strip()) < 15:
            return [f"citation {value!r} is too short to be precise"]
        for arxiv in ARXIV_RE.findall(value):
            if not ARXIV_ID_RE.match(arxiv):
                return [f"citation {value!r}: {arxiv!r} is not an arXiv id like 1910.07467"]
    return []


def evidence_tests(entry: dict) -> list[str]:
    return [next(iter(i.values())) for i in entry.get("evidence", []) if isinstance(i, dict) and "test" in i]


def missing_claims() -> list[str]:
    found, _ = entries()
    return [c["id"] for c in canonical() if c["id"] not in found]


def _data_meta(name: str) -> str:
    """'machine, date' of a data file, as far as it records them."""
    try:
        d = json.loads((DATA / name).read_text())
    except (OSError, ValueError):
        return ""
    if not isinstance(d, dict):
        return ""
    m = d.get("machine") if isinstance(d.get("machine"), dict) else {}
    device = d.get("device") or m.get("gpu") or m.get("device") or d.get("gpu") or m.get("cpu")
    if isinstance(device, dict):
        device = device.get("name")
    date = d.get("date") or m.get("date")
    bits = [html.escape(str(b)) for b in (device, date) if b]
    return ", ".join(bits)


def _literal(text: str) -> str:
    """Plain text (a claim, a citation) for markdown: code spans stay, and outside them the characters that
    would start emphasis or links (``y*(1.5 - 0.5*x*y*y)``, ``__init__``) are escaped."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    return "".join(p if len(p) >= 2 and p[0] == p[-1] == "`" else
                   re.sub(r"([\\*_\[\]])", r"\\\1", p).replace("<", "&lt;") for p in parts)


def _cell(text: str) -> str:
    """Makes markdown safe for one table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _link(ctx, name: str) -> str:
    target = posixpath.relpath(f"data/{name}", posixpath.dirname(ctx.src_path) or ".")
    return f"[`{name}`]({target})"


def _gpu_note(ctx, claim: dict, entry: dict | None) -> str:
    if not claim.get("gpu"):
        return ""
    gd = (entry or {}).get("gpu_data")
    if gd and (DATA / gd).is_file():
        meta = _data_meta(gd)
        return f"GPU result: {_link(ctx, gd)}" + (f" ({meta})" if meta else "")
    return (f'GPU measurement: <span class="run-state run-missing" title="no GPU data file is committed for this '
            f'claim">{NOT_MEASURED}</span>')


def source_labels(source: str, named: bool = False) -> str:
    """'000,002' -> 'A, B' linked to the list of source articles on the claims page; with ``named``,
    'article A, *its English title*; ...' so that a reader of one claim sees which article said it."""
    src = sources()
    out = []
    for sid in str(source).split(","):
        art = src.get(sid.strip(), {})
        label = art.get("label", sid.strip())
        link = f"[{label}](#source-{label.lower()})"
        out.append(f"article {link}, *{_literal(art['title_en'])}*" if named and art.get("title_en") else link)
    return ("; " if named else ", ").join(out)


def sources_table() -> str:
    """The source articles: label, original title, English translation, what the text is."""
    rows = ["| article | title (original) | title (English) | what it is |", "|---|---|---|---|"]
    for sid, s in sources().items():
        label = s["label"]
        rows.append(f"| <span id=\"source-{label.lower()}\"></span>**{label}** | {_cell(s['title_zh'])} | "
                    f"{_cell(s['title_en'])} | {_cell(s['kind'])} |")
    return "\n".join(rows)


def _evidence_lines(ctx, e: dict) -> list[str]:
    lines = []
    for item in e["evidence"]:
        kind, value = next(iter(item.items()))
        if kind == "test":
            ctx.guard_ids.append("test:" + value)
            o = guards.outcome(value)
            lines.append(f'- test `{value}` <span class="{guards.css_class(o["status"])}">({html.escape(o["text"])})</span>')
        elif kind == "data":
            meta = _data_meta(value)
            lines.append(f"- data {_link(ctx, value)}" + (f" ({meta})" if meta else ""))
        else:
            lines.append(f"- source: {link_arxiv(_literal(value.strip()))}")
    cid = e["id"]
    others = [t for t in guards.scan_tests()[0].get(cid, []) if t not in evidence_tests(e)]
    if others:
        lines.append(f"- also marked `guards({cid!r})`: " + ", ".join(f"`{t}`" for t in others))
    return lines


@macro("ledger")
def ledger_macro(ctx) -> str:
    """The whole ledger, grouped by theme: per theme a summary table (claim id and verdict, paraphrase and
    its article; every cell filled), then one section per claim with the finding (shown once) and evidence."""
    found, problems = entries()
    if problems:
        raise MacroError(f"{ctx.src_path}: the claims ledger has problems:\n  " + "\n  ".join(problems))
    claims = canonical()
    counts = {v: 0 for v in VERDICTS}
    for e in found.values():
        counts[e["verdict"]] += 1
    missing = missing_claims()
    theme_list = themes() or [{"key": None, "title": "Claims"}]
    known_themes = {t["key"] for t in theme_list}
    stray = [c["id"] for c in claims if c.get("theme") not in known_themes]
    if themes() and stray:
        raise MacroError(f"{ctx.src_path}: claims without a known theme in ledger/claims.yaml: {stray}")

    out = []
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    out.append(f"**{len(found)} of {len(claims)} claims judged**" + (f": {summary}." if summary else "."))
    if missing:
        out.append(f'\n!!! warning "No verdict yet"\n    {", ".join(missing)}: these claims have no ledger entry.\n')
    for theme in theme_list:
        mine = [c for c in claims if theme["key"] is None or c.get("theme") == theme["key"]]
        if not mine:
            continue
        out.append(f"\n## {theme['title']}\n")
        # the id and verdict column needs no name (a link and a coloured verdict say what they are); unnamed,
        # it also draws no label line in each card of the phone layout
        out.append("| | what the article says |")
        out.append("|---|---|")
        for c in mine:
            e = found.get(c["id"])
            verdict = _verdict(e["verdict"]) if e else '<span class="verdict verdict-none">no verdict yet</span>'
            out.append(f"| [{c['id']}](#{c['id'].lower()})<br>{verdict} | {_cell(_literal((e or c)['claim']))} "
                       f"<small>({source_labels(c['source'])})</small> |")
        # the findings fold under the table (a link to a claim's anchor opens its fold), so the page stays
        # a table of verdicts a reader can scan
        out.append(f'\n<details class="note claim-findings" markdown="1"><summary>More: the finding and evidence '
                   f'for {"this claim" if len(mine) == 1 else f"each of these {len(mine)} claims"}</summary>\n')
        for c in mine:
            out += _claim_section(ctx, c, found.get(c["id"]))
        out.append("\n</details>\n")
    return "\n".join(out) + "\n"


def _claim_section(ctx, c: dict, e: dict | None) -> list[str]:
    cid = c["id"]
    label = e["verdict"] if e else "no verdict yet"
    out = [f"\n### {cid}: {label} {{ #{cid.lower()} }}\n"]
    if e is None:
        out.append(f"*{_literal(c['claim'])}* ({source_labels(c['source'])})\n")
        out.append(f"No verdict yet: expected in `ledger/{c['owner']}.yaml`.\n")
        note = _gpu_note(ctx, c, None)
        if note:
            out.append(f"{note}.\n")
        return out
    if cid in guards.scan_tests()[0]:
        ctx.guard_ids.append(cid)
    out.append(f"*{_literal(e['claim'])}* ({source_labels(c['source'], named=True)})\n")
    out.append(f"{link_arxiv(expand(e['finding'].strip(), ctx))}\n")
    note = _gpu_note(ctx, c, e)
    if note:
        out.append(f"{note}.\n")
    out.append(f'<details class="evidence" markdown="1"><summary>Evidence ({len(e["evidence"])} '
               f'item{"s" if len(e["evidence"]) != 1 else ""}; entry <code>{e["_file"]}</code>)</summary>\n')
    out += _evidence_lines(ctx, e)
    out.append("\n</details>\n")
    return out


def _verdict(v: str) -> str:
    return f'<span class="verdict verdict-{VERDICT_CLASS[v]}">{html.escape(v)}</span>'


@macro("ledger_sources")
def ledger_sources_macro(ctx) -> str:
    """The table of source articles (label, original title, English title, what it is)."""
    return sources_table() + "\n"


@macro("ledger_count")
def ledger_count_macro(ctx) -> str:
    """The number of claims in ``ledger/claims.yaml``."""
    return str(len(canonical()))
