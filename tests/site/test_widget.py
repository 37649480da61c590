"""The LayerNorm / RMSNorm playground (docs/playground.md, docs/assets/javascripts/norm-widget.js), in Chromium.

The test types inputs into the widget and compares every number it displays with the float64 NumPy oracle
(``reference_impl.oracle``) for the same input ``c*x + s``: both norms, with and without eps and shift.
It drags the input with a mouse and with a finger (touch events), moves it with the keyboard, checks the
invariances the page promises, bad input, a 375 px phone (no horizontal scroll) and the dark palette.
Without Chromium the tests are skipped locally and fail under ``CI=true`` (as in test_browser.py).
"""
from __future__ import annotations


import numpy as np
import pytest

from reference_impl import oracle
from reference_impl.studies import diagrams as D

pytestmark = [pytest.mark.site, pytest.mark.guards("widget.numbers")]
PAGE = "playground/"
SHOWN = 0.5e-4 + 1e-12      # the widget shows 4 decimals


@pytest.fixture
def open_widget(browser, site_url):
    """Opens the playground; returns the page, after checking that the widget built itself."""
    contexts, problems = [], []

    def _open(scheme="light", width=1280, height=900, **kw):
        context = browser.new_context(color_scheme=scheme, viewport={"width": width, "height": height}, **kw)
        contexts.append(context)
        page = context.new_page()
        page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        context.route("**/*", lambda route: route.continue_() if "//127.0.0.1" in route.request.url
                      else (problems.append(f"outside request: {route.request.url}"), route.abort()))
        page.goto(site_url + PAGE, wait_until="load")
        page.wait_for_selector('.norm-widget[data-ready="true"]', timeout=15000)
        return page

    yield _open
    for c in contexts:
        c.close()
    assert not problems, problems


def _set(page, key: str, value) -> None:
    page.locator(f'.norm-widget [data-control="{key}"]').first.fill(str(value))


def _setup(page, x, c=1.0, s=0.0, eps=0.0) -> None:
    for i, v in enumerate(x):
        _set(page, f"x{i}", v)
    _set(page, "c", c)
    _set(page, "s", s)
    _set(page, "eps", eps)


def _shown(page, root=".norm-widget") -> dict[str, tuple[str, float]]:
    """key -> (displayed text, full-precision value) for every output of the first widget under root."""
    return {k: (t, float(v)) for k, t, v in page.evaluate(
        """sel => [...document.querySelector(sel).querySelectorAll('[data-key]')]
              .map(e => [e.dataset.key, e.textContent, e.dataset.value])""", root)}


def _expected(x, c, s, eps) -> dict[str, float]:
    x = np.asarray(x, dtype=np.float64)
    xin = c * x + s
    ln = oracle.layer_norm_forward(xin, eps=eps)
    rms = oracle.rms_norm_forward(xin, eps=eps)
    out = {f"in.{i}": v for i, v in enumerate(xin)}
    out.update({f"ln.y.{i}": v for i, v in enumerate(ln)})
    out.update({f"rms.y.{i}": v for i, v in enumerate(rms)})
    mu = xin.mean()
    out.update({"ln.mean": mu, "ln.var": np.mean((xin - mu) ** 2), "rms.rms": np.sqrt(np.mean(xin**2)),
                "ln.norm": np.linalg.norm(ln), "rms.norm": np.linalg.norm(rms), "ln.ysum": ln.sum(),
                "rms.ymean": rms.mean(),
                "sqrtd": np.sqrt(len(x)),
                "ln.delta": np.abs(ln - oracle.layer_norm_forward(x, eps=eps)).max(),
                "rms.delta": np.abs(rms - oracle.rms_norm_forward(x, eps=eps)).max()})
    return out


def _check(page, x, c, s, eps, root=".norm-widget"):
    shown, want = _shown(page, root), _expected(x, c, s, eps)
    assert set(want) <= set(shown), f"outputs missing: {sorted(set(want) - set(shown))}"
    for key, value in want.items():
        text, full = shown[key]
        assert abs(float(text) - value) <= SHOWN, f"{key}: shows {text}, oracle {value!r}"
        assert abs(full - value) <= 1e-12 * max(1.0, abs(value)), f"{key}: {full!r} vs oracle {value!r}"
    return want


