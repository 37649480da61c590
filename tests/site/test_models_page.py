"""The "Find your model" page (docs/models.md, docs/assets/javascripts/models.js) in a real browser: the
finder finds a model by its type, family or class name and opens its card; the card says what the census
says (convention, placement, QK-norm, eps) and draws every norm of the traced layer; two models side by
side mark exactly the rows that differ; the page does not scroll sideways on a 375 px phone; the diagram
stays visible in the dark palette; and the site's search box finds the page by a model's name.

Expected values are read from docs/data/census.json, never typed here. ``NORMLAB_SITE_DIR`` points the
tests at a site built elsewhere (e.g. a private ``mkdocs build --site-dir``)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CENSUS = REPO / "docs" / "data" / "census.json"
pytestmark = [pytest.mark.site, pytest.mark.guards("census.models_page")]
PHONE = {"width": 375, "height": 800}
DESKTOP = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def census() -> dict:
    return json.loads(CENSUS.read_text())


def _model(census: dict, model_type: str) -> dict:
    rows = [m for m in census["models"] if m["model_type"] == model_type]
    assert rows, f"docs/data/census.json has no model type {model_type!r}"
    return rows[0]


@pytest.fixture(scope="module")
def built(request) -> Path:
    other = os.environ.get("NORMLAB_SITE_DIR")
    path = Path(other) if other else request.getfixturevalue("site_dir")
    assert (path / "models" / "index.html").is_file(), f"{path} has no models/index.html"
    return path


@pytest.fixture(scope="module")
def models_url(browser, built):
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(built)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def open_models(browser, models_url):
    made = []

    def _open(fragment: str = "", viewport=DESKTOP, dark: bool = False):
        context = browser.new_context(color_scheme="dark" if dark else "light", viewport=viewport)
        made.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(models_url + "models/" + fragment)
        page.wait_for_selector('#model-finder[data-ready="true"]', timeout=15000)
        page.errors = errors
        if dark:
            page.evaluate("() => document.body.setAttribute('data-md-color-scheme', 'slate')")
        return page

    yield _open
    for c in made:
        c.close()


def _facts(page, slot: str) -> dict[str, str]:
    """The card's facts, label -> text."""
    return page.eval_on_selector(
        f'.mf-card[data-slot="{slot}"] .mf-facts',
        "dl => { const o = {}; dl.querySelectorAll('dt').forEach(dt => { o[dt.textContent] = "
        "dt.nextElementSibling.textContent; }); return o; }")


def _type(page, slot: str, text: str) -> list[str]:
    box = page.locator(f"#mf-q-{slot}")
    box.fill("")
    box.press_sequentially(text, delay=10)
    page.wait_for_selector(f'.mf-picker[data-slot="{slot}"] .mf-result', timeout=5000)
    return page.eval_on_selector_all(f'.mf-picker[data-slot="{slot}"] .mf-result', "bs => bs.map(b => b.dataset.model)")


@pytest.mark.parametrize("query, first", [("qwen3", "qwen3"), ("Gemma 3", "gemma3_text"), ("LlamaForCausalLM", "llama"),
                                          ("Qwen3RMSNorm", "qwen3")])
def test_finder_finds_a_model_by_type_family_or_class_name(open_models, census, query, first):
    _model(census, first)
    page = open_models()
    found = _type(page, "a", query)
    assert found[0] == first, f"{query!r}: the first result is {found[0]!r}, expected {first!r} (all: {found})"
    page.click(f'.mf-picker[data-slot="a"] .mf-result[data-model="{first}"]')
    page.wait_for_selector(f'.mf-card[data-slot="a"][data-model="{first}"]')
    assert page.evaluate("location.hash") == f"#model={first}"
    assert not page.errors, page.errors


