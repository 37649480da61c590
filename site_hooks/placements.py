"""Tables of the placements study (``docs/data/placements.json``) for docs/placements.md.

``{{ placement_results() }}``: one row per placement, final validation loss without and with QK-norm;
``{{ lr_sweep_table() }}``: one row per learning rate; ``{{ reproductions_table() }}``: one row per published
finding with its verdict. Every number is read from the data file; the verdicts were computed by the study.
"""
from __future__ import annotations

from . import data
from .macros import macro

FILE = "placements.json"


def _span(s: dict, fmt: str = ".3f") -> str:
    if not s["n_finite"]:
        return f"diverged ({s['n']} of {s['n']})"
    text = f"{s['mean']:{fmt}} ({s['min']:{fmt}} to {s['max']:{fmt}})"
    if s["n_finite"] < s["n"]:
        text += f", {s['n'] - s['n_finite']} of {s['n']} diverged"
    return text


@macro("placement_results")
def placement_results_macro(ctx) -> str:
    d = data.lookup(FILE, "placements")
    variants = data.lookup(FILE, "variants")
    rows = ["| placement | loss without QK-norm | loss with QK-norm | largest attention logit, without / with |",
            "|---|---|---|---|"]
    for key, v in variants.items():
        a, b = d[key], d[key + "+qk"]
        logit = f"{a['max_attn_logit'].get('mean', float('nan')):.1f} / {b['max_attn_logit'].get('mean', float('nan')):.1f}"
        rows.append(f"| {v['label']} | {_span(a['final'])} | {_span(b['final'])} | {logit} |")
    return "\n".join(rows) + "\n"


@macro("lr_sweep_table")
def lr_sweep_table_macro(ctx) -> str:
    sw = data.lookup(FILE, "lr_sweep")
    no, qk = sw["sides"]["no_qk_norm"]["by_lr"], sw["sides"]["qk_norm"]["by_lr"]
    rows = ["| peak learning rate | loss without QK-norm | loss with QK-norm | largest logit without | largest logit with |",
            "|---|---|---|---|---|"]
    for key in no:
        rows.append(f"| {no[key]['lr']:g} | {_span(no[key]['final'])} | {_span(qk[key]['final'])} | "
                    f"{_span(no[key]['max_attn_logit'], '.3g')} | {_span(qk[key]['max_attn_logit'], '.3g')} |")
    sens = lambda side: _span(sw["sides"][side]["sensitivity"], ".3f")   # noqa: E731
    rows.append(f"| learning-rate sensitivity | {sens('no_qk_norm')} | {sens('qk_norm')} | | |")
    return "\n".join(rows) + "\n"


@macro("reproductions_table")
def reproductions_table_macro(ctx) -> str:
    rows = ["| paper | finding | measured here | verdict |", "|---|---|---|---|"]
    for r in data.lookup(FILE, "reproductions"):
        links = ", ".join(f"[arXiv:{a}](https://arxiv.org/abs/{a})" for a in r["arxiv"].split("; "))
        evidence = "<br>".join(c["text"] for c in r["comparisons"])
        tests = "; ".join(f"{c} ({'yes' if p else 'no'})" for c, p in zip(r["criteria"], r["parts"]))
        rows.append(f"| {r['paper']} ({links}) | {r['finding']} | {r['measured']}.<br>{evidence}<br>"
                    f"*Criteria:* {tests} | **{r['verdict_text']}** |")
    return "\n".join(rows) + "\n"