CASES = {
    "plain": ((1.2, -0.7, 2.5), 1.0, 0.0, 0.0),
    "scale-shift-eps": ((1.2, -0.7, 2.5), 2.5, 1.5, 0.5),
    "small-vector-eps": ((0.03, -0.02, 0.05), 1.0, 0.0, 1e-3),
    "negative-scale": ((-2.0, 3.0, 0.25), -1.5, -0.75, 1e-5),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_numbers_match_the_oracle(open_widget, case):
    x, c, s, eps = CASES[case]
    page = open_widget()
    _setup(page, x, c, s, eps)
    want = _check(page, x, c, s, eps)
    if case == "small-vector-eps":   # eps is not negligible here: the outputs sit well inside the sphere
        assert want["rms.norm"] < 0.9 * np.sqrt(3) and want["ln.norm"] < 0.9 * np.sqrt(3)
    if case == "scale-shift-eps":    # the shift moves RMSNorm's output, never LayerNorm's beyond eps' effect
        assert want["rms.delta"] > 0.1


def test_invariances_are_visible(open_widget):
    page = open_widget()
    x = (1.2, -0.7, 2.5)
    _setup(page, x, c=0.3, s=0.0, eps=0.0)            # scaling: both outputs unchanged
    shown = _shown(page)
    assert shown["ln.delta"][0] == "0.0000" and shown["rms.delta"][0] == "0.0000"
    _check(page, x, 0.3, 0.0, 0.0)
    _set(page, "c", 1)
    _set(page, "s", 1.0)                               # shifting: LayerNorm unchanged, RMSNorm not
    shown = _shown(page)
    assert shown["ln.delta"][0] == "0.0000"
    assert shown["rms.delta"][1] > 0.05
    _check(page, x, 1.0, 1.0, 0.0)
    _set(page, "s", 0)
    _set(page, "eps", 0.1)
    _set(page, "c", 0.05)                              # eps > 0 and a small input: only approximately invariant
    shown = _shown(page)
    assert shown["ln.delta"][1] > 0.05 and shown["rms.delta"][1] > 0.05
    assert shown["rms.norm"][1] < 0.5 * np.sqrt(3)
    _check(page, x, 0.05, 0.0, 0.1)


def test_constant_row_and_bad_input(open_widget):
    page = open_widget()
    _setup(page, (1.0, 1.0, 1.0), eps=0.0)
    shown = _shown(page)
    assert all(shown[f"ln.y.{i}"][0] == "undefined" for i in range(3))
    assert "LayerNorm is undefined" in page.locator(".norm-widget .nw-msg").inner_text()
    assert abs(float(shown["rms.y.0"][0]) - 1.0) <= SHOWN          # RMSNorm of (1, 1, 1) is (1, 1, 1)
    _set(page, "eps", 0.1)                                         # eps > 0: the centred row is 0, so is the output
    _check(page, (1.0, 1.0, 1.0), 1.0, 0.0, 0.1)
    assert page.locator(".norm-widget .nw-msg").inner_text().strip() == ""
    before = _shown(page)
    _set(page, "eps", -1)
    box = page.locator('.norm-widget [data-control="eps"]')
    assert box.get_attribute("aria-invalid") == "true"
    assert "eps must be 0 or more" in page.locator(".norm-widget .nw-msg").inner_text()
    assert _shown(page) == before, "a rejected input must not change the outputs"
    _set(page, "x0", "")
    assert page.locator('.norm-widget [data-control="x0"]').get_attribute("aria-invalid") == "true"
    assert _shown(page) == before


def _inputs(page) -> np.ndarray:
    shown = _shown(page)
    return np.array([shown[f"in.{i}"][1] for i in range(3)])


def _svg_units_per_px(page) -> float:
    return page.evaluate("() => { const s = document.querySelector('.norm-widget svg');"
                         " return s.viewBox.baseVal.width / s.getBoundingClientRect().width; }")


def _handle_centre(page) -> tuple[float, float]:
    box = page.locator(".norm-widget .nw-handle").bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


UNIT = 44.0   # picture units per unit of x in norm-widget.js


def test_drag_with_mouse_and_with_touch(open_widget):
    right = D.Camera().right        # the widget uses the diagrams' camera: 1 points up the screen
    for touch in (False, True):
        page = open_widget(has_touch=touch)
        page.locator(".norm-widget").scroll_into_view_if_needed()
        x0 = _inputs(page)
        cx, cy = _handle_centre(page)
        dx = -40.0
        if touch:
            cdp = page.context.new_cdp_session(page)
            cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [{"x": cx, "y": cy}]})
            for k in range(1, 5):
                cdp.send("Input.dispatchTouchEvent",
                         {"type": "touchMove", "touchPoints": [{"x": cx + dx * k / 4, "y": cy}]})
            cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
        else:
            page.mouse.move(cx, cy)
            page.mouse.down()
            page.mouse.move(cx + dx, cy, steps=4)
            page.mouse.up()
        x1 = _inputs(page)
        moved = x1 - x0
        expect = dx * _svg_units_per_px(page) / UNIT * right
        assert np.allclose(moved, expect, atol=0.02), f"touch={touch}: moved {moved}, expected {expect}"
        shown = _shown(page)
        xs = [shown[f"in.{i}"][1] for i in range(3)]
        _check(page, xs, 1.0, 0.0, 0.0)