def test_finder_says_when_nothing_matches(open_models):
    page = open_models()
    page.locator("#mf-q-a").press_sequentially("zzqqxx", delay=10)
    page.wait_for_selector('.mf-picker[data-slot="a"] .mf-none')
    assert page.locator('.mf-picker[data-slot="a"] .mf-result').count() == 0


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text"])
def test_card_shows_what_the_census_says(open_models, census, model_type):
    m = _model(census, model_type)
    page = open_models(f"#model={model_type}")
    facts = _facts(page, "a")
    assert m["catalog"], f"{model_type}: the census matched no catalog entry"
    for entry in m["catalog"]:
        assert entry in facts["convention"], (entry, facts["convention"])
    assert facts["placement"].startswith(m["placement"] + ":"), facts["placement"]
    if m["qk_norm"] == "per_head":
        assert "per head" in facts["QK-norm"]
    if m["qk_rope"]:
        assert f"{m['qk_rope']} RoPE" in facts["QK-norm"]
    for cls in m["norm_classes"]:
        assert cls in facts["norm class"]
    assert facts["eps"].startswith(format(m["eps"], "g")), (m["eps"], facts["eps"])
    card = page.locator('.mf-card[data-slot="a"]')
    # every norm module of the traced layer is drawn (its name is in a box's title)
    titles = " ".join(card.locator("svg.mf-diagram title").all_text_contents())
    for entry in m["layer"]:
        assert entry["module"] in titles, f"{model_type}: {entry['module']} is not in the diagram"
    # the source line of each norm class links to transformers at the census's version
    hrefs = card.locator(".mf-class a").evaluate_all("as => as.map(a => a.href)")
    classes = {c["name"]: c for c in census["classes"]}
    for cls in m["norm_classes"]:
        c = classes[cls]
        assert any(h.endswith(f"{c['source']}#L{c['line']}") for h in hrefs), (cls, hrefs)
    assert not page.errors, page.errors


def test_card_offers_the_code_to_copy_or_says_why_not(open_models, census):
    """The code shown is the standalone function's file text (reference_impl/standalone/), or the card says
    that there is none for this convention."""
    m = _model(census, "qwen3")
    page = open_models("#model=qwen3")
    block = page.locator('.mf-card[data-slot="a"] details.mf-copyblock').first
    block.locator("summary").click()
    try:
        from reference_impl.standalone import BY_CATALOG
    except ModuleNotFoundError:
        BY_CATALOG = {}
    fn = BY_CATALOG.get(m["catalog"][0])
    if fn is None:
        assert "No standalone function" in block.inner_text()
        return
    shown = block.locator("pre code").inner_text()
    source = next((p.read_text() for p in (REPO / "reference_impl" / "standalone").glob("*.py")
                   if f"def {fn}(" in p.read_text()), "")
    assert f"def {fn}(" in shown and shown.strip() in source, shown[:300]


def test_two_models_side_by_side_mark_the_rows_that_differ(open_models, census):
    a, b = _model(census, "qwen3"), _model(census, "gemma3_text")
    page = open_models("#model=qwen3&compare=gemma3_text")
    page.wait_for_selector('.mf-card[data-slot="b"][data-model="gemma3_text"]')
    rows = page.eval_on_selector_all(".mf-diff tbody tr", "rs => rs.map(r => [r.className, r.querySelector('th').textContent])")
    differs = {label.rstrip(" \u2260") for cls, label in rows if cls == "mf-differs"}
    same = {label for cls, label in rows if cls != "mf-differs"}
    expect = {"convention": a["catalog"] != b["catalog"], "placement": a["placement"] != b["placement"],
              "QK-norm": a["qk_norm"] != b["qk_norm"], "norm class": a["norm_classes"] != b["norm_classes"],
              "final norm": a["final_norm"] != b["final_norm"]}
    for label, different in expect.items():
        assert (label in differs) == different and (label in same) != different, (label, rows)
    assert "convention" in differs  # Llama's order against Gemma's (1 + w): the comparison has something to show


def test_compare_picker_fills_the_second_card(open_models):
    page = open_models("#model=llama")
    found = _type(page, "b", "olmo2")
    assert "olmo2" in found
    page.click('.mf-picker[data-slot="b"] .mf-result[data-model="olmo2"]')
    page.wait_for_selector('.mf-card[data-slot="b"][data-model="olmo2"]')
    assert page.evaluate("location.hash") == "#model=llama&compare=olmo2"
    assert page.locator(".mf-diff table").is_visible()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_phone_width_does_not_scroll_sideways(open_models, dark):
    page = open_models("#model=gemma3_text&compare=deepseek_v3", viewport=PHONE, dark=dark)
    _type(page, "a", "qwen")  # the results list open too
    page.locator(".mf-copyblock summary").first.click()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page is {width} px wide on a {PHONE['width']} px phone"
    box = page.locator('.mf-card[data-slot="a"] svg.mf-diagram').bounding_box()
    assert box and box["width"] > 200 and box["x"] + box["width"] <= PHONE["width"], box


