"""Where the 2025-2026 additions sit in a block: ``python -m reference_impl.studies.block_diagrams``.

Writes ``docs/assets/diagrams/blocks/<name>.svg`` and ``<name>-dark.svg`` with the primitives of
:mod:`reference_impl.studies.diagrams` (text legible in a phone column, no opaque background), in the style
of :mod:`reference_impl.studies.placement_diagrams`:

- ``attention``: one attention sub-layer with every norm and gate a 2025-2026 model adds to it: QK-norm on
  queries and keys, the value norm, a learned sink logit beside the keys, and a sigmoid gate on the output;
- ``gated-norm``: the two places of the gate in a gated RMSNorm (after the normalization, before it);
- ``hyper-connections``: manifold-constrained hyper-connections (mHC), several residual streams mixed by a
  doubly stochastic matrix, collapsed into a sub-layer's input and expanded from its output.

Each label that names models is backed by :data:`SOURCES` (a line of the installed modeling file) and each
drawn order by the catalog: tests/studies/test_block_diagrams.py checks both and that the committed files
are what this module writes.
"""
from __future__ import annotations

from pathlib import Path

from .diagrams import REPO, THEMES, Svg, Theme
from .placement_diagrams import diagram_cli, write_files

OUT_DIR = REPO / "docs" / "assets" / "diagrams" / "blocks"

# label -> (model folder in transformers/models, a line its modeling file holds), for every model a picture names
SOURCES = {
    "gate": (("qwen3_next", "attn_output = attn_output * torch.sigmoid(gate)"),
             ("qwen3_5", "attn_output = attn_output * torch.sigmoid(gate)")),
    "sink": (("gpt_oss", "combined_logits = torch.cat([attn_weights, sinks], dim=-1)"),
             ("deepseek_v4", "combined_logits = torch.cat([attn_weights, sinks], dim=-1)")),
    "v_norm": (("gemma3n", "self.v_norm = Gemma3nRMSNorm(dim=config.head_dim, eps=config.rms_norm_eps, with_scale=False)"),
               ("gemma4", "self.v_norm = Gemma4RMSNorm(self.head_dim, eps=config.rms_norm_eps, with_scale=False)")),
    "gate_after": (("qwen3_next", "class Qwen3NextRMSNormGated"), ("kimi_linear", "class KimiLinearRMSNormGated")),
    "gate_before": (("mamba2", "class MambaRMSNormGated"),
                    ("falcon_h1", "if not self.norm_before_gate and gate is not None:")),
    "mhc": (("deepseek_v4", "self.input_norm = DeepseekV4UnweightedRMSNorm(eps=config.rms_norm_eps)"),
            ("deepseek_v4", "comb = comb / (comb.sum(dim=-2, keepdim=True) + self.hc_eps)")),
}
ATTENTION_NOTES = (("QK-norm", "Qwen3, Gemma 3, DeepSeek-V4"), ("value norm", "Gemma 3n, Gemma 4"),
                   ("sink s", "GPT-OSS, DeepSeek-V4"), ("gate \u03c3", "Qwen3-Next, Qwen3.5"))
ATTENTION_DESC = ("One attention sub-layer of a 2025-2026 model: the queries and keys are normalized per head "
                  "(QK-norm), the values too in Gemma 3n and Gemma 4 (a value norm without gain); a learned sink "
                  "logit joins each head's softmax and takes probability without contributing a value (GPT-OSS, "
                  "DeepSeek-V4); the attention output is multiplied by a sigmoid gate computed from the block's "
                  "input before the output projection (Qwen3-Next, Qwen3.5).")
# (title, steps top to bottom, models); "N" the normalization, "g" the product with the gate's activation
GATED = (("gate after", ("N", "g"), "Qwen3-Next, Kimi"), ("gate before", ("g", "N"), "Mamba-2, Falcon-H1*"))
GATED_DESC = ("Gated RMSNorm: on the left the row is normalized and then multiplied by the activation of the gate "
              "(Qwen3-Next, Kimi Linear, Falcon-H1 by default); on the right x is multiplied by silu of the gate "
              "first and the product is normalized, so the gate changes the statistics (Mamba-2, and Falcon-H1 "
              "with mamba_norm_before_gate=False).")