def test_keyboard(open_widget):
    page = open_widget()
    _setup(page, (1.0, 0.5, -0.5))
    page.locator('.norm-widget [data-control="x0-range"]').focus()
    page.keyboard.press("ArrowRight")
    assert abs(_inputs(page)[0] - 1.01) < 1e-9
    before = _inputs(page)
    page.locator(".norm-widget .nw-handle").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowUp")
    cam = D.Camera()
    assert np.allclose(_inputs(page) - before, 0.1 * cam.right + 0.1 * cam.up, atol=1e-9)
    xs = _inputs(page)
    _check(page, xs, 1.0, 0.0, 0.0)
    page.locator(".norm-widget .nw-reset").click()
    assert np.allclose(_inputs(page), [1.2, 0.3, -0.6])


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_phone_width(open_widget, scheme):
    page = open_widget(scheme=scheme, width=375, height=800)
    sizes = page.evaluate("""() => {
        const w = document.querySelector('.norm-widget'), r = w.getBoundingClientRect();
        const img = [...document.querySelectorAll('img[src*="diagrams/geometry"]')].find(i => i.offsetParent);
        return {doc: document.documentElement.scrollWidth, inner: innerWidth, left: r.left, right: r.right,
                widgetScroll: w.scrollWidth, widgetClient: w.clientWidth,
                img: img ? img.getBoundingClientRect().width : null,
                column: document.querySelector('.md-content__inner').getBoundingClientRect().width};
    }""")
    assert sizes["doc"] <= sizes["inner"], f"horizontal scroll at 375 px: {sizes}"
    assert sizes["left"] >= 0 and sizes["right"] <= 375, sizes
    assert sizes["widgetScroll"] <= sizes["widgetClient"], sizes
    # the diagrams' legibility rule assumes this content width (reference_impl/studies/diagrams/svg.py)
    assert sizes["column"] >= D.PHONE_CONTENT_PX - 0.5, sizes
    assert sizes["img"] is not None and sizes["img"] >= D.PHONE_CONTENT_PX - 0.5, sizes
    # every control is reachable and not squeezed to nothing
    widths = page.eval_on_selector_all(".norm-widget input", "es => es.map(e => e.getBoundingClientRect().width)")
    assert widths and min(widths) > 40, widths
    _setup(page, (0.3, -1.1, 0.4), 1.7, 0.2, 0.01)
    _check(page, (0.3, -1.1, 0.4), 1.7, 0.2, 0.01)