def _luminance(css: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_diagram_is_visible_in_both_palettes(open_models, dark):
    page = open_models("#model=gemma3_text", dark=dark)
    colours = page.evaluate("""() => {
        const svg = document.querySelector('.mf-card[data-slot="a"] svg.mf-diagram');
        const bg = getComputedStyle(document.body).backgroundColor;
        const text = getComputedStyle(svg.querySelector('.mf-norm text')).fill;
        const box = getComputedStyle(svg.querySelector('.mf-norm rect'));
        const stream = getComputedStyle(svg.querySelector('.mf-stream')).stroke;
        return {bg, text, fill: box.fill, stroke: box.stroke, stream};
    }""")
    assert _contrast(colours["text"], colours["fill"]) >= 4.5, colours
    assert _contrast(colours["stroke"], colours["bg"]) >= 3, colours
    assert _contrast(colours["stream"], colours["bg"]) >= 3, colours
    assert (_luminance(colours["bg"]) < 0.2) == dark, colours


@pytest.mark.parametrize("name", ["Qwen3", "Gemma 4", "MiniMax-M2"])
def test_site_search_finds_the_models_page_by_a_model_name(open_models, name):
    page = open_models()
    page.keyboard.press("s")  # Material's shortcut that opens the search box
    page.locator("input.md-search__input").press_sequentially(name, delay=20)
    page.wait_for_selector(".md-search-result__item a", timeout=15000)
    hrefs = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(a => a.href)")
    assert any("/models/" in h for h in hrefs), hrefs


def test_search_index_holds_every_model_type(built, census):
    """Each model type and class name of the census is text on the models page, so the site search finds it."""
    index = json.loads((built / "search" / "search_index.json").read_text())
    text = " ".join(d["text"] + " " + d["title"] for d in index["docs"] if d["location"].startswith("models/"))
    missing = [m["model_type"] for m in census["models"] if m["model_type"] not in text or m["model_class"] not in text]
    assert not missing, f"not in the models page's search text: {missing[:20]}"


CHECKPOINTS = REPO / "docs" / "data" / "checkpoints.json"


def _checkpoint(repo: str) -> dict:
    rows = [c for c in json.loads(CHECKPOINTS.read_text())["checkpoints"] if c["repo"] == repo]
    assert rows, f"docs/data/checkpoints.json has no checkpoint {repo!r}"
    return rows[0]


@pytest.mark.parametrize("query", ["meta-llama/Llama-3.1-8B", "Meta-Llama-3.1-8B", "llama-3.1-8b"])
def test_finder_finds_a_checkpoint_by_repo_id_or_part_of_its_name(open_models, census, query):
    repo = "meta-llama/Meta-Llama-3.1-8B"
    c = _checkpoint(repo)
    page = open_models()
    found = _type(page, "a", query)
    assert found[0] == repo, f"{query!r}: the first result is {found[0]!r} (all: {found})"
    page.click(f'.mf-picker[data-slot="a"] .mf-result[data-model="{repo}"]')
    page.wait_for_selector(f'.mf-card[data-slot="a"][data-model="{repo}"] .mf-checkpoint')
    row = page.eval_on_selector(f'.mf-card[data-slot="a"] .mf-checkpoint tbody tr',
                                "tr => Array.from(tr.children).map(td => td.textContent)")
    default = _model(census, c["model_type"])["eps"]
    assert row[0] == "rms_norm_eps" and float(row[1]) == c["eps"] and float(row[2]) == default, row
    assert c["eps"] != default and "litgpt" in row[3]
    assert float(_facts(page, "a")["eps"].split()[0]) == c["eps"]
    assert not page.errors, page.errors


def test_a_checkpoint_card_shows_a_disagreement_between_its_sources(open_models):
    c = _checkpoint("google/gemma-7b")
    assert not c["values"]["rms_norm_eps"]["agree"]
    page = open_models("#model=" + "google%2Fgemma-7b")
    page.wait_for_selector('.mf-card[data-slot="a"] .mf-checkpoint tr.mf-disagree')
    text = page.inner_text('.mf-card[data-slot="a"] .mf-checkpoint tr.mf-disagree')
    assert "sources disagree" in text and all(r["source"] in text for r in c["values"]["rms_norm_eps"]["readings"])


def test_a_default_card_names_the_fields_that_change_it_and_who_sets_them(open_models, census):
    m = _model(census, "opt")
    flags = [v["flag"] for v in m["variants"]]
    assert "do_layer_norm_before" in flags
    page = open_models("#model=opt")
    box = page.inner_text('.mf-card[data-slot="a"] .mf-default')
    assert "default config" in box and all(f in box for f in flags), box
    setter = _checkpoint("facebook/opt-350m")
    assert setter["variants_set"] == ["do_layer_norm_before"] and setter["repo"] in box
    page = open_models("#model=llama")
    assert "changes no norm structure" in page.inner_text('.mf-card[data-slot="a"] .mf-default')