MHC_DESC = ("Manifold-constrained hyper-connections (DeepSeek-V4): the residual stream is n streams; an RMS "
            "normalization without gain of all streams together feeds a small projection that gives three weights: "
            "pre collapses the streams into the sub-layer's input (which the usual norm then normalizes), post "
            "spreads the sub-layer's output back over the streams, and a doubly stochastic matrix mixes the "
            "streams on the residual path.")


def _box(s: Svg, cx, y, w, h, label, color, filled=True, size=16):
    s.rect(cx - w / 2, y, w, h, color, 2.0, fill=color if filled else s.t.tint,
           fill_opacity=0.22 if filled else 0.14, rx=8)
    s.text(cx, y + h / 2 + size * 0.35, label, s.t.fg, anchor="middle", size=size)


def attention(t: Theme) -> Svg:
    s = Svg(340, 500, "Attention in 2025-2026: QK-norm, value norm, sink logit and output gate", ATTENTION_DESC, t)
    s.text(170, 26, "Attention, 2025-2026", t.fg, size=19, anchor="middle", weight="bold")
    s.text(150, 54, "x (normalized input)", t.fg, anchor="middle", size=15)
    s.line(30, 62, 255, 62, t.fg, 2)
    xs = (70, 150, 230)
    for x, name in zip(xs, ("q", "k", "v")):
        s.arrow(x, 62, x, 80, t.fg, 2)
        _box(s, x, 80, 64, 32, "W" + name, t.fg, filled=False)
        s.arrow(x, 112, x, 128, t.fg, 2)
        color = t.rms if name != "v" else t.ln
        _box(s, x, 128, 64, 32, "Norm", color)
        s.arrow(x, 160, x, 190, t.fg, 2)
    s.text(266, 149, "value norm", t.ln, size=12)
    s.text(110, 180, "QK-norm", t.rms, anchor="middle", size=13)
    _box(s, 160, 190, 240, 40, "softmax([q\u00b7k, s]) v", t.fg, filled=False, size=16)
    # the sink: one learned logit per head, joining the keys' logits in the softmax
    s.circle(316, 210, 14, t.bad, 2.0, fill=t.bad, fill_opacity=0.18)
    s.text(316, 216, "s", t.fg, anchor="middle", size=17, italic=True)
    s.arrow(302, 210, 281, 210, t.bad, 2)
    s.arrow(165, 230, 165, 262, t.fg, 2)
    # the gate: sigmoid of a projection of the block's input, element-wise on the attention output
    s.circle(165, 276, 14, t.good, 2.0)
    s.text(165, 282, "\u00d7", t.fg, anchor="middle", size=17)
    s.poly([(30, 62), (30, 276), (50, 276)], t.good, 2.2)
    _box(s, 82, 262, 64, 28, "\u03c3(xW\u1d4d)", t.good, size=14)
    s.arrow(114, 276, 151, 276, t.good, 2.2)
    s.arrow(165, 290, 165, 310, t.fg, 2)
    _box(s, 165, 310, 64, 32, "Wo", t.fg, filled=False)
    s.arrow(165, 342, 165, 362, t.fg, 2)
    y = 388
    for what, models in ATTENTION_NOTES:
        s.text(16, y, what + ":", t.fg, size=13, weight="bold")
        s.text(114, y, models, t.muted, size=13)
        y += 26
    return s