def _contrast(rgb1, rgb2) -> float:
    def lum(rgb):
        ch = [v / 255 for v in rgb]
        ch = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in ch]
        return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]
    hi, lo = sorted((lum(rgb1), lum(rgb2)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _rgb(css: str) -> tuple[int, int, int]:
    nums = css[css.index("(") + 1:css.index(")")].replace("/", ",").split(",")
    return tuple(int(round(float(v))) for v in nums[:3])


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_palette(open_widget, scheme):
    page = open_widget(scheme=scheme)
    assert page.evaluate("() => document.body.getAttribute('data-md-color-scheme')") == \
        ("slate" if scheme == "dark" else "default")
    colours = page.evaluate("""() => {
        const c = s => getComputedStyle(document.querySelector(s));
        return {bg: getComputedStyle(document.body).backgroundColor, text: c('.norm-widget td').color,
                ln: c('.norm-widget .nw-ln').stroke, rms: c('.norm-widget .nw-rms').stroke,
                input: c('.norm-widget .nw-in').stroke, num: c('.norm-widget input[type=number]').color,
                numbg: c('.norm-widget input[type=number]').backgroundColor};
    }""")
    bg = _rgb(colours["bg"])
    assert _contrast(_rgb(colours["text"]), bg) >= 4.5, colours
    assert _contrast(_rgb(colours["num"]), _rgb(colours["numbg"])) >= 4.5, colours
    for key in ("ln", "rms", "input"):
        assert _contrast(_rgb(colours[key]), bg) >= 3.0, (key, colours)
    # the diagram on the page: only the variant for this palette is shown, and it loaded
    shown = page.evaluate("""() => [...document.querySelectorAll('img[src*="diagrams/"]')]
        .filter(i => i.offsetParent).map(i => [i.getAttribute('src'), i.naturalWidth])""")
    assert len(shown) == 1 and shown[0][1] > 0, shown
    assert shown[0][0].endswith("-dark.svg#only-dark" if scheme == "dark" else "geometry.svg#only-light"), shown


def test_two_dimensional_widget_and_late_placeholders(open_widget):
    """A placeholder added after load (as Material's instant navigation does) is built by init();
    data-dim=2 works and a wrong data-dim says what is wrong."""
    page = open_widget()
    page.evaluate("""() => {
        const a = document.createElement('div'); a.className = 'norm-widget'; a.id = 'late2'; a.dataset.dim = '2';
        const b = document.createElement('div'); b.className = 'norm-widget'; b.id = 'bad'; b.dataset.dim = '7';
        document.querySelector('article').append(a, b);
        NormWidget.init();
    }""")
    page.wait_for_selector('#late2[data-ready="true"]')
    assert "data-dim must be 2 or 3" in page.locator("#bad").inner_text()
    x, c, s, eps = (0.8, -1.9), 1.3, 0.4, 0.02
    for i, v in enumerate(x):
        page.locator(f'#late2 [data-control="x{i}"]').fill(str(v))
    page.locator('#late2 [data-control="c"]').fill(str(c))
    page.locator('#late2 [data-control="s"]').fill(str(s))
    page.locator('#late2 [data-control="eps"]').fill(str(eps))
    _check(page, x, c, s, eps, root="#late2")
    # the first widget was not built twice
    assert page.locator(".norm-widget").first.locator("svg").count() == 1


PRESETS = {  # preset -> (x, c, s, eps) it sets; x None: the default x
    "scale": (None, 2.5, 0.0, 0.0), "shift": (None, 1.0, 1.5, 0.0), "small": (None, 0.05, 0.0, 0.01),
    "constant": ((1.0, 1.0, 1.0), 1.0, 0.0, 0.0),
}
DEFAULT_X = (1.2, 0.3, -0.6)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_set_what_the_page_describes(open_widget, preset):
    """Each "thing to try" on the page has a button; the numbers it shows are the oracle's."""
    page = open_widget()
    _setup(page, (0.4, -2.0, 1.0), 0.7, -0.3, 0.2)   # somewhere else first: the preset must set everything
    page.locator(f'.norm-widget [data-preset="{preset}"]').click()
    x, c, s, eps = PRESETS[preset]
    x = DEFAULT_X if x is None else x
    assert np.allclose(_inputs(page), c * np.asarray(x) + s)
    if preset == "constant":
        assert "LayerNorm is undefined" in page.locator(".norm-widget .nw-msg").inner_text()
        return
    want = _check(page, x, c, s, eps)
    if preset == "scale":
        assert want["ln.delta"] < 1e-12 and want["rms.delta"] < 1e-12
    if preset == "shift":
        assert want["ln.delta"] < 1e-12 < 0.1 < want["rms.delta"]
    if preset == "small":
        assert want["rms.norm"] < 0.9 * np.sqrt(3)


def test_default_input_shows_the_rmsnorm_arrow_beyond_the_input(open_widget):
    """RMSNorm's output lies along the input: at the default input it must reach past the input's tip."""
    page = open_widget()
    lengths = page.evaluate("""() => Object.fromEntries(['nw-in', 'nw-rms'].map(c => {
        const l = document.querySelector('.norm-widget .' + c);
        return [c, Math.hypot(l.x2.baseVal.value - l.x1.baseVal.value, l.y2.baseVal.value - l.y1.baseVal.value)];
    }))""")
    assert lengths["nw-rms"] > lengths["nw-in"] + 12, lengths


def test_phone_shows_picture_presets_and_numbers_on_one_screen(open_widget):
    page = open_widget(width=375, height=740)
    page.locator(".norm-widget").scroll_into_view_if_needed()
    box = page.evaluate("""() => {
        const q = s => document.querySelector('.norm-widget ' + s).getBoundingClientRect();
        const f = q('.nw-figure'), t = q('.nw-table');
        return {top: f.top, bottom: t.bottom, presets: q('.nw-presets').bottom};
    }""")
    assert box["bottom"] - box["top"] <= 740, f"picture to output table spans {box['bottom'] - box['top']:.0f} px"
