"""Diagrams of the math: the normalization axes, where a norm sits, the sphere, the Jacobian."""
from __future__ import annotations

import math

import numpy as np

from .svg import Camera, Svg, Theme, _circle_points, _draw_3d_curve, _unit, fmt

# ------------------------------------------------------------------------------------------------
# a. which axes each norm normalizes over
# ------------------------------------------------------------------------------------------------
def norm_axes(t: Theme) -> Svg:
    s = Svg(600, 380, "Which axes BatchNorm, LayerNorm and RMSNorm normalize over",
            "Three copies of an activation tensor with axes batch B, sequence T and hidden d. "
            "BatchNorm (purple) computes its mean and variance for one hidden channel over all batch and "
            "sequence positions: a slab across B and T. LayerNorm (orange) computes mean and variance for one "
            "token over its d hidden values: a rod along d. RMSNorm (blue) uses the same rod as LayerNorm but "
            "only the mean of squares, with no mean subtracted.", t)
    nd, nb, nt = 5, 4, 3
    cw, ch, dx, dy = 26, 27, 14, -12    # cell width/height; depth offset per sequence step

    def cube(ox, oy, color, cells_front, cells_top, cells_right):
        # front face (t = 0): cell (b, j); top face (b = 0): cell (k, j); right face (j = nd - 1): cell (b, k)
        def front(b, j):
            x, y = ox + j * cw, oy + b * ch
            return [(x, y), (x + cw, y), (x + cw, y + ch), (x, y + ch)]

        def top(k, j):
            x, y = ox + j * cw + k * dx, oy + k * dy
            return [(x, y), (x + cw, y), (x + cw + dx, y + dy), (x + dx, y + dy)]

        def right(b, k):
            x, y = ox + nd * cw + k * dx, oy + b * ch + k * dy
            return [(x, y), (x + dx, y + dy), (x + dx, y + ch + dy), (x, y + ch)]

        for b in range(nb):
            for j in range(nd):
                hit = (b, j) in cells_front
                s.poly(front(b, j), t.muted, 1.2, fill=color if hit else t.tint,
                       fill_opacity=0.85 if hit else 0.12, closed=True)
        for k in range(nt):
            for j in range(nd):
                hit = (k, j) in cells_top
                s.poly(top(k, j), t.muted, 1.2, fill=color if hit else t.tint,
                       fill_opacity=0.85 if hit else 0.22, closed=True)
        for b in range(nb):
            for k in range(nt):
                hit = (b, k) in cells_right
                s.poly(right(b, k), t.muted, 1.2, fill=color if hit else t.tint,
                       fill_opacity=0.85 if hit else 0.32, closed=True)
        # axis labels
        s.text(ox + nd * cw / 2, oy + nb * ch + 26, "d", t.fg, anchor="middle", italic=True)
        s.text(ox - 8, oy + nb * ch / 2 + 8, "B", t.fg, anchor="end", italic=True)
        s.text(ox + nt * dx / 2 - 8, oy + nt * dy / 2 - 8, "T", t.fg, anchor="end", italic=True)

    panels = [
        ("BatchNorm", t.bn, ["per channel,", "over B and T"],
         {(b, 2) for b in range(nb)}, {(k, 2) for k in range(nt)}, set()),
        ("LayerNorm", t.ln, ["per token,", "over d"],
         {(1, j) for j in range(nd)}, set(), {(1, 0)}),
        ("RMSNorm", t.rms, ["as LayerNorm,", "but no mean"],
         {(1, j) for j in range(nd)}, set(), {(1, 0)}),
    ]
    for i, (name, color, lines, f, tp, r) in enumerate(panels):
        cx = 100 + 200 * i
        s.text(cx, 40, name, color, size=24, anchor="middle", weight="bold")
        cube(cx - (nd * cw + nt * dx) / 2 + 12, 100, color, f, tp, r)
        for k, ln in enumerate(lines):
            s.text(cx, 282 + 28 * k, ln, t.fg, anchor="middle")
    s.text(300, 366, "tensor (B, T, d); coloured: one group of statistics", t.muted, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# b. Post-, Pre- and Sandwich-Norm
# ------------------------------------------------------------------------------------------------
def norm_placement(t: Theme) -> Svg:
    s = Svg(600, 536, "Post-Norm, Pre-Norm and Sandwich-Norm placement in a Transformer sublayer",
            "Three diagrams of one residual sublayer, F being attention or the MLP. Post-Norm (the original "
            "Transformer, arXiv:1706.03762, and BERT, whose output layers compute LayerNorm(hidden_states + "
            "input_tensor) in transformers' modeling_bert.py) adds the residual first and normalizes the sum: "
            "N(x + F(x)), so the norm sits on the residual stream. Pre-Norm (GPT-2's ln_1 and ln_2, Llama's "
            "input_layernorm and post_attention_layernorm, which despite its name normalizes the MLP's input) "
            "normalizes only the input of the branch: "
            "x + F(N(x)); the residual stream itself is never normalized inside the block, so such models add "
            "one final norm after the last block (GPT-2's ln_f). Sandwich-Norm (CogView, arXiv:2105.13290; "
            "Gemma 2 and Gemma 3, with pre_feedforward_layernorm and post_feedforward_layernorm in "
            "transformers' modeling_gemma2.py) normalizes the branch input and the branch output: "
            "x + N(F(N(x))).", t)
    box_w, box_h, gap = 132, 44, 24

    def box(cx, y, label, color, filled):
        s.rect(cx - box_w / 2, y, box_w, box_h, color, 2.0, fill=color if filled else t.tint,
               fill_opacity=0.22 if filled else 0.14, rx=8)
        s.text(cx, y + 29, label, t.fg, anchor="middle", size=21)

    columns = [
        ("Post-Norm", ["F", "+", "N"], "N(x + F(x))", "BERT"),
        ("Pre-Norm", ["N", "F", "+"], "x + F(N(x))", "GPT-2, Llama"),
        ("Sandwich", ["N", "F", "N", "+"], "x + N(F(N(x)))", "Gemma 2"),
    ]
    top, bottom = 92, 396
    for i, (name, steps, formula, example) in enumerate(columns):
        cx = 200 * i + 112
        mid = 200 * i + 100
        s.text(mid, 36, name, t.fg, size=24, anchor="middle", weight="bold")
        s.text(cx, top - 10, "x", t.fg, anchor="middle", italic=True, size=22)
        split_y = top + 14
        s.line(cx, top - 2, cx, split_y, t.fg, 2)
        s.dot(cx, split_y, t.fg, 4.5)
        y = split_y
        for st in steps:
            if st == "+":
                centre = y + gap + 14
                s.arrow(cx, y, cx, centre - 14, t.fg, 2)
                s.circle(cx, centre, 14, t.fg, 2.0)
                s.line(cx - 8, centre, cx + 8, centre, t.fg, 2.0)
                s.line(cx, centre - 8, cx, centre + 8, t.fg, 2.0)
                bx = cx - box_w / 2 - 20          # the residual path bypasses the branch on the left
                s.poly([(cx, split_y), (bx, split_y), (bx, centre)], t.muted, 2.2)
                s.arrow(bx, centre, cx - 14, centre, t.muted, 2.2)
                y = centre + 14
            else:
                s.arrow(cx, y, cx, y + gap, t.fg, 2)
                if st == "N":
                    box(cx, y + gap, "Norm", t.rms, True)
                else:
                    box(cx, y + gap, "Attn / MLP", t.fg, False)
                y += gap + box_h
        s.arrow(cx, y, cx, bottom, t.fg, 2)
        s.text(mid, bottom + 38, formula, t.fg, anchor="middle", size=21)
        s.text(mid, bottom + 70, "e.g. " + example, t.muted, anchor="middle", size=21)
    s.text(300, 524, "F: attention or MLP; N: LayerNorm or RMSNorm", t.muted, size=21, anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# c. geometry of the outputs
# ------------------------------------------------------------------------------------------------
GEOM_X_RMS = (3.0, 1.0, 0.5)
GEOM_X_LN = (3.0, 0.5, 0.0)


def geometry(t: Theme) -> Svg:
    d = 3
    R = math.sqrt(d)
    x_rms = np.array(GEOM_X_RMS)
    y_rms = R * x_rms / np.linalg.norm(x_rms)
    x_ln = np.array(GEOM_X_LN)
    mu = float(x_ln.mean())
    xc = x_ln - mu
    y_ln = R * xc / np.linalg.norm(xc)
    s = Svg(600, 460, "Where RMSNorm and LayerNorm outputs lie, for d = 3",
            "Two 3-D sketches with gain 1, bias 0 and eps -> 0, d = 3, seen from just above the plane "
            "orthogonal to the all-ones vector 1 (which points straight up). Left, RMSNorm: the input "
            f"x = ({', '.join(fmt(v) for v in x_rms)}) is scaled along its own ray onto the sphere of radius "
            f"sqrt(d) = {R:.3f}; every positive multiple c x lands on the same point y. Right, LayerNorm: "
            f"x = ({', '.join(fmt(v) for v in x_ln)}) first loses its component along 1 (its mean, "
            f"{mu:g}, is subtracted from every entry), which moves it down into the plane orthogonal to 1, and "
            "is then scaled onto the circle of radius sqrt(d) in that plane, the equator of the sphere. "
            "With eps > 0 the outputs lie slightly inside the sphere.", t)
    n = _unit([1, 1, 1])
    for panel, (cx, name, color) in enumerate([(150, "RMSNorm", t.rms), (450, "LayerNorm", t.ln)]):
        cam = Camera(scale=68, origin=(cx - 40 * panel, 250))
        a, b = cam.plane_basis()
        s.text(cx, 34, name, color, size=24, anchor="middle", weight="bold")
        o = cam([0, 0, 0])
        # the sphere's outline (a circle in an orthographic view) and its equator orthogonal to 1
        s.circle(o[0], o[1], cam.scale * R, t.muted, 1.5, fill=t.tint, fill_opacity=0.10)
        _draw_3d_curve(s, cam, _circle_points([0, 0, 0], a, b, R), color if panel else t.muted,
                       2.6 if panel else 1.2)
        s.dot(*o, t.fg, 3.5)
        if panel == 0:
            far = cam(1.28 * x_rms)
            s.line(*o, *far, t.muted, 1.6, dash="4 5")
            tip = cam(x_rms)
            s.arrow(*o, *tip, t.fg, 2.5)
            s.text(tip[0] + 10, tip[1] + 12, "x", t.fg, italic=True, size=22)
            s.text(far[0] - 8, far[1] - 6, "c·x", t.muted, size=21, anchor="end")
            yy = cam(y_rms)
            s.arrow(*o, *yy, color, 3.4)
            s.dot(*yy, color, 5.5)
            s.text(yy[0] + 12, yy[1] + 18, "y", color, italic=True, weight="bold", size=22)
            s.line(o[0], o[1], o[0] - cam.scale * R, o[1], t.muted, 1.5)
            s.text(o[0] - cam.scale * R / 2, o[1] - 10, "√d", t.fg, anchor="middle", size=22)
        else:
            top = cam(1.5 * n)
            s.arrow(*o, *top, t.fg, 2.2)
            s.text(top[0] - 10, top[1] + 8, "1", t.fg, weight="bold", size=22, anchor="end")
            tip, foot = cam(x_ln), cam(xc)
            s.arrow(*o, *tip, t.fg, 2.5)
            s.text(tip[0], tip[1] - 12, "x", t.fg, italic=True, size=22, anchor="middle")
            s.line(*tip, *foot, t.muted, 2, dash="5 5")
            s.text((tip[0] + foot[0]) / 2 + 6, (tip[1] + foot[1]) / 2 - 6, "− μ1", t.fg, size=21)
            s.arrow(*o, *foot, t.muted, 2)
            s.text(foot[0] + 14, foot[1] + 30, "x − μ1", t.muted, size=21, anchor="end")
            yy = cam(y_ln)
            s.arrow(*o, *yy, color, 3.4)
            s.dot(*yy, color, 5.5)
            s.text((o[0] + yy[0]) / 2, (o[1] + yy[1]) / 2 - 12, "y", color, anchor="middle", italic=True,
                   weight="bold", size=22)
        s.text(cx, 408, "on the sphere" if panel == 0 else "on the circle ⟂ 1", t.fg, anchor="middle", size=22)
        s.text(cx, 440, "‖y‖ = √d  (ε → 0)" if panel == 0 else "‖y‖ = √d,  mean(y) = 0", t.muted, size=21,
               anchor="middle")
    return s


# ------------------------------------------------------------------------------------------------
# d. the Jacobian as a projection
# ------------------------------------------------------------------------------------------------
JAC_G = (0.9, 0.7, 0.9)    # g in the frame (along 1, along x̂, along the tangent); the 2-D panel has no 1 part


def jacobian(t: Theme) -> Svg:
    s = Svg(600, 480, "The input gradient is a projection of g = γ ⊙ ȳ",
            "Two sketches with eps -> 0. Left, RMSNorm, in the plane spanned by x̂ and g: the input gradient "
            "is r (I − x̂x̂ᵀ/d) g. Since ‖x̂‖² = d, the matrix P = I − x̂x̂ᵀ/d removes the component of g "
            "along x̂ (the radial direction, dashed) and keeps the part Pg tangent to the sphere of radius "
            "sqrt(d); r = 1/rms(x) then scales it. Moving x along its own direction does not change the "
            "output, so the gradient has no component along x. Right, LayerNorm in 3-D: "
            "P = I − 11ᵀ/d − x̂x̂ᵀ/d also removes the component along the all-ones vector 1 (the vertical "
            "drop), and because x̂ is orthogonal to 1 the two removals do not interfere: what remains is "
            "tangent to LayerNorm's circle. With eps > 0, ‖x̂‖² < d and the radial part is only mostly removed.",
            t)
    along_n, along_x, along_t = JAC_G
    # ---- left: RMSNorm in the plane spanned by x̂ and g (screen y points down) ----
    cx, cy, rad = 130, 290, 112
    s.text(150, 36, "RMSNorm", t.rms, size=24, anchor="middle", weight="bold")
    s.circle(cx, cy, rad, t.muted, 1.5, fill=t.tint, fill_opacity=0.10)
    ang = math.radians(35)
    ur = np.array([math.cos(ang), -math.sin(ang)])      # radial unit
    ut = np.array([-math.sin(ang), -math.cos(ang)])     # tangent unit (counter-clockwise)
    c = np.array([cx, cy], dtype=float)
    p = c + rad * ur                                    # x̂ on the circle of radius sqrt(d)
    unit = rad / math.sqrt(3)                           # pixels per unit of x̂'s scale, as if d = 3
    s.line(*(p - 0.9 * unit * ut), *(p + 2.2 * unit * ut), t.muted, 1.5, dash="4 5")   # tangent line
    s.arrow(*c, *p, t.fg, 2.5)
    s.dot(*c, t.fg, 3.5)
    s.text((c[0] + p[0]) / 2 + 12, (c[1] + p[1]) / 2 + 22, "x̂", t.fg, italic=True, size=22)
    g_tip = p + unit * (along_t * 1.9 * ut + along_x * 1.9 * ur)
    pg_tip = p + unit * along_t * 1.9 * ut
    s.line(*g_tip, *pg_tip, t.bad, 2.2, dash="5 5")
    s.arrow(*p, *g_tip, t.fg, 2.6)
    s.text(g_tip[0] + 8, g_tip[1] + 4, "g", t.fg, italic=True, weight="bold", size=22)
    s.arrow(*p, *pg_tip, t.rms, 3.4)
    s.text(pg_tip[0] - 10, pg_tip[1] + 4, "Pg", t.rms, weight="bold", size=22, anchor="end")
    s.text((g_tip[0] + pg_tip[0]) / 2 - 6, (g_tip[1] + pg_tip[1]) / 2 - 14, "radial", t.bad, size=21,
           anchor="end")
    s.text(150, 442, "P = I − x̂x̂ᵀ/d", t.fg, anchor="middle", size=22)

    # ---- right: LayerNorm in 3-D ----
    n = _unit([1, 1, 1])
    R = math.sqrt(3)
    cam = Camera(tilt_deg=45, scale=78, origin=(400, 262))
    a, b = cam.plane_basis()
    s.text(450, 36, "LayerNorm", t.ln, size=24, anchor="middle", weight="bold")
    o = cam([0, 0, 0])
    _draw_3d_curve(s, cam, _circle_points([0, 0, 0], a, b, R), t.ln, 2.4)
    s.dot(*o, t.fg, 3.5)
    top = cam(1.3 * n)
    s.arrow(*o, *top, t.fg, 2.2)
    s.text(top[0] - 10, top[1] + 8, "1", t.fg, weight="bold", size=22, anchor="end")
    th = math.radians(55)
    uh = math.cos(th) * a + math.sin(th) * b            # unit vector along x̂ (front right of the circle)
    xh = R * uh
    tang = np.cross(n, uh)
    if tang @ cam.right < 0:
        tang = -tang                                     # draw the tangent part towards the right
    s.arrow(*o, *cam(xh), t.fg, 2.5)
    px, py = cam(xh)
    s.text((o[0] + px) / 2 - 8, (o[1] + py) / 2 + 22, "x̂", t.fg, italic=True, size=22, anchor="end")
    gvec = 1.5 * (along_n * n - along_x * uh + along_t * tang)    # this g points inwards: either sign works
    g_plane = gvec - (gvec @ n) * n
    g_tan = (gvec @ tang) * tang
    s.line(*cam(xh - 0.6 * tang), *cam(xh + 1.6 * tang), t.muted, 1.5, dash="4 5")
    tip, mid, end = cam(xh + gvec), cam(xh + g_plane), cam(xh + g_tan)
    s.line(*tip, *mid, t.bad, 2.2, dash="5 5")
    s.line(*mid, *end, t.bad, 2.2, dash="5 5")
    s.arrow(*cam(xh), *tip, t.fg, 2.6)
    s.text(tip[0] - 4, tip[1] - 12, "g", t.fg, italic=True, weight="bold", size=22, anchor="middle")
    s.text((tip[0] + mid[0]) / 2 + 8, (tip[1] + mid[1]) / 2 + 8, "1", t.bad, size=21, weight="bold")
    s.arrow(*cam(xh), *end, t.ln, 3.4)
    s.text(end[0] - 4, end[1] + 32, "Pg", t.ln, weight="bold", size=22, anchor="middle")
    s.text(450, 442, "P = I − 11ᵀ/d − x̂x̂ᵀ/d", t.fg, anchor="middle", size=22)
    s.text(300, 474, "input gradient x̄ = r · Pg,  r = 1/rms", t.muted, anchor="middle", size=21)
    return s
