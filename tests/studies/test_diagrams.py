"""The explanatory diagrams (``docs/assets/diagrams/*.svg``, written by ``reference_impl.studies.diagrams``).

The committed files must be exactly what the generator writes (a hand edit fails), parse as SVG, carry a
title and a description (their alt text), paint no opaque background, keep text legible on a phone and
in contrast with the page in both palettes, and draw mathematics that is right.
"""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from reference_impl.studies import diagrams as D

SVG_NS = "{http://www.w3.org/2000/svg}"
FILES = D.render_all()
pytestmark = pytest.mark.guards("diagrams")


def _rgb(color: str) -> tuple[float, float, float]:
    m = re.fullmatch(r"#([0-9a-fA-F]{6})", color)
    assert m, f"colour {color!r} is not #rrggbb"
    return tuple(int(m.group(1)[k:k + 2], 16) / 255 for k in (0, 2, 4))


def contrast(c1: str, c2: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours."""
    def lum(c):
        ch = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in _rgb(c)]
        return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]
    hi, lo = sorted((lum(c1), lum(c2)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _theme(name: str) -> D.Theme:
    return D.DARK if name.endswith("-dark.svg") else D.LIGHT


def _root(name: str) -> ET.Element:
    return ET.fromstring(FILES[name])


def test_committed_files_are_what_the_generator_writes():
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in D.OUT_DIR.glob("*.svg")}
    missing = sorted(set(FILES) - set(on_disk))
    stale = sorted(set(on_disk) - set(FILES))
    assert not missing, f"not generated yet (run python -m reference_impl.studies.diagrams): {missing}"
    assert not stale, f"SVG files no diagram writes any more: {stale}"
    edited = sorted(n for n in FILES if on_disk[n] != FILES[n])
    assert not edited, (f"{edited} differ from the generator's output; edit reference_impl/studies/diagrams/ "
                        "and regenerate instead of editing the SVG")


def test_generator_is_deterministic_and_writes_every_file(tmp_path):
    written = D.write(tmp_path)
    assert sorted(p.name for p in written) == sorted(FILES)
    for p in written:
        assert p.read_text(encoding="utf-8") == FILES[p.name]
    assert D.render_all() == FILES


def test_there_are_at_least_eight_diagrams_each_in_both_palettes():
    assert len(D.DIAGRAMS) >= 8
    for d in D.DIAGRAMS:
        assert f"{d.name}.svg" in FILES and f"{d.name}-dark.svg" in FILES
        assert FILES[f"{d.name}.svg"] != FILES[f"{d.name}-dark.svg"]


@pytest.mark.parametrize("name", sorted(FILES))
def test_svg_parses_and_has_title_and_desc(name):
    root = _root(name)
    assert root.tag == SVG_NS + "svg"
    title, desc = root.find(SVG_NS + "title"), root.find(SVG_NS + "desc")
    assert title is not None and title.text and title.text.strip()
    assert desc is not None and desc.text and len(desc.text.strip()) > 40
    assert root.get("role") == "img"
    w, h = float(root.get("width")), float(root.get("height"))
    assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}"
    assert 500 <= w <= 700, "keep the viewBox width modest so text stays legible when shrunk"
    assert h > 0


def _bbox(el: ET.Element) -> tuple[float, float, float, float] | None:
    tag = el.tag.removeprefix(SVG_NS)
    f = lambda k: float(el.get(k, 0))  # noqa: E731
    if tag == "rect":
        return f("x"), f("y"), f("x") + f("width"), f("y") + f("height")
    if tag == "circle":
        return f("cx") - f("r"), f("cy") - f("r"), f("cx") + f("r"), f("cy") + f("r")
    if tag in ("path", "polygon"):
        nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", el.get("d") or el.get("points") or "")]
        if len(nums) < 4:
            return None
        xs, ys = nums[0::2], nums[1::2]
        return min(xs), min(ys), max(xs), max(ys)
    return None


@pytest.mark.parametrize("name", sorted(FILES))
def test_no_opaque_background(name):
    root = _root(name)
    w, h = float(root.get("width")), float(root.get("height"))
    assert "background" not in (root.get("style") or "")
    assert root.find(f".//{SVG_NS}style") is None, "no stylesheet: colours are explicit per palette"
    for el in root.iter():
        fill = el.get("fill")
        if not fill or fill == "none" or float(el.get("fill-opacity", 1)) < 1:
            continue
        box = _bbox(el)
        if box is None:
            continue
        area = max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])
        assert area < 0.5 * w * h, f"{el.tag} filled with {fill} covers {area / (w * h):.0%} of the canvas"


@pytest.mark.parametrize("name", sorted(FILES))
def test_text_is_legible_on_a_phone(name):
    root = _root(name)
    w = float(root.get("width"))
    texts = list(root.iter(SVG_NS + "text"))
    assert texts, "a diagram without labels"
    for t in texts:
        px = float(t.get("font-size")) * D.PHONE_CONTENT_PX / w
        assert px >= D.MIN_TEXT_PX - 1e-9, f"{t.text!r} is {px:.1f} px tall at {D.PHONE_CONTENT_PX} px width"


@pytest.mark.parametrize("name", sorted(FILES))
def test_colours_contrast_with_the_page(name):
    page = _theme(name).page
    for el in _root(name).iter():
        tag = el.tag.removeprefix(SVG_NS)
        if tag == "text":
            assert contrast(el.get("fill"), page) >= 4.5, f"text {el.text!r} in {el.get('fill')} on {page}"
            continue
        stroke = el.get("stroke")
        if stroke and stroke != "none" and float(el.get("stroke-opacity", 1)) == 1:
            assert contrast(stroke, page) >= 3.0, f"{tag} stroke {stroke} on {page}"
        fill = el.get("fill")
        if fill and fill != "none" and el.get("fill-opacity") is None and tag in ("circle", "path"):
            assert contrast(fill, page) >= 3.0, f"{tag} fill {fill} on {page}"


def test_theme_colours_pass_on_their_page():
    for t in D.THEMES:
        for field in ("fg", "muted", "ln", "rms", "bn", "good", "bad"):
            assert contrast(getattr(t, field), t.page) >= 4.5, f"{t.name}.{field}"


def test_the_generator_refuses_unreadable_or_unlabelled_diagrams():
    with pytest.raises(ValueError, match="title"):
        D.Svg(600, 400, "", "a description", D.LIGHT)
    s = D.Svg(600, 400, "t", "d", D.LIGHT)
    with pytest.raises(ValueError, match="font size"):
        s.text(10, 30, "tiny", size=12)
    with pytest.raises(ValueError, match="off the"):
        s.text(590, 30, "a label far too long for the canvas")
    with pytest.raises(ValueError, match="full-canvas"):
        s.rect(0, 0, 600, 400, "none", fill="#ffffff")


def test_markdown_lines_point_at_existing_files():
    for d in D.DIAGRAMS:
        page = Path("docs") / d.page
        assert (D.REPO / page).is_file(), f"{d.name}: page {d.page} does not exist"
        lines = D.markdown_lines(d).splitlines()
        assert lines[0].endswith(f"{d.name}.svg#only-light)") and lines[1].endswith(f"{d.name}-dark.svg#only-dark)")
        for line in lines:
            rel = re.search(r"\]\(([^)#]+)#", line).group(1)
            assert (D.REPO / page.parent / rel).resolve().is_file(), line


# ---- the mathematics drawn ----------------------------------------------------------------------

@pytest.mark.guards("diagram.newton")
def test_newton_update_is_the_tangent_zero_and_numbers_are_drawn():
    y, a = sp.symbols("y a", positive=True)
    f = 1 / y**2 - a
    assert sp.simplify(y - f / sp.diff(f, y) - y * (sp.Rational(3, 2) - a * y**2 / 2)) == 0
    y1 = D.newton_step(D.NEWTON_Y0, D.NEWTON_A)
    y2 = D.newton_step(y1, D.NEWTON_A)
    root = 1 / math.sqrt(D.NEWTON_A)
    assert D.NEWTON_Y0 < y1 < y2 < root  # convex f: from below, the iterates increase towards the root
    assert abs(y2 - root) < abs(y1 - root) ** 2 / root * 1.6  # quadratic convergence: error ~ 1.5 e^2
    text = FILES["newton-rsqrt.svg"]
    for v in (y1, y2, root):
        assert f"{v:.4f}" in text


@pytest.mark.guards("diagram.geometry")
def test_geometry_points_are_on_the_sphere_and_circle():
    d = 3
    x = np.array(D.GEOM_X_RMS)
    y = x / np.sqrt(np.mean(x * x))                       # RMSNorm, gain 1, eps = 0
    assert np.isclose(np.linalg.norm(y), math.sqrt(d))
    assert np.linalg.norm(x) > math.sqrt(d)               # drawn outside the sphere, so the scaling shows
    x = np.array(D.GEOM_X_LN)
    xc = x - x.mean()
    y = xc / np.sqrt(np.mean(xc * xc))                    # LayerNorm, gain 1, bias 0, eps = 0
    assert np.isclose(np.linalg.norm(y), math.sqrt(d)) and np.isclose(y.sum(), 0.0)
    # with eps > 0 the output is strictly inside, as the description says
    eps = 1e-2
    assert np.linalg.norm(xc / np.sqrt(np.mean(xc * xc) + eps)) < math.sqrt(d)
    assert "eps -&gt; 0" in FILES["geometry.svg"] or "eps -> 0" in FILES["geometry.svg"]
    # the camera keeps 1 pointing straight up the screen
    cam = D.Camera()
    (x0, y0), (x1, y1) = cam([0, 0, 0]), cam([1, 1, 1])
    assert abs(x1 - x0) < 1e-9 and y1 < y0


@pytest.mark.guards("diagram.jacobian")
def test_jacobian_matrices_are_the_projections_drawn():
    rng = np.random.default_rng(0)
    d = 5
    x = rng.standard_normal(d)
    xhat = x / np.sqrt(np.mean(x * x))                    # eps = 0
    P = np.eye(d) - np.outer(xhat, xhat) / d
    assert np.allclose(P @ P, P) and np.allclose(P, P.T) and np.allclose(P @ x, 0)
    xc = x - x.mean()
    xhat = xc / np.sqrt(np.mean(xc * xc))
    ones = np.ones(d)
    P = np.eye(d) - np.outer(ones, ones) / d - np.outer(xhat, xhat) / d
    assert np.allclose(P @ P, P) and np.allclose(P @ ones, 0) and np.allclose(P @ xhat, 0)
    assert np.linalg.matrix_rank(P) == d - 2
    # and they are the backward of the float64 oracle: dx = r P (gamma * dy)
    from reference_impl import oracle
    dy = rng.standard_normal(d)
    dx, _ = oracle.rms_norm_backward(dy[None], x[None], eps=0.0)
    r = 1 / np.sqrt(np.mean(x * x))
    xh = x * r
    assert np.allclose(dx[0], r * (np.eye(d) - np.outer(xh, xh) / d) @ dy)
    dx, _, _ = oracle.layer_norm_backward(dy[None], x[None], eps=0.0)
    r = 1 / np.sqrt(np.mean(xc * xc))
    assert np.allclose(dx[0], r * P @ dy)


@pytest.mark.guards("diagram.warp_reduce")
def test_butterfly_leaves_the_full_sum_in_every_lane():
    vals = np.arange(32, dtype=np.int64) * 7 + 3
    v = vals.copy()
    for m in (16, 8, 4, 2, 1):
        v = v + v[np.arange(32) ^ m]                       # __shfl_xor_sync(full mask, v, m)
    assert (v == vals.sum()).all()
    assert "__shfl_xor_sync(0xffffffff, v, m)" in FILES["warp-reduce.svg"]


@pytest.mark.guards("diagram.dweight")
def test_float32_order_example_is_real():
    fixed = D._f32_sum(D.PARTIALS, (0, 1, 2, 3))
    other = D._f32_sum(D.PARTIALS, (2, 0, 3, 1))
    assert fixed != other
    assert fixed == D._f32_sum(D.PARTIALS, (0, 1, 2, 3))  # the same order, the same bits
    acc = np.float32(0)
    for v in np.array(D.PARTIALS, dtype=np.float32)[[2, 0, 3, 1]]:
        acc = acc + v
    assert float(acc) == other
    text = FILES["dweight-reduction.svg"]
    assert f"→ {D._short(fixed)}<" in text and f"→ {D._short(other)}<" in text


@pytest.mark.guards("diagram.fused_residual")
def test_fused_byte_counts():
    mib = D.FUSE_TOKENS * D.FUSE_HIDDEN * D.FUSE_BYTES / 2**20
    text = FILES["fused-residual.svg"]
    assert f"{5 * mib:g} MiB" in text and f"{4 * mib:g} MiB" in text