def gated_norm(t: Theme) -> Svg:
    s = Svg(340, 360, "Gated RMSNorm: the gate after the normalization or before it", GATED_DESC, t)
    s.text(170, 26, "Gated RMSNorm", t.fg, size=19, anchor="middle", weight="bold")
    for cx, (title, steps, models) in zip((90, 250), GATED):
        s.text(cx, 58, title, t.fg, anchor="middle", size=16, weight="bold")
        s.text(cx, 86, "x", t.fg, anchor="middle", size=18, italic=True)
        y = 92
        for st in steps:
            s.arrow(cx, y, cx, y + 22, t.fg, 2)
            y += 22
            if st == "N":
                _box(s, cx, y, 110, 40, "RMSNorm \u00b7 w", t.rms, size=15)
                y += 40
            else:
                s.circle(cx, y + 16, 16, t.good, 2.0)
                s.text(cx, y + 22, "\u00d7", t.fg, anchor="middle", size=17)
                gx = cx + 58
                s.text(gx, y + 4, "act(z)" if steps[0] == "N" else "silu(z)", t.good, anchor="middle", size=13)
                s.arrow(gx - 8, y + 10, cx + 16, y + 16, t.good, 2)
                y += 32
        s.arrow(cx, y, cx, y + 24, t.fg, 2)
        s.text(cx, y + 50, models, t.muted, anchor="middle", size=13)
    s.text(170, 316, "* with mamba_norm_before_gate=False", t.muted, anchor="middle", size=13)
    s.text(170, 342, "z: the gate, a second projection of x", t.muted, anchor="middle", size=13)
    return s


def hyper_connections(t: Theme) -> Svg:
    s = Svg(340, 470, "Manifold-constrained hyper-connections: n residual streams around a sub-layer", MHC_DESC, t)
    s.text(170, 26, "Hyper-connections (mHC)", t.fg, size=19, anchor="middle", weight="bold")
    s.text(170, 52, "n streams (DeepSeek-V4: n = 4)", t.muted, anchor="middle", size=13)
    lanes = (40, 56, 72, 88)
    for x in lanes:
        s.line(x, 62, x, 340, t.muted, 2.2)
    # weights from all streams, normalized without a gain
    _box(s, 216, 66, 196, 34, "RMS, no gain", t.rms, size=14)
    s.line(88, 83, 118, 83, t.rms, 2)
    s.arrow(216, 100, 216, 116, t.fg, 2)
    _box(s, 216, 116, 196, 30, "pre, post, mix", t.fg, filled=False, size=14)
    # collapse -> norm -> F -> expand
    s.arrow(216, 146, 216, 166, t.fg, 2)
    _box(s, 216, 166, 150, 30, "collapse (pre)", t.fg, filled=False, size=14)
    s.line(88, 181, 141, 181, t.fg, 1.6)
    s.arrow(216, 196, 216, 212, t.fg, 2)
    _box(s, 216, 212, 150, 32, "Norm", t.rms, size=15)
    s.arrow(216, 244, 216, 260, t.fg, 2)
    _box(s, 216, 260, 150, 32, "Attn / MLP", t.fg, filled=False, size=15)
    s.arrow(216, 292, 216, 308, t.fg, 2)
    _box(s, 216, 308, 150, 30, "expand (post)", t.fg, filled=False, size=14)
    s.line(216, 338, 216, 372, t.fg, 2)
    # the residual path: streams mixed by a doubly stochastic matrix, then added
    _box(s, 64, 340, 80, 30, "mix", t.good, size=14)
    s.poly([(64, 370), (64, 396)], t.fg, 2)
    s.arrow(64, 396, 126, 396, t.fg, 2)
    s.circle(140, 396, 14, t.fg, 2.0)
    s.line(132, 396, 148, 396, t.fg, 2.0)
    s.line(140, 388, 140, 404, t.fg, 2.0)
    s.poly([(216, 372), (216, 396)], t.fg, 2)
    s.arrow(216, 396, 154, 396, t.fg, 2)
    s.arrow(140, 410, 140, 426, t.fg, 2)
    s.text(150, 423, "n streams", t.muted, size=13)
    s.text(170, 448, "mix: rows and columns sum to 1", t.muted, anchor="middle", size=13)
    s.text(170, 466, "(Sinkhorn), so the streams keep their scale", t.muted, anchor="middle", size=13)
    return s


BUILDERS = {"attention": attention, "gated-norm": gated_norm, "hyper-connections": hyper_connections}


def render_all() -> dict[str, str]:
    """File name -> SVG text for every block diagram in both palettes."""
    return {f"{name}{t.suffix}.svg": build(t).render() for name, build in BUILDERS.items() for t in THEMES}


def write(out_dir: Path = OUT_DIR) -> list[Path]:
    return write_files(render_all(), out_dir)


def main(argv=None) -> None:
    diagram_cli(argv, __doc__.split("\n")[0], OUT_DIR, render_all)


if __name__ == "__main__":
    main()
