"""The data views agree with themselves: each test renders a page's claim with the site's own macro and reads
the data file it comes from, and checks that the two say the same thing.

The macros read the committed data files (docs/data/*.json) as they are: schema and provenance checks have their
own tests (a data file made stale by an edit elsewhere must not hide a rendering that contradicts its data).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from site_hooks import catalog as CAT
from site_hooks import census as C
from site_hooks import data
from site_hooks.macros import PageContext

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"


def _read(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.fixture
def committed(monkeypatch):
    """The site's data loader serving the committed files, unvalidated; the macros' caches cleared."""
    files = {p.name: json.loads(p.read_text()) for p in DATA.glob("*.json")}
    monkeypatch.setattr(data, "validated", lambda: files)
    monkeypatch.setattr(data, "load", lambda name: files[name])
    C.clear_caches()
    yield files
    C.clear_caches()


def _models(census: dict) -> dict:
    return {m["model_type"]: m for m in census["models"]}


# ------------------------------------------------------------------ the model cards' words

def _table_rows(md: str) -> dict[str, list[str]]:
    """The census models table as ``model type -> cells`` (the Markdown the macro writes)."""
    out = {}
    for line in md.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        out[re.match(r"`([^`]+)`", cells[0]).group(1)] = cells
    return out


def test_each_model_row_says_its_gain_qk_order_and_final_norm_in_the_census_words(committed):
    census = committed["census.json"]
    classes = {c["name"]: c for c in census["classes"]}
    md = C.census_models_table_macro(PageContext("models.md"))
    head = [c.strip() for c in md.splitlines()[0].split("|")[1:-1]]
    col = {name: head.index(name) for name in ("gain", "QK-norm", "final norm")}
    rows = _table_rows(md)
    assert set(rows) == {m["model_type"] for m in census["models"]}
    checked = 0
    for t, m in _models(census).items():
        if m["status"] != "traced":
            continue
        cells = rows[t]
        gains = {classes[n]["gain"] for n in m["norm_classes"]} & {"w", "1+w"}
        said = cells[col["gain"]]
        if gains == {"w"}:
            assert said == "stored as w, not 1 + w", (t, said)
        elif gains == {"1+w"}:
            assert said == "stored as 1 + w (offset)", (t, said)
        elif not gains:
            assert said.startswith("none stored"), (t, said)
        else:
            assert "1 + w (offset) in" in said and "as w, not 1 + w, in" in said, (t, said)
        qk = cells[col["QK-norm"]]
        if m["qk_norm"] == "none":
            assert qk == "none, so no order with RoPE to choose", (t, qk)
        elif m["qk_rope"]:
            assert qk.endswith(f", {m['qk_rope']} RoPE"), (t, qk)
        else:
            assert "no order with RoPE to choose" in qk, (t, qk)
        final = cells[col["final norm"]]
        assert final == (f"yes ({m['final_module']})" if m["final_norm"] else "no"), (t, final)
        checked += 1
    assert checked == census["counts"]["traced"]


def test_the_cards_answer_the_readers_questions_for_the_models_they_asked_about(committed):
    """Gemma 4 stores w where Gemma 3 stores 1 + w; DeepSeek-V4's final norm is model.norm; a model without
    QK-norm says there is no order to choose (the card record the finder draws from)."""
    rec = C.page_record()
    say = {m["t"]: m["say"] for m in rec["models"]}
    census = _models(committed["census.json"])
    assert say["gemma4_text"]["gain"] == "stored as w, not 1 + w"
    assert say["gemma3_text"]["gain"] == "stored as 1 + w (offset)"
    assert census["deepseek_v4"]["final_norm"] is True
    assert say["deepseek_v4"]["final"] == f"yes ({census['deepseek_v4']['final_module']})"
    assert census["deepseek_v4"]["final_module"] == "model.norm"
    no_qk = [t for t, m in census.items() if m["qk_norm"] == "none"]
    assert no_qk and all(say[t]["qk"] == "none, so no order with RoPE to choose" for t in no_qk)
    # a released checkpoint's card says what its own structure says
    for c in rec["checkpoints"]:
        if c["st"]:
            assert c["say"]["final"].startswith("yes" if c["st"]["final_norm"] else "no"), c["r"]
            assert c["say"]["qk"] == C.qk_words(c["st"]["qk_norm"], c["st"]["qk_rope"]), c["r"]


# ------------------------------------------------------------------ the catalog's users against the finder's

def test_the_offset_gain_card_lists_every_model_the_finder_shows_with_it(committed):
    """The rms_norm.gemma card (the 1 + w gain) names every model type whose finder card shows that entry."""
    ctx = PageContext(CAT._catalog()["rms_norm.gemma"].page)
    card = CAT.norm_macro(ctx, "rms_norm.gemma")
    rec = C.page_record()
    finder = [m["name"] or m["t"] for m in rec["models"]
              if any(C.base_entry(e) == "rms_norm.gemma" for e in m["cat"])]
    assert "Qwen3.5" in finder
    said = re.search(r"Used by (\d+) model types? in transformers [^:]+: (.+?)\.(?: |$)", card, re.M)
    assert said, card
    listed = [s.strip() for s in said.group(2).split(", ")]
    assert sorted(set(listed)) == sorted(set(finder))
    assert int(said.group(1)) == len(set(finder))


def test_every_card_counts_the_users_the_census_has(committed):
    for name, spec in CAT._catalog().items():
        users = CAT.census_users(name)
        if not users:
            continue
        card = CAT.norm_macro(PageContext(spec.page), name)
        assert f"Used by {len(users)} model type" in card, name


# ------------------------------------------------------------------ the conformance page

def test_conformance_sentence_counts_the_module_rows_of_its_table(committed):
    conf = committed["conformance.json"]
    hf = [r for r in conf["implementations"] if r["engine"] == "Hugging Face transformers"]
    same = [r for r in hf if r["measured"] and r["identical"] == r["measured"]]
    text = C.conformance_modules_macro(PageContext("conformance.md"))
    m = re.search(r"each of the (\d+) `transformers` modules its own row; the plot draws the (\d+) that equal", text)
    assert m, text
    assert int(m.group(1)) == len(hf) and int(m.group(2)) == len(same)
    classes = {c["name"]: c for c in committed["census.json"]["classes"]}
    for r in hf:
        if r in same:
            continue
        cls = r["label"].split(" (", 1)[0]
        assert r["label"] in text and r["verdict"] in text, r["label"]
        entry = classes[cls]["catalog"]
        assert f"`{cls}` equal to [`{entry}`]" in text
    # the page says it, not the old claim that every module is one row
    page = (REPO / "docs" / "conformance.md").read_text()
    assert "{{ conformance_modules() }}" in page and "are one row" not in page


def test_a_verdict_never_counts_cases_that_did_not_run():
    """The study's verdict, recomputed from each committed row's counts, names the cases not run wherever the
    row lists a reason for not running some (ONNX Runtime's NOT_IMPLEMENTED bfloat16 cases)."""
    from reference_impl.studies.conformance import verdict

    rows = _read("conformance.json")["implementations"]
    partial = [r for r in rows if 0 < r["measured"] < r["cases"]]
    assert any("NOT_IMPLEMENTED" in " ".join(r["unavailable"]) for r in partial)
    for r in rows:
        v = verdict(r)
        if 0 < r["measured"] < r["cases"]:
            assert r["unavailable"], r["key"]
            assert f"{r['cases'] - r['measured']} of {r['cases']} not run" in v, (r["key"], v)
            assert f"of {r['measured']} cases run" in v, (r["key"], v)
        elif r["measured"] == r["cases"]:
            assert "not run" not in v and (v == "bit-identical") == (r["identical"] == r["cases"]), (r["key"], v)
        n = re.search(r"differs in (\d+) of (\d+)", v)
        if n:
            assert int(n.group(1)) == r["measured"] - r["identical"] and int(n.group(2)) == r["measured"]
    ort = next(r for r in rows if r["key"] == "ort_rms_normalization")
    assert ort["measured"] == ort["cases"] or "not run" in verdict(ort)
